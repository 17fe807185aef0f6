"""One rank of a two-"node" job: build, stage to the node's own disk, read a share of the store.

Run under torchrun (one launch per "node"): ``python tests/multinode_job.py SOURCE SHARED``,
with ``NODE_DIR`` (this node's private directory) and ``LADING_SHARED_FS`` in the environment.
Every real build and every staging copy appends a line to ``SHARED/events.log`` (the job wraps
the two functions that write, to count them; nothing else changes). Each rank writes the ids it
read in epoch 0 to ``SHARED/ids-rank{R}.json``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import lading
import lading.disk.stage
import lading.stores.building.build
from lading.train import ddp
from lading.world import World, resolve_shared_fs

source, shared = Path(sys.argv[1]), Path(sys.argv[2])
node_dir = Path(os.environ["NODE_DIR"])


def logged(kind: str, fn: Any) -> Any:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        world = World.detect()
        with open(shared / "events.log", "a") as log:
            log.write(f"{kind} {node_dir.name} {world.rank} {world.local_rank}\n")
        return fn(*args, **kwargs)

    return wrapper


lading.stores.building.build.write_shard = logged("build", lading.stores.building.build.write_shard)  # type: ignore[attr-defined]
lading.disk.stage._copy = logged("stage", lading.disk.stage._copy)  # type: ignore[attr-defined]

world, _ = ddp.setup("ddp")
dest = (shared if resolve_shared_fs() else node_dir) / "store"
lading.build_store(source, dest)
store = lading.open_store(dest, stage_to=node_dir / "staged")
assert store.path == node_dir / "staged" / "store", store.path
ddp.barrier()

ids = store.ids()
reader = lading.loader(store_ids := list(range(len(ids))), batch_size=7, collate_fn=list, seed=3)
reader.set_epoch(0)
read = [ids[i] for batch in reader for i in batch]
(shared / f"ids-rank{world.rank}.json").write_text(
    json.dumps({"ids": read, "batches": len(reader), "node": node_dir.name, "n": len(store_ids)})
)
ddp.barrier()
ddp.teardown()
