"""``build_store(source, "s3://...")`` called by every rank of a live process group.

Rank 0 builds a local copy and uploads it while the others wait at a barrier; that local copy
is rank 0's alone, so its build must not start a collective of its own (it did: the builder's
group logic gathered from ranks that were waiting at the barrier, and both hung for ever).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import lading
from distributed import run_processes

pytestmark = pytest.mark.slow  # two spawned ranks joining a gloo group, over the local S3

DOCS = 60


def _text(i: int) -> str:
    return f"document {i} of the bucket build, rank-independent"


def _build_in_rank(rank: int, world: int, src: str, url: str, cache: str) -> dict[str, Any]:
    import torch.distributed as dist

    assert dist.is_initialized() and dist.get_world_size() == world
    store = lading.build_store(src, url, cache=f"{cache}/{rank}", progress=False)
    return {
        "snapshot": store.snapshot,
        "len": len(store),
        "texts": {f"d{i}": store[f"d{i}"] for i in (0, 7, DOCS - 1)},
    }


def test_every_rank_builds_into_a_bucket_and_reads_it(tmp_path: Path, s3: Any, bucket: str) -> None:
    src = tmp_path / "docs.jsonl"
    src.write_text(
        "".join(json.dumps({"id": f"d{i}", "text": _text(i)}) + "\n" for i in range(DOCS))
    )
    url = f"s3://{bucket}/in-group"
    # a hang (the ranks in two different collectives) fails here, the ranks killed
    results = run_processes(_build_in_rank, 2, str(src), url, str(tmp_path / "cache"), timeout=60)
    assert len({r["snapshot"] for r in results}) == 1, results  # one build, one snapshot
    for r in results:
        assert r["len"] == DOCS
        assert r["texts"] == {f"d{i}": _text(i) for i in (0, 7, DOCS - 1)}
    assert lading.open_store(url, cache=str(tmp_path / "reader")).snapshot == results[0]["snapshot"]
