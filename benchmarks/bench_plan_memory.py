"""The memory and CPU of a remote store's plan of an epoch: reads as arrays against a Need each.

    python benchmarks/bench_plan_memory.py [--reads 2000000] [--passages 100000] [--repeats 3]
        [--write]

A ranker's loader hands its remote store the order of the rest of the epoch and the next
(``TrainingGroups.plan`` -> ``RemoteStore.plan_rows``): MS MARCO's ~530k training pairs in
groups of 8 are ~4.3M document reads an epoch, ~8.5M in one plan on one rank. The store turns
them into a :class:`~lading.remote.schedule.Schedule`. Two routes, side by side in this one
process over one store on the local S3 (``--passages`` synthetic passages, ``--reads`` rows
drawn at random, 64 a batch):

- ``needs``: a :class:`~lading.remote.ranges.Need` a read (``store._needs``), then
  ``Schedule(needs)``: the route before this benchmark;
- ``arrays``: ``store._schedule`` (``Columns.reads`` + ``Schedule.of_arrays``): no Python
  object a read.

Per read: the peak of Python's traced allocations while the schedule is made
(``tracemalloc``, a run of its own) and what the finished schedule keeps; CPU seconds of the
making (``time.process_time``, another run, untraced). Routes alternate, ``--repeats`` each;
median [min-max]. The two schedules are checked to hold the same reads.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import lading
from common import HERE, add_write_flag, write_section
from lading.bench.synth import synth
from lading.remote.schedule import Schedule
from lading.stores.remote.store import RemoteStore
from lading.testing import LocalS3

BATCH = 64


def routes(
    store: RemoteStore, batches: list[Any], steps: list[int]
) -> dict[str, Callable[[], Any]]:
    return {
        "needs": lambda: Schedule(store._needs(batches, steps, ["text"]), steps[0]),
        "arrays": lambda: Schedule.of_arrays(*store._reads(batches, steps, ["text"]), steps[0]),
    }


def traced(make: Callable[[], Any]) -> tuple[int, int]:
    """(peak bytes while making, bytes the result keeps)."""
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    made = make()
    kept, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del made
    return peak - base, kept - base


def timed(make: Callable[[], Any]) -> float:
    gc.collect()
    started = time.process_time()
    make()
    return time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reads", type=int, default=2_000_000)
    parser.add_argument("--passages", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    add_write_flag(parser)
    args = parser.parse_args()
    rows: dict[str, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-plan-") as tmp, LocalS3() as s3:
        work = Path(tmp)
        files = synth("passages", args.passages, work / "synth")
        s3.make_bucket("plan-bench")
        url = "s3://plan-bench/store"
        lading.build_store(files.corpus, url, cache=str(work / "up"), progress=False)
        store = lading.open_store(url, cache=work / "node", cache_bytes="64M")
        assert isinstance(store, RemoteStore)
        gen = np.random.default_rng(0)
        draws = gen.integers(0, len(store), args.reads)
        batches = [draws[i : i + BATCH] for i in range(0, args.reads, BATCH)]
        steps = list(range(1 << 32, (1 << 32) + len(batches)))
        made = routes(store, batches, steps)
        a, b = made["needs"](), made["arrays"]()
        assert a.needs(0, 1 << 40) == b.needs(0, 1 << 40), "the two routes planned other reads"
        del a, b
        load = os.getloadavg()[0]
        for r in range(args.repeats):
            for name in list(made)[r % 2 :] + list(made)[: r % 2]:
                peak, kept = traced(made[name])
                seconds = timed(made[name])
                got = rows.setdefault(name, {"peak": [], "kept": [], "cpu": []})
                got["peak"].append(peak / args.reads)
                got["kept"].append(kept / args.reads)
                got["cpu"].append(seconds)
                print(f"{name}: peak {peak / args.reads:.0f} B a read, keeps "
                      f"{kept / args.reads:.0f}, {seconds:.2f} s CPU", flush=True)  # fmt: skip
        load = max(load, os.getloadavg()[0])

    def cell(values: list[float], fmt: str) -> str:
        med = statistics.median(values)
        return f"{fmt.format(med)} [{fmt.format(min(values))}-{fmt.format(max(values))}]"

    body = [
        f"{args.reads:,} reads (rows drawn at random from {args.passages:,} synthetic passages "
        f"in one store on the local S3, {BATCH} a batch, one batch a step) planned by a remote "
        f"store; {args.repeats} runs a route, alternated, median [min-max]; 2 cores shared, "
        f"load up to {load:.1f}; Python {sys.version.split()[0]}.",
        "",
        "| route | peak while planning, B a read | kept by the schedule, B a read | "
        "CPU s to plan | CPU us a read |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, got in rows.items():
        per = [1e6 * c / args.reads for c in got["cpu"]]
        body.append(
            f"| {name} | {cell(got['peak'], '{:.0f}')} | {cell(got['kept'], '{:.0f}')} | "
            f"{cell(got['cpu'], '{:.2f}')} | {cell(per, '{:.2f}')} |"
        )
    ratio = [n / a for n, a in zip(rows["needs"]["cpu"], rows["arrays"]["cpu"])]
    smaller = [n / a for n, a in zip(rows["needs"]["peak"], rows["arrays"]["peak"])]
    body += [
        "",
        f"needs / arrays, paired by run: CPU {cell(ratio, '{:.1f}')}x, peak memory "
        f"{cell(smaller, '{:.1f}')}x.",
    ]
    command = "python benchmarks/bench_plan_memory.py " + " ".join(sys.argv[1:])
    title = "Remote: a plan of an epoch, as arrays (issue 47)"
    write_section(HERE / "RESULTS.md", title, "\n".join(body), command, write=args.write)


if __name__ == "__main__":
    main()
