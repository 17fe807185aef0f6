"""Soak: many processes and DataLoader workers doing random ``get_many`` on one packed store.

    python benchmarks/soak.py [--n 1000000] [--ranks 8] [--workers 4] [--seconds 180]

Each of ``ranks`` processes runs a DataLoader with ``workers`` workers; every worker opens the
store itself (lazily, after the fork) and looks up random batches of 64 string ids until the
time is up, reporting every 5 s its lookups, anonymous memory (RssAnon), PSS and open file
descriptors. The guarantees checked: no errors; anonymous memory per process flat after the
first report (no growth from long-lived maps, the nanoGPT memmap leak); file descriptors
bounded. Writes the "Soak" section of benchmarks/RELIABILITY.md.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

import lading
from common import HERE, add_write_flag, make_corpora, write_section
from lading.train.procmem import process_memory

MiB = 1 << 20
REPORT_EVERY = 5.0


def snapshot(role: str, lookups: int, errors: int) -> dict[str, Any]:
    memory = process_memory()
    return {
        "role": role,
        "pid": os.getpid(),
        "t": time.monotonic(),
        "lookups": lookups,
        "errors": errors,
        "anon": memory.anon,
        "pss": memory.pss,
        "fds": len(os.listdir("/proc/self/fd")),
    }


class RandomLookups(IterableDataset[dict[str, Any]]):
    """Yields a memory report every few seconds while looking up random ids in between."""

    def __init__(self, store_dir: str, deadline: float, rank: int) -> None:
        self.store_dir, self.deadline, self.rank = store_dir, deadline, rank

    def __iter__(self) -> Any:
        info = get_worker_info()
        worker = info.id if info is not None else 0
        store = lading.open_store(self.store_dir)  # opened in the worker, never inherited
        rng = np.random.default_rng([self.rank, worker])
        n = len(store)
        lookups = errors = 0
        next_report = time.monotonic()
        while time.time() < self.deadline:
            ids = [f"msmarco_passage_{i}" for i in rng.integers(0, n, 64).tolist()]
            try:
                texts = store.get_many(ids)
                if len(texts) != len(ids) or not all(texts):
                    errors += 1
            except Exception:  # counted, and the soak goes on: the report says how many
                errors += 1
            lookups += len(ids)
            if time.monotonic() >= next_report:
                yield snapshot(f"rank{self.rank}/worker{worker}", lookups, errors)
                next_report += REPORT_EVERY
        yield snapshot(f"rank{self.rank}/worker{worker}", lookups, errors)


def rank_main(rank: int, store_dir: str, workers: int, deadline: float, out: Any) -> None:
    torch.set_num_threads(1)
    data = DataLoader(
        RandomLookups(store_dir, deadline, rank), batch_size=None, num_workers=workers,
        multiprocessing_context="fork",
    )  # fmt: skip
    reports = []
    for report in data:
        reports.append(report)
        reports.append(snapshot(f"rank{rank}", 0, 0))
    out.put(reports)


def summarize(reports: list[dict[str, Any]]) -> dict[str, Any]:
    by_process: dict[str, list[dict[str, Any]]] = {}
    for report in reports:
        by_process.setdefault(report["role"], []).append(report)
    growth, fds, lookups, errors = [], [], 0, 0
    for series in by_process.values():
        series.sort(key=lambda r: r["t"])
        growth.append((series[-1]["anon"] - series[0]["anon"]) / MiB)
        fds.append(max(r["fds"] for r in series))
        lookups += series[-1]["lookups"]
        errors += series[-1]["errors"]
    return {
        "processes": len(by_process),
        "lookups": lookups,
        "errors": errors,
        "anon_growth_mib_max": max(growth),
        "anon_growth_mib_median": float(np.median(growth)),
        "fds_max": max(fds),
        "reports": len(reports),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=180)
    parser.add_argument("--work", type=Path, default=Path("bench-out/soak"))
    add_write_flag(parser)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    _, str_tsv, origin = make_corpora(args.n, args.work)
    store_dir = args.work / f"{str_tsv.stem}.packed"
    lading.build_store(str_tsv, store_dir, progress=False)  # reused when already built
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    started = time.monotonic()
    deadline = time.time() + args.seconds  # wall clock: comparable across processes
    procs = [
        ctx.Process(target=rank_main, args=(r, str(store_dir), args.workers, deadline, out))
        for r in range(args.ranks)
    ]
    for p in procs:
        p.start()
    reports: list[dict[str, Any]] = []
    for _ in procs:
        reports += out.get(timeout=args.seconds + 300)
    for p in procs:
        p.join()
    failed = [p.exitcode for p in procs if p.exitcode != 0]
    summary = summarize(reports)
    summary["seconds"] = round(time.monotonic() - started, 1)
    summary["exit_codes_nonzero"] = failed
    print(json.dumps(summary, indent=2))
    body = (
        f"{args.ranks} processes x {args.workers} DataLoader workers, random `get_many` of 64 "
        f"string ids on a {args.n:,}-passage packed store ({origin}), "
        f"{summary['seconds']} s, {os.cpu_count()} cores.\n\n"
        "| measure | value |\n|---|---|\n"
        f"| processes reporting (ranks + workers) | {summary['processes']} |\n"
        f"| lookups | {summary['lookups']:,} |\n"
        f"| errors (exceptions or wrong results) | {summary['errors']} |\n"
        f"| processes that exited non-zero | {len(failed)} |\n"
        f"| anonymous memory growth, first to last report, max over processes | "
        f"{summary['anon_growth_mib_max']:+.1f} MiB |\n"
        f"| same, median | {summary['anon_growth_mib_median']:+.1f} MiB |\n"
        f"| open file descriptors, max over processes | {summary['fds_max']} |"
    )
    command = (
        f"python benchmarks/soak.py --n {args.n} --ranks {args.ranks} "
        f"--workers {args.workers} --seconds {args.seconds:g}"
    )
    write_section(HERE / "RELIABILITY.md", "Soak", body, command, write=args.write)


if __name__ == "__main__":
    main()
