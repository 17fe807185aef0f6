"""The GPU leg on the CPU: bytes each cross-encoder step copies to the device, and what the
prefetcher costs the host.

    python benchmarks/bench_device.py [--batches 40] [--repeats 3]

1. Host-to-device bytes per step of a 32 groups x 8 documents x 512 tokens cross-encoder batch,
   built by the real collator from a synthetic document collection (long enough to fill 512
   tokens): today's int64 ids + mask + token types, the narrow batch (uint16 ids + two int32 per
   row, widened on the device) and the rows batch (query ids + document rows, for a store held
   on the device). Also the exact 32x8x512 figure.
2. The prefetcher's CPU overhead against the plain loop, side by side in one process: the
   pass-through it is on the CPU by default, and the pull-ahead (depth 2: a state snapshot and
   a copy of each batch) that a GPU run does, over the real IR loader and over a loader of
   trivial batches (the wrapper's own cost per batch).
3. What widening on the device costs when the device is the CPU (per batch).

No GPU here: the efficiency E, step times and the GPU-resident strategy are measured by
``lading bench`` on a GPU (see the section's note). Writes the "GPU leg (CPU measurements)"
section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import os

os.environ["TOKENIZERS_PARALLELISM"] = "false"

import argparse
import platform
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import lading
from common import HERE, add_write_flag, write_section
from lading.bench.synth import synth
from lading.device import DevicePrefetcher, batch_bytes, to_device
from lading.ir import CrossEncoderCollator, TrainingGroups, read_qrels, read_queries
from lading.ir.layouts import assemble, expand
from lading.world import World

GROUPS, GROUP_SIZE, MAX_LENGTH = 32, 8, 512


def collection(work: Path) -> tuple[Any, TrainingGroups, Path]:
    """A tokenized store of 600 synthetic documents (most longer than 512 tokens), groups."""
    from lading.stores.tokens import save_tokenizer, train_tokenizer

    files = synth("documents", 600, work / "docs", queries=200)
    texts = [r.text for _, r in zip(range(2000), lading.read_records(files.corpus))]
    tok = save_tokenizer(train_tokenizer(texts, "wordpiece", 30_522), work / "tok.json")
    store = lading.build_store(
        files.corpus, work / "store", tokenizer=tok, max_length=MAX_LENGTH, progress=False
    )
    groups = TrainingGroups(
        store,
        read_queries(files.queries),
        read_qrels(files.qrels),
        group_size=GROUP_SIZE,
        sampling="random",
        on_missing="skip",
    )
    return store, groups, tok


def bytes_per_step(store: Any, groups: TrainingGroups, tok: Path, batches: int) -> dict[str, Any]:
    items = [groups[i % len(groups)] for i in range(GROUPS * batches)]
    out: dict[str, Any] = {}
    for emit in ("wide", "narrow", "rows"):
        collate = CrossEncoderCollator(store, tok, MAX_LENGTH, emit=emit)
        made = [collate(items[b * GROUPS : (b + 1) * GROUPS]) for b in range(batches)]
        out[emit] = sum(batch_bytes(b) for b in made) / batches
        if emit == "wide":
            out["width"] = sum(b["input_ids"].shape[1] for b in made) / batches
    rows = GROUPS * GROUP_SIZE
    out["exact_wide"] = 3 * rows * MAX_LENGTH * 8 + rows * 4  # + float32 labels
    out["exact_narrow"] = rows * MAX_LENGTH * 2 + rows * 2 * 4 + rows * 4
    return out


def timed(make: Callable[[], Any], wrap: Callable[[Any], Any], least: int = 200) -> float:
    """Seconds per batch of iterating ``wrap(make())`` epoch after epoch, ``least`` batches
    at least."""
    loader = wrap(make())
    start, n, epoch = time.perf_counter(), 0, 0
    while n < least:
        loader.set_epoch(epoch)
        for _batch in loader:
            n += 1
        epoch += 1
    return (time.perf_counter() - start) / n


def overhead(groups: TrainingGroups, store: Any, tok: Path, repeats: int) -> dict[str, Any]:
    collate = CrossEncoderCollator(store, tok, MAX_LENGTH, emit="narrow")

    def ir_loader() -> Any:
        return lading.loader(groups, GROUPS, collate, seed=0, world=World(0, 1))

    def trivial_loader() -> Any:
        def small(items: list[int]) -> dict[str, Any]:
            return {"input_ids": torch.tensor(items, dtype=torch.int64)}

        return lading.loader(list(range(64_000)), 8, small, seed=0, world=World(0, 1))

    ways: dict[str, Callable[[Any], Any]] = {
        "plain": lambda loader: loader,
        "pass-through": lambda loader: DevicePrefetcher(loader, "cpu"),
        "depth 2": lambda loader: DevicePrefetcher(loader, "cpu", depth=2),
    }
    out: dict[str, Any] = {}
    for name, make in (("ir", ir_loader), ("trivial", trivial_loader)):
        times: dict[str, list[float]] = {
            way: [] for way in ways
        }  # interleaved: machine noise hits all alike
        for _ in range(repeats):
            for way, wrap in ways.items():
                times[way].append(timed(make, wrap))
        out[name] = {way: min(values) for way, values in times.items()}
    return out


def expand_cost(store: Any, groups: TrainingGroups, tok: Path, repeats: int) -> dict[str, float]:
    items = [groups[i % len(groups)] for i in range(GROUPS)]
    narrow = CrossEncoderCollator(store, tok, MAX_LENGTH, emit="narrow")(items)
    rows = CrossEncoderCollator(store, tok, MAX_LENGTH, emit="rows")(items)
    resident = to_device(store, "cpu")
    out = {}
    for name, fn in (
        ("expand", lambda: expand(narrow, "cpu")),
        ("assemble", lambda: assemble(rows, resident)),
    ):
        best = float("inf")
        for _ in range(repeats * 5):
            start = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - start)
        out[name] = best
    return out


def render(sizes: dict[str, Any], over: dict[str, Any], cost: dict[str, float]) -> str:
    kib = 2**10
    ir, trivial = over["ir"], over["trivial"]

    def extra(table: dict[str, float], way: str) -> str:
        delta = table[way] - table["plain"]
        return f"{delta * 1e6:+,.1f} µs ({100 * delta / table['plain']:+.1f}%)"

    return "\n".join(
        [
            f"Machine: {os.cpu_count()} CPUs ({platform.machine()}, load average "
            f"{os.getloadavg()[0]:.1f} while measuring), no GPU; torch {torch.__version__}, "
            f"1 thread. Batches: {GROUPS} groups x {GROUP_SIZE} documents, max length "
            f"{MAX_LENGTH}, synthetic documents (lading synth), WordPiece vocabulary 30,522 "
            "(uint16 ids).",
            "",
            'The GPU figures are in "GPU leg (H100)" below (benchmarks/gpu_leg.sh); the CUDA '
            "code paths (side-stream copies, events, `record_stream`, widening and gathers on "
            "the GPU) ran there and their tests pass.",
            "",
            "| host-to-device bytes per step | KiB | of today's |",
            "|---|---:|---:|",
            f"| today: int64 ids + mask + token types + labels (measured, mean width "
            f"{sizes['width']:.0f}) | {sizes['wide'] / kib:,.1f} | 1 |",
            f"| narrow: uint16 ids + length + segment start (measured) | "
            f"{sizes['narrow'] / kib:,.1f} | {sizes['narrow'] / sizes['wide']:.3f} |",
            f"| rows: query ids + document rows, store on the device (measured) | "
            f"{sizes['rows'] / kib:,.1f} | {sizes['rows'] / sizes['wide']:.4f} |",
            f"| today at exactly 32x8x512 | {sizes['exact_wide'] / kib:,.1f} | 1 |",
            f"| narrow at exactly 32x8x512 | {sizes['exact_narrow'] / kib:,.1f} | "
            f"{sizes['exact_narrow'] / sizes['exact_wide']:.3f} |",
            "",
            "Target: narrow <= 1/4 of today's bytes per step. The expanded tensors equal "
            "today's exactly (tests/device/test_device.py).",
            "",
            "| prefetcher on the CPU, per batch | plain loop | pass-through (CPU default) | "
            "depth 2 (pull-ahead, as on a GPU) |",
            "|---|---:|---:|---:|",
            f"| IR loader (collating 32x8x512 narrow) | {ir['plain'] * 1e3:,.2f} ms | "
            f"{extra(ir, 'pass-through')} | {extra(ir, 'depth 2')} |",
            f"| trivial batches (the wrapper's own cost) | {trivial['plain'] * 1e6:,.1f} µs | "
            f"{extra(trivial, 'pass-through')} | {extra(trivial, 'depth 2')} |",
            "",
            "Each figure is the fastest of the repeats (200 batches or more each), measured "
            "interleaved; on this shared, "
            "busy machine they still move by tens of percent from run to run: the "
            "pass-through adds one generator step and nothing else, so its figure over the IR "
            "loader is this machine's noise. "
            "Depth 2 on the CPU also clones each batch (a loader may reuse its buffers); on a "
            "GPU that copy is the pinning the copy needs anyway. Per batch it snapshots the "
            "loader state (so a checkpoint counts only batches handed out).",
            "",
            f"Widening a narrow batch on the CPU: {cost['expand'] * 1e3:,.2f} ms per batch; "
            f"assembling a rows batch from resident tokens on the CPU: "
            f"{cost['assemble'] * 1e3:,.2f} ms (on a GPU both are a few small kernels).",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=20, help="batches per byte count")
    parser.add_argument("--repeats", type=int, default=5, help="timings per way (best kept)")
    add_write_flag(parser)
    args = parser.parse_args()
    torch.set_num_threads(1)  # one core, as a training process's loop has; stable on a busy host
    with tempfile.TemporaryDirectory(prefix="bench-device-") as tmp:
        store, groups, tok = collection(Path(tmp))
        sizes = bytes_per_step(store, groups, tok, args.batches)
        print(f"bytes/step: narrow/today {sizes['narrow'] / sizes['wide']:.3f}", flush=True)
        over = overhead(groups, store, tok, args.repeats)
        print(f"overhead: {over}", flush=True)
        cost = expand_cost(store, groups, tok, args.repeats)
    report = render(sizes, over, cost)
    print(report)
    write_section(
        HERE / "RESULTS.md",
        "GPU leg (CPU measurements)",
        report,
        "python benchmarks/bench_device.py",
        write=args.write,
    )


if __name__ == "__main__":
    main()
