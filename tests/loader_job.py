"""A training loop without a model, for kill-and-resume tests of every loader.

Run under torchrun: each step every rank appends the keys of the samples in its batch to
``trace-rank{R}.jsonl``, then all ranks gather their loader states and rank 0 writes a
checkpoint (atomically: temp file + rename). ``--resume`` restarts from that checkpoint, which
may come from another world size (elastic). The test kills the whole process group with
SIGKILL at a random step and compares traces with an uninterrupted run's.

Usage: python tests/loader_job.py KIND DATA OUT [--resume] [--batch-size B] [--workers W]
    [--store PATH_OR_URL]
KIND: ir (lading.loader over TrainingGroups), lm (LanguageModelLoader), parquet. ``--store``:
ir over another store (an ``s3://`` one: its node cache from ``LADING_CACHE``); the keys then
hold each document's CRC32 too, so a document read wrong shows.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import zlib
from pathlib import Path
from typing import Any

import torch.distributed as dist

from lading.train import ddp


def ir_keys(items: list[dict[str, Any]]) -> list[Any]:
    return [[item["qid"], *item["doc_ids"]] for item in items]


class TextKeys:
    """ir keys with the CRC32 of each document's text, read from ``store`` (in the workers)."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def __call__(self, items: list[dict[str, Any]]) -> list[Any]:
        texts = [self.store.get_many_bytes(item["doc_ids"]) for item in items]
        return [[*key, *map(zlib.crc32, t)] for key, t in zip(ir_keys(items), texts)]


def make_loader(
    kind: str, data: Path, batch: int, workers: int, world: Any, store: str | None = None
) -> Any:
    if kind == "ir":
        import lading
        from lading.ir import TrainingGroups, read_qrels, read_queries

        docs = lading.open_store(store or data / "store")
        groups = TrainingGroups(
            docs,
            read_queries(data / "queries.tsv"),
            read_qrels(data / "qrels.txt"),
            sampling="random",
            group_size=3,
            seed=4,
        )
        return lading.loader(
            groups, batch, collate_fn=TextKeys(docs) if store else ir_keys,
            num_workers=workers, seed=2, world=world,
            multiprocessing_context="fork",
        )  # fmt: skip
    if kind == "lm":
        from lading.lm import LanguageModelLoader, Streams, TokenCorpus

        corpus = TokenCorpus.open(data / "corpus")
        return LanguageModelLoader(corpus, batch, Streams(6), world=world)
    from lading.tabular import PartitionedParquet

    return PartitionedParquet(
        data / "sessions.parquet", batch, columns=["session_id"], world=world, seed=6,
        buffer_rows=16, equalize="pad", num_workers=workers, multiprocessing_context="fork",
    )  # fmt: skip


def keys(kind: str, batch: Any) -> list[Any]:
    if kind == "ir":
        return list(batch)
    if kind == "lm":
        x, y = batch
        return [[a, b] for a, b in zip(x.ravel().tolist(), y.ravel().tolist())]
    return [int(s) for s in batch["session_id"].tolist()]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=["ir", "lm", "parquet"])
    parser.add_argument("data", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--batch-size", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--step-seconds", type=float, default=0.1, help="the model's compute")
    parser.add_argument("--store", help="ir: read this store (a path or s3:// URL) instead")
    args = parser.parse_args()
    world, _ = ddp.setup()
    loader = make_loader(args.kind, args.data, args.batch_size, args.workers, world, args.store)
    loader.set_epoch(1)
    ckpt = args.out / "checkpoint.json"
    step = 0
    if args.resume and ckpt.is_file():
        saved = json.loads(ckpt.read_text())
        loader.load_state_dict(saved["loaders"][world.rank % len(saved["loaders"])])
        step = saved["step"]
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / f"trace-rank{world.rank}.jsonl", "a") as trace:
        for batch in loader:
            step += 1
            record = {"step": step, "world_size": world.world_size, "keys": keys(args.kind, batch)}
            trace.write(json.dumps(record) + "\n")
            trace.flush()
            time.sleep(args.step_seconds)
            states = ddp.gather_objects(loader.state_dict())
            if world.rank == 0:
                tmp = ckpt.with_suffix(f".tmp{os.getpid()}")
                tmp.write_text(json.dumps({"step": step, "loaders": states}))
                os.replace(tmp, ckpt)
            ddp.barrier()
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
