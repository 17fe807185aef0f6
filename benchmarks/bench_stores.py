"""Stores side by side: lookups/s, build time, anonymous memory and PSS, ratios last.

    python benchmarks/bench_stores.py [--n 1000000] [--out bench-out/stores]

Corpus: ``n`` passages resampled from the real MS MARCO passages of the TREC DL 19/20 pool
(``$LADING_DATA`` or ../shared/data) with new ids, once with integer ids (0..n-1) and once with
string ids (``msmarco_passage_<n>``); a synthetic corpus when the real data is absent. Each
strategy is measured in a fresh process, so its memory is its own. Writes
benchmarks/RESULTS.md (the "Stores" section) and prints the same table.
"""

from __future__ import annotations

import argparse
import gc
import json
import multiprocessing as mp
import os
import platform
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import lading
from common import HERE, add_write_flag, bert_vocabulary, make_corpora, write_section
from lading.stores.layout import column_bytes
from lading.train.procmem import process_memory

BATCH = 64
READERS = 8  # processes reading the whole store at once, for the PSS target


def read_into_dict(path: Path) -> dict[str, str]:
    """The study's loader: every passage into a dict, the way its training script did it."""
    docs = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            doc_id, text = line.rstrip("\n").split("\t", 1)
            docs[doc_id] = text
    return docs


def open_strategy(name: str, src: Path, work: Path) -> lading.DocStore:
    if name == "memory":
        return lading.InMemoryStore.from_source(src)
    if name == "offsets":
        return lading.OffsetStore(work / f"{src.stem}.offsets")
    if name == "packed":
        return lading.open_store(work / f"{src.stem}.packed")
    if name == "packed+tokens":
        return lading.open_store(work / f"{src.stem}.tokens")
    if name == "irds":
        return lading.IrDatasetsStore.from_tsv(work / f"{src.stem}.irds.tsv")
    raise ValueError(f"unknown strategy {name!r}")


def id_format(src: Path) -> str:
    """How the benchmark corpus spells the id of row i (see make_corpora)."""
    return "{}" if src.stem.endswith("-int") else "msmarco_passage_{}"


def measure_lookups(name: str, src: str, work: str, seconds: float) -> dict[str, Any]:
    """In a fresh process: open, then get_many of 64 random ids for ``seconds``.

    Ids are drawn as row numbers and spelled with the corpus's id scheme, so the measuring
    process never holds a list of every id (that list alone is ~60 MiB at 1M ids and would be
    charged to the store).
    """
    spell = id_format(Path(src)).format
    with open(src, "rb") as f:
        n = sum(1 for _ in f)
    rng = random.Random(0)
    batches = [[spell(i) for i in rng.sample(range(n), BATCH)] for _ in range(2000)]
    gc.collect()
    before = process_memory()
    store = open_strategy(name, Path(src), Path(work))
    fetch = store.tokens_many if name == "packed+tokens" else store.get_many
    for batch in batches[:50]:
        fetch(batch)  # warm-up: page cache and lazy opens
    done, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        for batch in batches:
            fetch(batch)
        done += len(batches) * BATCH
    pure = done / (time.perf_counter() - started)
    # what a loader pays per batch: draw the ids (as a sampler does), then fetch
    done, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        for _ in range(200):
            fetch([spell(i) for i in rng.sample(range(n), BATCH)])
        done += 200 * BATCH
    sampled = done / (time.perf_counter() - started)
    gc.collect()
    after = process_memory()
    return {
        "docs_per_s": pure,
        "docs_per_s_with_sampling": sampled,
        "rss_anon_mib": (after.anon - before.anon) / 2**20,
        "pss_mib": after.pss / 2**20,
    }


def store_pss_kib(directory: str) -> int:
    """PSS of this process's mappings of files inside ``directory`` (the store's own pages)."""
    prefix = os.path.realpath(directory) + os.sep
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if "-" in head[0] and len(head) >= 5 and ":" in head[3]:  # a mapping's header line
                inside = len(head) >= 6 and head[5].startswith(prefix)
            elif inside and head[0] == "Pss:":
                total += int(head[1])
    return total


def _reader(dest: str, barrier: Any, out: Any) -> None:
    store = lading.open_store(dest)
    ids = store.ids()
    chars = 0
    for lo in range(0, len(ids), 4096):
        chars += sum(map(len, store.get_many(ids[lo : lo + 4096])))
    del ids
    gc.collect()
    barrier.wait()  # everyone maps the whole text now: PSS splits the shared pages fairly
    mine = process_memory()
    out.put({"pss": mine.pss, "anon": mine.anon, "store_pss": store_pss_kib(dest) * 1024})
    barrier.wait()


def measure_readers(dest: Path) -> dict[str, float]:
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(READERS), ctx.Queue()
    procs = [ctx.Process(target=_reader, args=(str(dest), barrier, out)) for _ in range(READERS)]
    for p in procs:
        p.start()
    stats = [out.get(timeout=1800) for _ in procs]
    for p in procs:
        p.join()
    return {
        "store_pss_total_mib": sum(s["store_pss"] for s in stats) / 2**20,
        "pss_total_mib": sum(s["pss"] for s in stats) / 2**20,
        "rss_anon_total_mib": sum(s["anon"] for s in stats) / 2**20,
    }


def child(args: argparse.Namespace) -> None:
    print(json.dumps(measure_lookups(args.child, args.src, args.work, args.seconds)))


def run_child(name: str, src: Path, work: Path, seconds: float) -> dict[str, Any]:
    cmd = [
        sys.executable,
        __file__,
        "--child",
        name,
        "--src",
        str(src),
        "--work",
        str(work),
        "--seconds",
        str(seconds),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{name} failed:\n{done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def build_all(src: Path, work: Path, strategies: list[str], tokenizer: Any) -> dict[str, float]:
    times: dict[str, float] = {}
    started = time.perf_counter()
    docs = read_into_dict(src)
    times["dict"] = time.perf_counter() - started
    del docs
    gc.collect()
    for name in strategies:
        started = time.perf_counter()
        if name == "memory":
            lading.InMemoryStore.from_source(src)
        elif name == "offsets":
            lading.OffsetStore.build(src, work / f"{src.stem}.offsets")
        elif name == "packed":
            lading.build_store(src, work / f"{src.stem}.packed", overwrite=True, progress=False)
        elif name == "packed+tokens":
            lading.build_store(
                src,
                work / f"{src.stem}.tokens",
                tokenizer=tokenizer,
                max_length=256,
                overwrite=True,
                progress=False,
            )
        elif name == "irds":
            copy = work / f"{src.stem}.irds.tsv"
            if not copy.exists():
                os.link(src, copy)
            shutil.rmtree(copy.with_name(copy.name + ".pklz4"), ignore_errors=True)  # time a build
            lading.IrDatasetsStore.from_tsv(copy).get_many([id_format(src).format(0)])
        times[name] = time.perf_counter() - started
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--out", default="bench-out/stores")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--child")
    parser.add_argument("--src")
    parser.add_argument("--work")
    add_write_flag(parser)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    work = Path(args.out)
    work.mkdir(parents=True, exist_ok=True)
    int_tsv, str_tsv, origin = make_corpora(args.n, work)
    strategies = ["memory", "offsets", "packed"]
    try:
        import ir_datasets  # noqa: F401

        strategies.append("irds")
    except ImportError:
        pass
    tokenizer = bert_vocabulary(int_tsv)
    warm = work / "warm.tsv"  # first-build costs (lazy imports) must not land on one strategy
    warm.write_text("1\twarm up\n")
    lading.build_store(
        warm, work / "warm.packed", tokenizer=tokenizer, overwrite=True, progress=False
    )
    rows: list[dict[str, Any]] = []
    for src, ids_kind in ((int_tsv, "int"), (str_tsv, "str")):
        names = [*strategies, "packed+tokens"] if ids_kind == "int" else strategies
        builds = build_all(src, work, names, tokenizer)
        for name in names:
            row = {
                "strategy": name,
                "ids": ids_kind,
                "build_s": builds[name],
                "dict_read_s": builds["dict"],
                **run_child(name, src, work, args.seconds),
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    readers = measure_readers(work / f"{int_tsv.stem}.packed")
    text_mib = column_bytes(lading.open_store(work / f"{int_tsv.stem}.packed").meta, "text") / 2**20
    report = render(rows, readers, text_mib, args.n, origin)
    print(report)
    write_section(
        HERE / "RESULTS.md", "Stores", report, "python benchmarks/bench_stores.py", write=args.write
    )


def _get(rows: list[dict[str, Any]], strategy: str, ids: str) -> dict[str, Any]:
    return next(r for r in rows if r["strategy"] == strategy and r["ids"] == ids)


def render(
    rows: list[dict[str, Any]], readers: dict[str, float], text_mib: float, n: int, origin: str
) -> str:
    lines = [
        f"Corpus: {n:,} passages resampled from {origin}; text {text_mib:,.0f} MiB. "
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, numpy {np.__version__}. Hot page cache; each strategy "
        "in a fresh process. `docs/s` is `get_many` of 64 random ids drawn in advance; "
        "`with sampling` also draws the 64 ids each batch (`random.sample` of rows, spelled "
        "as ids), as a loader does. `RssAnon added` is what opening the store and looking up "
        "cost the process (for `memory`, the dict itself).",
        "",
        "| strategy | ids | docs/s | docs/s with sampling | build s | RssAnon added MiB "
        "| PSS MiB |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['strategy']} | {r['ids']} | {r['docs_per_s']:,.0f} | "
            f"{r['docs_per_s_with_sampling']:,.0f} | {r['build_s']:.1f} | "
            f"{r['rss_anon_mib']:,.1f} | {r['pss_mib']:,.1f} |"
        )
    mem_i, pk_i = _get(rows, "memory", "int"), _get(rows, "packed", "int")
    mem_s, pk_s = _get(rows, "memory", "str"), _get(rows, "packed", "str")
    tok = _get(rows, "packed+tokens", "int")
    ratios = [
        (
            "packed / memory lookups, int ids",
            pk_i["docs_per_s"] / mem_i["docs_per_s"],
            pk_i["docs_per_s_with_sampling"] / mem_i["docs_per_s_with_sampling"],
            ">= 0.9",
        ),
        (
            "packed / memory lookups, string ids",
            pk_s["docs_per_s"] / mem_s["docs_per_s"],
            pk_s["docs_per_s_with_sampling"] / mem_s["docs_per_s_with_sampling"],
            ">= 0.6",
        ),
        (
            "tokens_many / packed get_many",
            tok["docs_per_s"] / pk_i["docs_per_s"],
            tok["docs_per_s_with_sampling"] / pk_i["docs_per_s_with_sampling"],
            "> 1",
        ),
    ]
    lines += ["", "| ratio | pure lookups | with sampling | target |", "|---|---:|---:|---|"]
    for name, pure, sampled, target in ratios:
        lines.append(f"| {name} | {pure:.2f} | {sampled:.2f} | {target} |")
    anon = max(pk_i["rss_anon_mib"], 0.0) / mem_i["rss_anon_mib"]
    lines += [
        "",
        "| ratio | measured | target |",
        "|---|---:|---|",
        f"| packed / memory RssAnon added per process (int ids) | {anon:.3f} | <= 0.02 |",
        f"| {READERS} processes reading the whole packed store: total PSS of the store's "
        f"mappings / text size | {readers['store_pss_total_mib'] / text_mib:.2f} "
        f"({readers['store_pss_total_mib']:,.0f} MiB) | <= 1.2 |",
        f"| packed build / reading the TSV into a dict (int ids) | "
        f"{pk_i['build_s'] / pk_i['dict_read_s']:.2f} | <= 1.5 |",
        f"| packed build / reading the TSV into a dict (string ids) | "
        f"{pk_s['build_s'] / pk_s['dict_read_s']:.2f} | <= 1.5 |",
    ]
    lines += [
        "",
        f"The {READERS} reader processes together: PSS {readers['pss_total_mib']:,.0f} MiB "
        f"in all, of which anonymous memory (interpreters, torch/numpy imports, decoded "
        f"strings) {readers['rss_anon_total_mib']:,.0f} MiB; the store's pages are counted "
        "once however many processes map them.",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
