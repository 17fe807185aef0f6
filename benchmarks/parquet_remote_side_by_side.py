"""A quick side by side: PartitionedParquet's sessions/s from local files and from the local S3.

    python benchmarks/parquet_remote_side_by_side.py [--repeat 5]

Data: the YOOCHOOSE training days 178-181 of ../shared/data/recsys (T4R preprocessing),
rewritten in row groups of 2,048 sessions (the originals hold one row group a file), read as
local files and from the local S3 (30 ms ± 10 a GET). Batches of 256 sessions, item lists
padded to 20, ``num_workers=0``. Remote epochs: ``cold`` (a fresh node cache), ``warm`` (its
second epoch, every row group cached). Each repeat runs the three in turn; medians, min and
max of sessions/s (wall) and of this process's CPU time a session (every thread). Prints; the
official figures are the issue 41 benchmark's.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from common import data_dir
from lading.remote.clients import open_client
from lading.tabular import PartitionedParquet
from lading.testing import LocalS3

KW: dict[str, Any] = {
    "columns": ["session_id", "item_id-list_seq"],
    "list_columns": {"item_id-list_seq": 20},
    "seed": 0,
}


def epoch(loader: Any) -> tuple[int, float, float]:
    """Sessions, wall seconds and CPU seconds of one pass."""
    wall, cpu = time.perf_counter(), time.process_time()
    n = sum(len(batch["session_id"]) for batch in loader)
    return n, time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    import pyarrow.parquet as pq

    found = data_dir()
    if found is None:
        raise SystemExit("no real data: set LADING_DATA or put it at ../shared/data")
    days = found / "recsys" / "yoochoose_t4r_preproc_sessions_by_day"
    work = Path(tempfile.mkdtemp(prefix="pq-side-by-side-"))
    local = work / "local"
    local.mkdir()
    for day in (178, 179, 180, 181):
        table = pq.read_table(days / str(day) / "train.parquet")
        pq.write_table(table, local / f"{day}.parquet", row_group_size=2048)
    runs: dict[str, list[tuple[int, float, float]]] = {"local": [], "cold": [], "warm": []}
    try:
        with LocalS3() as s3:
            s3.make_bucket("sessions")
            client = open_client("s3://sessions")
            for path in sorted(local.iterdir()):
                client.put(f"train/{path.name}", path)
            for r in range(args.repeat):
                runs["local"].append(epoch(PartitionedParquet(local, 256, **KW)))
                remote = PartitionedParquet(
                    "s3://sessions/train/", 256, cache=work / f"cache-{r}", cache_bytes="64M", **KW
                )
                runs["cold"].append(epoch(remote))
                runs["warm"].append(epoch(remote))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    sessions = runs["local"][0][0]
    print(f"{sessions:,} sessions an epoch, {args.repeat} repeats")
    for name, passes in runs.items():
        rates = [n / wall for n, wall, _ in passes]
        cpu = [c / n * 1e6 for n, _, c in passes]
        print(
            f"{name:5s} sessions/s median {statistics.median(rates):9,.0f} "
            f"(min {min(rates):,.0f}, max {max(rates):,.0f}); CPU us a session median "
            f"{statistics.median(cpu):.2f} (min {min(cpu):.2f}, max {max(cpu):.2f})"
        )


if __name__ == "__main__":
    main()
