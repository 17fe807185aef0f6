"""Where does a cross-encoder step wait for the GPU? The bench's train loop, per strategy, under
torch's sync debug mode and its profiler.

    python benchmarks/gpu_sync_probe.py DIR [--steps 20] [--workers 0]

DIR is what benchmarks/gpu_prep.py wrote (docs/, model/). For ``packed`` (wide batches copied
in the step), ``packed+prefetch`` (narrow batches copied ahead on a side stream, widened on the
device) and ``gpu-resident`` (rows batches assembled from the store's tokens on the device),
it runs the real loop (:class:`lading.train.Trainer`, as ``lading bench`` does) and prints:

1. every place the host waited for the device (``torch.cuda.set_sync_debug_mode("warn")``),
   by file and line, with a count: a loop that syncs every step cannot prepare the next batch
   while the GPU computes;
2. step time with the loader and, on the same batches already on the device, the replay
   (E = replay / loop, as the bench), in CUDA-synchronized windows;
3. the profiler's top host operations by self CPU time over a few steps.

On a CPU there is nothing to wait for: it runs, and says so.
"""

from __future__ import annotations

import os

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse
import collections
import time
import warnings
from pathlib import Path
from typing import Any

import torch

from lading.bench.data import EMIT
from lading.bench.synthetic import Recorded
from lading.bench.window import Endless
from lading.device import to_device
from lading.ir import CrossEncoder, CrossEncoderCollator, TrainingGroups, read_qrels, read_queries
from lading.ir.train import CrossEncoderStep
from lading.loading.map_workload import loader as make_loader
from lading.stores import build_store
from lading.train import LoopConfig, Trainer
from lading.world import World

STRATEGIES = ("packed", "packed+prefetch", "gpu-resident")


def parts(
    root: Path, workers: int, emit: str, device: torch.device, shape: tuple[int, int]
) -> tuple[Any, Any, Any]:
    """The loader, the resident tokens (rows batches) and the model, as a bench cell has them."""
    docs, model_dir = root / "docs", root / "model"
    store = build_store(
        docs / "docs.jsonl",
        root / "probe-store",
        tokenizer=model_dir / "tokenizer.json",
        max_length=512,
        progress=False,
    )
    groups = TrainingGroups(
        store,
        read_queries(docs / "queries.tsv"),
        read_qrels(docs / "qrels.txt"),
        group_size=shape[1],
        sampling="random",
        on_missing="skip",
    )
    collate = CrossEncoderCollator(store, model_dir / "tokenizer.json", 512, emit=emit)
    loader = make_loader(groups, shape[0], collate, num_workers=workers, seed=0)
    resident = to_device(store, device) if emit == "rows" else None
    model = CrossEncoder.from_pretrained(model_dir).to(device)
    return loader, resident, model


def synchronized(fn: Any, device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    started = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - started


def probe(
    strategy: str,
    root: Path,
    steps: int,
    workers: int,
    device: torch.device,
    shape: tuple[int, int],
) -> None:
    emit = EMIT.get(strategy, "wide")
    loader, resident, model = parts(root, workers, emit, device, shape)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    step = CrossEncoderStep(model, device, "bf16", resident=resident)
    workload = Recorded(step, True)
    config = LoopConfig(
        5, seed=0, progress=False, memory=False, prefetch=strategy != "packed", warmup=0
    )
    trainer = Trainer(workload, Endless(loader), config, World(0, 1), device, model, optimizer)
    trainer.run()  # warm-up: allocator, kernels, pinned blocks
    waits: collections.Counter[str] = collections.Counter()
    config.total = steps
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if device.type == "cuda":
            torch.cuda.set_sync_debug_mode("warn")
        loop_s = synchronized(trainer.run, device)
        if device.type == "cuda":
            torch.cuda.set_sync_debug_mode("default")
    for w in caught:
        if "synchroniz" in str(w.message):
            waits[f"{Path(w.filename).name}:{w.lineno}: {str(w.message)[:90]}"] += 1
    config.prefetch = False
    replay = Trainer(step, workload.replay(), config, World(0, 1), device, model, optimizer)
    replay.run()
    replay_s = synchronized(replay.run, device)
    print(f"\n== {strategy} ({emit} batches, {workers} workers, {steps} steps on {device})")
    print(
        f"loop {loop_s / steps * 1e3:.1f} ms/step, replay {replay_s / steps * 1e3:.1f} ms/step, "
        f"E {replay_s / loop_s:.3f}"
    )
    print(f"host waited for the device {sum(waits.values())} times in {steps} steps:")
    for where, n in waits.most_common(12):
        print(f"  {n:4d}  {where}")
    config.prefetch, config.total = strategy != "packed", 5
    with torch.profiler.profile() as prof:
        trainer.run()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", help="what benchmarks/gpu_prep.py wrote")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per strategy")
    parser.add_argument("--workers", type=int, default=0, help="DataLoader workers")
    parser.add_argument("--batch", type=int, default=32, help="groups per step")
    parser.add_argument("--group", type=int, default=8, help="documents per group")
    parser.add_argument("--strategies", default=",".join(STRATEGIES), help="which to probe")
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu":
        print("no CUDA here: nothing waits for a device; the loop still runs end to end")
    for strategy in args.strategies.split(","):
        probe(strategy, Path(args.dir), args.steps, args.workers, device, (args.batch, args.group))


if __name__ == "__main__":
    main()
