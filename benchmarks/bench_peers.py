"""lading beside the data layers users pick today: HF datasets, Mosaic streaming, litdata.

    python benchmarks/bench_peers.py [--passages 20000] [--repeats 3] [--write]

One synthesized MS MARCO-shaped collection (``lading synth passages``), every system in one run:
each built from the same TSV through the tool's own recommended route, then measured in fresh
processes, systems interleaved within every repeat (a change of load hits all alike):

- build: wall seconds and peak RSS of the build process, and the bytes on disk;
- lookups by id: docs/s over random batches of 64 ids, for ``--seconds`` after a warm-up,
  through the route a user takes (lading and the dict: the id; the peers, which have no
  lookup by id: an id -> row dict built in the process from the dataset's ids, its cost
  counted in memory);
- scan: docs/s over one sequential pass of every text;
- memory: anonymous (private) memory the process gained by opening the data, building what it
  needs to find ids, and reading 100 batches: what every rank pays again.

``mds`` (Mosaic streaming) and ``litdata`` are the ``peers`` extra; a peer that cannot be
imported here is a skipped column with the reason, never a failure (mosaicml-streaming's
package imports torchvision, which PyPI's wheel breaks beside the CPU torch this project pins).
Results go to bench-out/ (median [min-max] over the repeats, peer / lading ratios); ``--write``
puts them in benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from common import HERE, add_write_flag, write_section
from lading.bench.peers import HFDatasetStore, build_hf
from lading.bench.synth import synth
from lading.train.procmem import process_memory

BATCH = 64
SYSTEMS: tuple[str, ...] = ("lading", "dict", "hf", "mds", "litdata")


def unavailable(system: str) -> str | None:
    """Why ``system`` cannot run here, or None."""
    module = {"hf": "datasets", "mds": "streaming", "litdata": "litdata"}.get(system)
    if module is None:
        return None
    try:
        __import__(module)
    except Exception as e:  # an import error of the peer's own dependencies counts too
        return f"import {module}: {type(e).__name__}: {e}"
    return None


def versions() -> dict[str, str]:
    """The version of every importable system."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("lading", "datasets", "mosaicml-streaming", "litdata", "torch"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            continue
    return out


def _peer(module: str) -> Any:
    """An optional peer's module (the ``peers`` extra; untyped, absent from CI's environment)."""
    return importlib.import_module(module)


def rows(tsv: Path) -> Iterator[tuple[str, str]]:
    with open(tsv, encoding="utf-8") as f:
        for line in f:
            doc_id, text = line.rstrip("\n").split("\t", 1)
            yield doc_id, text


def _litdata_item(line: str) -> dict[str, str]:
    doc_id, text = line.rstrip("\n").split("\t", 1)
    return {"id": doc_id, "text": text}


# ----------------------------------------------------------------------------- builds


def build(system: str, tsv: Path, dest: Path) -> None:
    """``tsv`` into ``dest`` through ``system``'s own route (the dict has none: it reads)."""
    shutil.rmtree(dest, ignore_errors=True)
    if system == "lading":
        import lading

        lading.build_store(tsv, dest, progress=False)
    elif system == "hf":  # the same route as lading bench's hf strategy
        build_hf(tsv, dest)
    elif system == "mds":
        with _peer("streaming").MDSWriter(
            out=str(dest), columns={"id": "str", "text": "str"}
        ) as out:
            for doc_id, text in rows(tsv):
                out.write({"id": doc_id, "text": text})
    elif system == "litdata":
        with open(tsv, encoding="utf-8") as f:
            lines = f.readlines()
        _peer("litdata").optimize(
            fn=_litdata_item, inputs=lines, output_dir=str(dest), chunk_bytes="64MB", num_workers=1
        )
    elif system != "dict":
        raise ValueError(f"unknown system {system!r}")


# ----------------------------------------------------------------------------- readers


class Reader:
    """Texts by id and in order, through the route a user of ``system`` takes."""

    def __init__(self, system: str, tsv: Path, dest: Path) -> None:
        self.system = system
        self.get: Callable[[list[str]], list[str]]
        self.scan: Callable[[], int]
        if system == "lading":
            import lading

            store = lading.open_store(dest)
            self.get = store.get_many
            self.scan = lambda: sum(
                len(store.texts_at(np.arange(lo, min(lo + 1024, len(store)))))
                for lo in range(0, len(store), 1024)
            )
        elif system == "dict":
            docs = dict(rows(tsv))
            self.get = lambda ids: [docs[i] for i in ids]
            self.scan = lambda: sum(1 for _ in docs.values())
        elif system == "hf":  # memory-mapped Arrow, an id -> row dict in this process
            table = HFDatasetStore(dest)
            self.get = table.get_many
            self.scan = table.scan
        elif system in ("mds", "litdata"):
            if system == "mds":
                data = _peer("streaming").StreamingDataset(
                    local=str(dest), shuffle=False, batch_size=1
                )
            else:
                data = _peer("litdata").StreamingDataset(input_dir=str(dest))
            where = {data[row]["id"]: row for row in range(len(data))}
            self.get = lambda ids: [data[where[i]]["text"] for i in ids]
            self.scan = lambda: sum(1 for row in range(len(data)) if data[row]["text"] is not None)
        else:
            raise ValueError(f"unknown system {system!r}")


def measure(system: str, tsv: Path, dest: Path, seconds: float) -> dict[str, float]:
    """Lookups/s, scan docs/s and the anonymous memory opening and reading cost, here."""
    base = process_memory().anon
    reader = Reader(system, tsv, dest)
    ids = [doc_id for doc_id, _ in rows(tsv)]
    rng = random.Random(0)
    batches = [rng.sample(ids, BATCH) for _ in range(200)]
    for batch in batches[:100]:
        assert len(reader.get(batch)) == BATCH
    memory = process_memory().anon - base
    done, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        for batch in batches:
            reader.get(batch)
        done += len(batches) * BATCH
    lookups = done / (time.perf_counter() - started)
    started = time.perf_counter()
    scanned = reader.scan()
    scan = scanned / (time.perf_counter() - started)
    assert scanned == len(ids), (system, scanned, len(ids))
    return {"lookups_per_s": lookups, "scan_per_s": scan, "anon_mib": memory / 2**20}


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


def _child(argv: list[str]) -> None:
    what, system, tsv, dest = argv[0], argv[1], Path(argv[2]), Path(argv[3])
    if what == "build":
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # the peak from here: the build's, not the imports'
        before = _status_kib("VmRSS")
        started = time.perf_counter()
        build(system, tsv, dest)
        seconds = time.perf_counter() - started
        peak = (_status_kib("VmHWM") - before) / 1024
        size = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file()) if dest.exists() else 0
        print(json.dumps({"build_s": seconds, "peak_rss_mib": peak, "disk_mib": size / 2**20}))
    else:
        print(json.dumps(measure(system, tsv, dest, float(argv[4]))))


def child(*args: str) -> dict[str, float]:
    """Run one measure in a fresh interpreter (its memory is its own)."""
    done = subprocess.run(
        [sys.executable, __file__, "--child", *args], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"{args[:2]} failed:\n{done.stderr[-3000:]}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


# ----------------------------------------------------------------------------- report

FIGURES: tuple[tuple[str, str, bool], ...] = (
    ("build_s", "build from the TSV, s", False),
    ("peak_rss_mib", "build peak RSS above the interpreter's, MiB", False),
    ("disk_mib", "on disk, MiB", False),
    ("lookups_per_s", f"lookups by id, {BATCH}/batch, docs/s", True),
    ("scan_per_s", "sequential scan, docs/s", True),
    ("anon_mib", "private memory per process (open + id map + reads), MiB", False),
)


def _cell(values: list[float]) -> str:
    if not values:
        return "-"
    med = statistics.median(values)
    digits = 0 if med >= 100 else 2
    spread = f" [{min(values):,.{digits}f}-{max(values):,.{digits}f}]" if len(values) > 1 else ""
    return f"{med:,.{digits}f}{spread}"


def table(results: dict[str, dict[str, list[float]]], skipped: dict[str, str]) -> str:
    systems = [s for s in SYSTEMS if s in results]
    head = (
        "| measure | "
        + " | ".join(systems)
        + " | "
        + " | ".join(f"{s} / lading" for s in systems if s != "lading")
    )
    lines = [head + " |", "|---" * (1 + 2 * len(systems) - 1) + "|"]
    for key, name, _ in FIGURES:
        cells = [_cell(results[s].get(key, [])) for s in systems]
        ratios = []
        lading = results.get("lading", {}).get(key, [])
        for s in systems:
            if s == "lading":
                continue
            mine = results[s].get(key, [])
            ok = mine and lading and statistics.median(lading) > 0
            ratios.append(
                f"{statistics.median(mine) / statistics.median(lading):.2f}" if ok else "-"
            )
        lines.append(f"| {name} | " + " | ".join(cells + ratios) + " |")
    lines += [f"\n{s}: skipped ({why})" for s, why in skipped.items()]
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=2.0, help="lookup window per measure")
    parser.add_argument("--out", type=Path, default=HERE.parent / "bench-out" / "peers")
    add_write_flag(parser)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    tsv = synth("passages", args.passages, args.out / f"synth-{args.passages}").corpus
    skipped = {s: why for s in SYSTEMS if (why := unavailable(s)) is not None}
    systems = [s for s in SYSTEMS if s not in skipped]
    results: dict[str, dict[str, list[float]]] = {s: {} for s in systems}
    load = [os.getloadavg()[0]]
    started = time.perf_counter()
    for repeat in range(args.repeats):
        order = systems[repeat % len(systems) :] + systems[: repeat % len(systems)]
        for system in order:  # interleaved, the first system rotating with the repeats
            dest = args.out / f"{system}-{args.passages}"
            if system != "dict":
                for key, value in child("build", system, str(tsv), str(dest)).items():
                    results[system].setdefault(key, []).append(value)
            got = child("read", system, str(tsv), str(dest), str(args.seconds))
            for key, value in got.items():
                results[system].setdefault(key, []).append(value)
            print(f"repeat {repeat + 1} {system}: {got}", flush=True)
    load.append(os.getloadavg()[0])
    body = "\n".join(
        [
            f"{args.passages:,} synthesized passages (`lading synth passages`, "
            f"{tsv.stat().st_size / 2**20:.1f} MiB of TSV); {args.repeats} repeats, systems "
            f"interleaved, every figure from a fresh process; lookups timed for "
            f"{args.seconds:g} s after 100 warm-up batches; median [min-max]. "
            f"{time.perf_counter() - started:.0f} s in all, load average "
            f"{load[0]:.2f} before, {load[1]:.2f} after, {os.cpu_count()} CPUs, "
            f"{platform.python_version()}. Versions: "
            + ", ".join(f"{k} {v}" for k, v in versions().items())
            + ".",
            "",
            table(results, skipped),
        ]
    )
    print(body)
    (args.out / "results.json").write_text(json.dumps({"results": results, "skipped": skipped}))
    command = (
        f"python benchmarks/bench_peers.py --passages {args.passages} --repeats {args.repeats}"
    )
    write_section(HERE / "RESULTS.md", "Peers", body, command, write=args.write)


if __name__ == "__main__":
    main()
