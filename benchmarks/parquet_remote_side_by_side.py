"""PartitionedParquet's client CPU a session, from local files and from the local S3, side by side.

    python benchmarks/parquet_remote_side_by_side.py [--repeats 3] [--epochs 3]
        [--caps 0.39M,10%,25%] [--profile remote-25%]

Data: the YOOCHOOSE training days 178-181 of ../shared/data/recsys (T4R preprocessing),
rewritten in row groups of 2,048 sessions (the originals hold one row group a file), read as
local files and from the local S3 (``--latency``, 30 ms ± 10 a GET). Batches of 256 sessions,
item lists padded to 20, ``num_workers=0``, no step. Each run: one loader, ``--epochs``
epochs (a cold node cache at the first), timed from the loader's construction (remote: the
LIST and footers; local: the files' metadata). Each repeat runs local then every cap, the
order rotated by repeat. Client CPU: this process's own (``time.process_time``: every thread,
the GET threads included; the server is another process). Ratios remote / local are paired
within a repeat (the local run of the same repeat). Issue 48 item 5: client CPU a session
from the bucket <= 1.3x local. ``--profile NAME`` runs one more pass of that run under
cProfile and prints its top functions.

The floor (on by default; ``--no-floor`` leaves it out): what any reader of these files from
the bucket spends at least, the local run's CPU plus one bare obstore ``get_ranges`` a row
group read (its columns' byte ranges, no cache: every row group of every epoch, in a shuffled
order), each repeat's GET pass timed on its own (``time.process_time``) and added to that
repeat's local run.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
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


def cap_bytes(spec: str, total: int) -> int:
    """``"10%"`` of ``total`` bytes, or a size (``"0.39M"``, ``"409600"``)."""
    if spec.endswith("%"):
        return int(float(spec[:-1]) / 100 * total)
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(spec[-1:].upper(), 1)
    return int(float(spec.rstrip("KkMmGg")) * scale)


def run(make: Any, epochs: int) -> dict[str, Any]:
    """``epochs`` passes of the loader ``make()`` builds: sessions, wall, CPU, load."""
    wall, cpu = time.perf_counter(), time.process_time()
    loader = make()
    n = 0
    for _ in range(epochs):
        n += sum(len(batch["session_id"]) for batch in loader)
    out = {"n": n, "wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu}
    out["load"] = os.getloadavg()[0]
    stats = loader.cache_stats()  # remote: the node cache's figures (empty for local files)
    out["used"], out["gets"] = stats.get("bytes_used", 0), stats.get("gets", 0)
    del loader
    return out


def row_group_spans(local: Path, columns: list[str]) -> list[tuple[str, list[int], list[int]]]:
    """``(file name, starts, ends)`` of every row group's ``columns`` (touching chunks merged),
    as lading's remote reader asks for them."""
    import pyarrow.parquet as pq

    out = []
    for path in sorted(local.iterdir()):
        meta = pq.read_metadata(path)
        leaves = [j for j in range(meta.num_columns)
                  if meta.schema.column(j).path.split(".", 1)[0] in columns]  # fmt: skip
        for g in range(meta.num_row_groups):
            ranges = []
            for j in leaves:
                chunk = meta.row_group(g).column(j)
                start = chunk.data_page_offset
                if chunk.has_dictionary_page and 0 < chunk.dictionary_page_offset < start:
                    start = chunk.dictionary_page_offset
                ranges.append((start, start + chunk.total_compressed_size))
            merged: list[list[int]] = []
            for a, b in sorted(ranges):
                if merged and a <= merged[-1][1]:
                    merged[-1][1] = max(merged[-1][1], b)
                else:
                    merged.append([a, b])
            out.append((path.name, [m[0] for m in merged], [m[1] for m in merged]))
    return out


def bare_gets(
    spans: list[tuple[str, list[int], list[int]]], epochs: int, seed: int
) -> dict[str, Any]:
    """CPU of one bare obstore ``get_ranges`` a row group, every row group once an epoch."""
    import random

    import obstore
    from obstore.store import from_url

    store = from_url("s3://sessions/train/", client_options={"allow_http": True})
    order = list(spans)
    cpu, gets, got = time.process_time(), 0, 0
    for e in range(epochs):
        random.Random(seed * 100 + e).shuffle(order)
        for name, starts, ends in order:
            for data in obstore.get_ranges(store, name, starts=starts, ends=ends):
                got += len(memoryview(data))
            gets += len(starts)
    return {"cpu": time.process_time() - cpu, "gets": gets, "bytes": got}


def regroup(days: Path, local: Path) -> int:
    import pyarrow.parquet as pq

    for day in (178, 179, 180, 181):
        table = pq.read_table(days / str(day) / "train.parquet")
        pq.write_table(table, local / f"{day}.parquet", row_group_size=2048)
    return sum(p.stat().st_size for p in local.iterdir())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--caps", default="0.39M,10%,25%")
    parser.add_argument("--latency", type=float, default=0.03)
    parser.add_argument("--profile", default="", help="a run's name (local, remote-25%%)")
    parser.add_argument("--no-floor", dest="floor", action="store_false",
                        help="skip the bare GETs' floor")  # fmt: skip
    args = parser.parse_args()
    found = data_dir()
    if found is None:
        raise SystemExit("no real data: set LADING_DATA or put it at ../shared/data")
    work = Path(tempfile.mkdtemp(prefix="pq-side-by-side-"))
    local = work / "local"
    local.mkdir()
    total = regroup(found / "recsys" / "yoochoose_t4r_preproc_sessions_by_day", local)
    caps = {f"remote-{c}": cap_bytes(c, total) for c in args.caps.split(",") if c}
    runs: dict[str, list[dict[str, Any]]] = {"local": [], **{name: [] for name in caps}}
    started = time.time()
    try:
        with LocalS3(latency=args.latency, jitter=args.latency / 3) as s3:
            s3.make_bucket("sessions")
            client = open_client("s3://sessions")
            for path in sorted(local.iterdir()):
                client.put(f"train/{path.name}", path)

            def maker(name: str, tag: str) -> Any:
                if name == "local":
                    return lambda: PartitionedParquet(local, 256, **KW)
                folder = work / f"cache-{tag}"
                shutil.rmtree(folder, ignore_errors=True)
                return lambda: PartitionedParquet(
                    "s3://sessions/train/", 256, cache=folder, cache_bytes=caps[name], **KW
                )

            run(maker("local", "warm"), 1)  # imports, page cache: nobody's cost
            names = list(runs)
            for r in range(args.repeats):
                for name in names[r % len(names) :] + names[: r % len(names)]:
                    s3.reset()
                    got = run(maker(name, f"{name}-{r}"), args.epochs)
                    got["fetched"] = s3.stats()["get_bytes"] if name != "local" else 0
                    runs[name].append(got)
                    print(name, r, {k: round(v, 4) for k, v in got.items()}, flush=True)
                if args.floor:  # the bare GETs, added to this repeat's local run
                    bare = bare_gets(row_group_spans(local, KW["columns"]), args.epochs, r)
                    local_run = runs["local"][-1]
                    floor = {**local_run, "cpu": local_run["cpu"] + bare["cpu"]}
                    floor.update(gets=bare["gets"], used=bare["bytes"], fetched=bare["bytes"])
                    runs.setdefault("floor", []).append(floor)
                    print("floor", r, {k: round(v, 4) for k, v in bare.items()}, flush=True)
            if args.profile:
                profile = cProfile.Profile()
                profile.runcall(run, maker(args.profile, "profile"), args.epochs)
                pstats.Stats(profile).sort_stats("tottime").print_stats(30)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report(runs, caps, total, args, time.time() - started)


def spread(values: list[float], form: str) -> str:
    return f"{statistics.median(values):{form}} [{min(values):{form}}-{max(values):{form}}]"


def report(runs: dict[str, list[dict[str, Any]]], caps: dict[str, int], total: int, args: Any,
           seconds: float) -> None:  # fmt: skip
    sessions = runs["local"][0]["n"] // args.epochs
    print(
        f"\n{sessions:,} sessions an epoch, {args.epochs} epochs a run (cold cache at the first), "
        f"{args.repeats} repeats, files {total:,} bytes, {seconds:.0f} s in all"
    )
    print("| files | cap | sessions/s | client CPU us / session | x local (paired) | "
          "GETs | bytes fetched / used | load |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    local = runs["local"]
    for name, got in runs.items():
        cpu = [g["cpu"] / g["n"] * 1e6 for g in got]
        ratio = [g["cpu"] / g["n"] / (o["cpu"] / o["n"]) for g, o in zip(got, local)]
        fetched = [g["fetched"] / max(1, g["used"]) for g in got]
        cap = f"{caps[name]:,}" if name in caps else "-"
        rate = "-" if name == "floor" else spread([g["n"] / g["wall"] for g in got], ",.0f")
        print(
            f"| {name} | {cap} | {rate} | "
            f"{spread(cpu, '.2f')} | {spread(ratio, '.2f')} | "
            f"{spread([g['gets'] for g in got], ',.0f')} | "
            f"{spread(fetched, '.3f')} | "
            f"{spread([g['load'] for g in got], '.1f')} |"
        )


if __name__ == "__main__":
    main()
