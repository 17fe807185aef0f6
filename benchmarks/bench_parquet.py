"""PartitionedParquet against a straightforward loop: rows/s to padded tensors, memory.

    python benchmarks/bench_parquet.py [--repeat 10]

Data: the YOOCHOOSE training days 178-181 of ../shared/data/recsys (T4R preprocessing), read
``--repeat`` times. Both readers produce, for every batch of 256 sessions, ``session_id`` and
``item_id-list_seq`` padded to 20 items with its lengths, as torch tensors. The straightforward
loop is what a user writes first: ``pyarrow.ParquetFile.iter_batches``, convert, pad each row
with numpy. PartitionedParquet also plans shares, shuffles row groups and rows, and pads
vectorised. Each runs in a fresh process (anonymous memory is its own). Writes the "Parquet"
section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from typing import Any

import numpy as np
import torch

from common import HERE, add_write_flag, data_dir, write_section
from lading.tabular import PartitionedParquet
from lading.train.procmem import process_memory
from lading.world import World

ITEMS, BATCH, MAX_LEN = "item_id-list_seq", 256, 20


def straightforward(files: list[str]) -> Any:
    import pyarrow.parquet as pq

    for file in files:
        for batch in pq.ParquetFile(file).iter_batches(
            batch_size=BATCH, columns=["session_id", ITEMS]
        ):
            column = batch.column(ITEMS)
            offsets = column.offsets.to_numpy()
            values = column.values.to_numpy()
            padded = np.zeros((batch.num_rows, MAX_LEN), dtype=np.int64)
            lengths = np.zeros(batch.num_rows, dtype=np.int64)
            for i in range(batch.num_rows):
                row = values[offsets[i] : offsets[i + 1]][-MAX_LEN:]
                padded[i, : len(row)] = row
                lengths[i] = len(row)
            yield {
                "session_id": torch.from_numpy(batch.column("session_id").to_numpy()),
                ITEMS: torch.from_numpy(padded),
                f"{ITEMS}_lengths": torch.from_numpy(lengths),
            }


def run(kind: str, files: list[str]) -> dict[str, Any]:
    before = process_memory()
    started = time.perf_counter()
    if kind == "lading":
        batches = iter(
            PartitionedParquet(
                files,
                columns=["session_id", ITEMS],
                batch_size=BATCH,
                list_columns={ITEMS: MAX_LEN},
                world=World(),
            )
        )
    else:
        batches = straightforward(files)
    rows, peak = 0, 0
    for i, batch in enumerate(batches):
        rows += len(batch["session_id"])
        if i % 50 == 0:
            peak = max(peak, process_memory().anon)
    seconds = time.perf_counter() - started
    return {
        "kind": kind,
        "rows": rows,
        "seconds": seconds,
        "rows_per_s": rows / seconds,
        "anon_peak_mib": (max(peak, process_memory().anon) - before.anon) / 2**20,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--child")
    parser.add_argument("--files", nargs="*")
    add_write_flag(parser)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run(args.child, args.files)))
        return
    root = data_dir()
    if root is None:
        raise SystemExit("YOOCHOOSE is in ../shared/data/recsys; set LADING_DATA")
    days = root / "recsys/yoochoose_t4r_preproc_sessions_by_day"
    files = [str(days / str(d) / "train.parquet") for d in (178, 179, 180, 181)] * args.repeat
    results = {}
    for kind in ("straightforward", "lading"):
        done = subprocess.run(
            [sys.executable, __file__, "--child", kind, "--files", *files],
            capture_output=True,
            text=True,
            check=True,
        )
        results[kind] = json.loads(done.stdout.strip().splitlines()[-1])
        print(json.dumps(results[kind]), flush=True)
    plain, ours = results["straightforward"], results["lading"]
    report = "\n".join(
        [
            f"Data: YOOCHOOSE days 178-181 (T4R preprocessing) read {args.repeat} times: "
            f"{plain['rows']:,} sessions; batches of {BATCH}, `{ITEMS}` padded to {MAX_LEN}. One "
            f"process each on {platform.machine()} with {os.cpu_count()} cores.",
            "",
            "| reader | rows/s | anonymous memory added (peak) |",
            "|---|---:|---:|",
            f"| straightforward (iter_batches, convert, pad rows with numpy) | "
            f"{plain['rows_per_s']:,.0f} | {plain['anon_peak_mib']:,.1f} MiB |",
            f"| PartitionedParquet (planned, shuffled, vectorised padding) | "
            f"{ours['rows_per_s']:,.0f} | {ours['anon_peak_mib']:,.1f} MiB |",
            f"| ratio | {ours['rows_per_s'] / plain['rows_per_s']:.2f} (target >= 1) | |",
            "",
            "PartitionedParquet holds at most the chunk being served and the one being read (here "
            "the largest row group, 28,511 sessions) per worker, whatever the number of files.",
        ]
    )
    print(report)
    write_section(
        HERE / "RESULTS.md",
        "Parquet",
        report,
        "python benchmarks/bench_parquet.py",
        write=args.write,
    )


if __name__ == "__main__":
    main()
