"""Remote stores: documents by id from object storage through the node cache, measured.

On the local S3 (moto behind a proxy answering every request after 30 ms ± 10, as S3 does;
:mod:`lading.testing.localserver`), with a synthesized passage corpus and a long-document
corpus uploaded by ``lading.build_store(..., "s3://...")``:

- throughput per node, 1/2/4 ranks on this machine, cold node cache: a cross-encoder's
  groups (1 relevant + 7 random negatives, 8 groups = 64 documents a batch), every batch's
  texts read; docs/s over the node, GETs per batch, documents per GET, bytes fetched / used;
- wait per batch with a 250 ms step (a sleep), look-ahead on and off;
- the planner's gap (GETs and bytes for 0 .. 256 KiB) on the loader's own windows;
- epoch-2 hit rate of eviction by next use and of FIFO (the cache without a plan), same cap,
  on uniform negatives and on a skewed hard-negative run;
- the peers (Mosaic streaming, litdata, Lance) on the same bucket, each by its own route, in
  the peers venv (``benchmarks/remote_peers.py``).

Writes the "Remote" section of benchmarks/RESULTS.md (with ``--write``).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import lading
from common import HERE, OUT, add_write_flag, write_section
from lading.bench.synth import Kind, synth
from lading.ir import TrainingGroups, read_qrels, read_queries
from lading.loading.state import Cursor
from lading.remote.ranges import Need, coalesce
from lading.testing import LocalS3

GROUP = 8  # documents a group: 1 relevant + 7 negatives
GROUPS = 8  # groups a batch: 64 documents
STEP_S = 0.25
GAPS = (0, 4096, 16384, 65536, 262144)


def prepare(kind: Kind, n: int, work: Path, s3: LocalS3) -> dict[str, Any]:
    """Synthesize (cached) and upload a corpus; its URL, files and sizes."""
    folder = work / f"{kind}-{n}"
    if not (folder / "run.trec").is_file():
        synth(kind, n, folder, queries=min(20_000, max(2_000, n // 50)))
    files = {p.stem: p for p in folder.iterdir() if p.suffix in (".tsv", ".jsonl", ".trec", ".txt")}
    corpus = folder / ("collection.tsv" if kind == "passages" else "docs.jsonl")
    url = f"s3://bench/{kind}-{n}"
    started = time.perf_counter()
    store = lading.build_store(corpus, url, cache=str(work / "upload-cache"), progress=False)
    upload_s = time.perf_counter() - started
    return {
        "kind": kind, "n": n, "url": url, "corpus": str(corpus), "upload_s": upload_s,
        "queries": str(files["queries"]), "qrels": str(files["qrels"]), "run": str(files["run"]),
        "text_bytes": _payload(store), "count": len(store),
    }  # fmt: skip


def _payload(store: Any) -> int:
    from lading.stores.remote.manifest import payload_bytes

    return payload_bytes(store.meta)


class Texts:
    """Collate: the texts of every document of a batch's groups (read in the loader)."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def __call__(self, items: list[dict[str, Any]]) -> list[str]:
        return self.store.texts_at(np.concatenate([item["doc_codes"] for item in items]))


class Hidden:
    """The groups without ``prefetch``: the loader announces nothing (look-ahead off)."""

    def __init__(self, groups: TrainingGroups) -> None:
        self.groups = groups
        self.epoch_aware = True

    def __len__(self) -> int:
        return len(self.groups)

    def __getitem__(self, item: Any) -> Any:
        return self.groups[item]


def _loader(corpus: dict[str, Any], cache: Path, rank: int, ranks: int, ahead: bool) -> Any:
    store = lading.open_store(corpus["url"], cache=cache, cache_bytes="4G")
    groups = TrainingGroups(
        store, read_queries(corpus["queries"]), read_qrels(corpus["qrels"]),
        group_size=GROUP, sampling="random", seed=rank,
    )  # fmt: skip
    world = lading.World(rank=rank, world_size=ranks, local_rank=rank, local_world_size=ranks)
    dataset = groups if ahead else Hidden(groups)
    return store, lading.loader(dataset, GROUPS, collate_fn=Texts(store), world=world, seed=1)


def rank_run(
    rank: int, ranks: int, corpus: dict[str, Any], cache: str, seconds: float, step: float,
    ahead: bool, barrier: Any, out: Any,
) -> None:  # fmt: skip
    """One rank: warm up 4 batches, wait for the others, then read batches for ``seconds``
    (sleeping ``step`` after each); report docs, waits and its cache's counters."""
    store, loader = _loader(corpus, Path(cache), rank, ranks, ahead)
    epochs = 0
    batches = iter(loader)

    def next_batch() -> list[str]:
        nonlocal batches, epochs
        try:
            return next(batches)
        except StopIteration:  # a small corpus: the next epoch
            epochs += 1
            loader.set_epoch(epochs)
            batches = iter(loader)
            return next(batches)

    for _ in range(4):
        next_batch()
    before = store.cache_stats()["process"]
    barrier.wait(timeout=900)
    waits: list[float] = []
    docs = 0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        t = time.perf_counter()
        texts = next_batch()
        waits.append(time.perf_counter() - t)
        docs += len(texts)
        if step:
            time.sleep(step)
    elapsed = time.perf_counter() - started
    after = store.cache_stats()["process"]
    delta = {k: after[k] - before[k] for k in ("gets", "bytes_fetched", "bytes_used", "misses")}
    out.put({"rank": rank, "docs": docs, "seconds": elapsed, "waits": waits, **delta})
    store.close()  # os._exit skips atexit: hand unfilled claims back to the other ranks
    out.close()
    out.join_thread()  # the report has left this process: leave without tearing down torch
    os._exit(0)


def cell(corpus: dict[str, Any], ranks: int, work: Path, seconds: float, step: float = 0.0,
         ahead: bool = True) -> dict[str, Any]:  # fmt: skip
    """One measurement: ``ranks`` processes of one node, a fresh (cold) node cache."""
    cache = work / f"cache-{time.time_ns()}"
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(ranks), ctx.Queue()
    procs = [
        ctx.Process(target=rank_run, args=(r, ranks, corpus, str(cache), seconds, step, ahead,
                                           barrier, out))
        for r in range(ranks)
    ]  # fmt: skip
    load = os.getloadavg()[0]
    for p in procs:
        p.start()
    reports: list[dict[str, Any]] = []
    deadline = time.monotonic() + 1200
    while len(reports) < ranks and time.monotonic() < deadline:
        try:
            reports.append(out.get(timeout=5))
        except Exception:  # queue.Empty: is every rank still alive?
            if all(p.exitcode is not None for p in procs):
                break
    for p in procs:
        p.join(timeout=30)
        if p.is_alive():
            p.kill()
    if len(reports) < ranks:
        codes = [p.exitcode for p in procs]
        return {"ranks": ranks, "error": f"a rank died (exit codes {codes})", "load": load}
    seconds_max = max(r["seconds"] for r in reports)
    total = {k: sum(r[k] for r in reports) for k in ("docs", "gets", "bytes_fetched", "bytes_used")}
    waits = [w for r in reports for w in r["waits"]]
    return {
        "ranks": ranks, "docs_s": total["docs"] / seconds_max, **total,
        "batches": len(waits), "wait_ms_median": 1000 * statistics.median(waits),
        "wait_ms_p95": 1000 * float(np.percentile(waits, 95)), "load": load,
    }  # fmt: skip


def gap_sweep(corpus: dict[str, Any], work: Path, windows: int = 20, ahead: int = 8) -> list[Any]:
    """GETs per batch and bytes fetched / used of the planner alone, per gap, over the
    loader's first ``windows`` windows of ``ahead`` batches."""
    store, loader = _loader(corpus, work / "gap-cache", 0, 1, True)
    groups = loader.dataset
    epoch = loader._workload.keys(Cursor())  # epoch 0's batches on this rank, in order
    order = [(b.epoch, i) for b in epoch for i in b.items][: windows * ahead * GROUPS]
    rows = []
    for gap in GAPS:
        gets = fetched = used = 0
        for w in range(windows):
            keys = order[w * ahead * GROUPS : (w + 1) * ahead * GROUPS]
            codes = np.concatenate([groups.group_codes(i, e) for e, i in keys])
            spans = store._columns.spans("text", codes)  # the store's own row -> range map
            blocks = coalesce([Need(*s) for s in spans], max_gap=gap)
            gets += len(blocks)
            fetched += sum(b.size for b in blocks)
            used += sum(end - start for _, start, end in set(spans))
        rows.append((gap, gets / (windows * ahead), fetched / max(1, used)))
    return rows


def skewed_run(corpus: dict[str, Any], work: Path, depth: int = 50) -> Path:
    """A hard-negative run whose candidates follow a Zipf law (s = 1.1) over the documents:
    a few documents are every query's hard negatives, as in real runs."""
    path = work / f"skewed-{corpus['kind']}-{corpus['n']}.trec"
    if path.is_file():
        return path
    rng = np.random.default_rng(0)
    ids = lading.open_store(corpus["url"], cache=work / "gap-cache").ids()
    popular = rng.permutation(len(ids))
    weights = 1.0 / np.arange(1, len(ids) + 1) ** 1.1
    weights /= weights.sum()
    with open(path, "w") as f:
        for qid in read_queries(corpus["queries"]):
            picks = popular[rng.choice(len(ids), depth, replace=False, p=weights)]
            f.writelines(
                f"{qid} Q0 {ids[d]} {r + 1} {depth - r} skewed\n" for r, d in enumerate(picks)
            )
    return path


def hit_rates(corpus: dict[str, Any], work: Path, share: float, run: Path | None,
              policy: str) -> dict[str, Any]:  # fmt: skip
    """Epoch-2 hits / accesses of ``policy`` with a cap of ``share`` of the payload bytes."""
    from lading.ir import read_run
    from lading.remote.settings import RemoteSettings
    from lading.stores.remote.store import RemoteStore

    cap = int(share * corpus["text_bytes"])
    cache = work / f"hits-{time.time_ns()}"
    store = RemoteStore(corpus["url"], RemoteSettings.of(cache, cap, policy=policy))
    negatives = read_run(run) if run is not None else None
    groups = TrainingGroups(
        store, read_queries(corpus["queries"]), read_qrels(corpus["qrels"]), negatives=negatives,
        group_size=GROUP, sampling="run" if run is not None else "random", seed=3,
    )  # fmt: skip
    loader = lading.loader(groups, GROUPS, collate_fn=Texts(store), world=lading.World(0, 1))
    for epoch in range(2):
        before = store.cache_stats()["process"]
        loader.set_epoch(epoch)
        for _ in loader:
            pass
    after = store.cache_stats()["process"]
    hits, misses = after["hits"] - before["hits"], after["misses"] - before["misses"]
    rate = hits / max(1, hits + misses)
    return {"policy": policy, "cap_share": share, "hit_rate": rate, "accesses": hits + misses,
            "bytes_cached": after["bytes_cached"], "cap": cap}  # fmt: skip


def all_hit_rates(s3: LocalS3, args: Any, work: Path) -> list[dict[str, Any]]:
    """Epoch-2 hit rates of both policies: uniform negatives at a cap of 25% of the text,
    skewed ones at ``--skewed-cap`` (below their working set, or nothing is ever evicted)."""
    small = prepare("passages", args.hit_passages, work, s3)
    s3._call("latency", {"latency": 0.0, "jitter": 0.0})  # hit counts do not depend on it
    rows = []
    for trace, run, share in (("uniform", None, 0.25),
                              ("skewed", skewed_run(small, work), args.skewed_cap)):  # fmt: skip
        for policy in ("next-use", "fifo"):  # (the cache's two: LRU is gone with SQLite's blocks)
            rows.append({"trace": trace, **hit_rates(small, work, share, run, policy)})
            print(json.dumps(rows[-1]), flush=True)
    s3._call("latency", {"latency": 0.03, "jitter": 0.01})
    return rows


def run_peers(corpus: dict[str, Any], s3: LocalS3, python: str, work: Path, seconds: float) -> Any:
    """benchmarks/remote_peers.py in the peers venv, on the same bucket; its JSON, or why not."""
    command = [python, str(HERE / "remote_peers.py"), "--corpus", corpus["corpus"],
               "--work", str(work / f"peers-{corpus['kind']}"), "--seconds", str(seconds),
               "--bucket", "bench", "--endpoint", s3.endpoint]  # fmt: skip
    env = {**os.environ, **s3.env()}
    done = subprocess.run(command, capture_output=True, text=True, timeout=3000, env=env)
    if done.returncode != 0:
        return {"error": done.stderr[-2000:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def ceiling(seconds: float, repeats: int) -> str:
    """The GET ceiling here: lading's fetcher alone (no planner, no cache), random 400-byte
    ranges of a 64 MiB object, at 64/128/256 in flight; GETs/s and client CPU per GET."""
    from lading.remote.clients import open_client
    from lading.remote.fetch import Fetcher

    rows = []
    with LocalS3(latency=0.03, jitter=0.01) as s3:
        s3.make_bucket("ceiling")
        open_client("s3://ceiling/x").put("blob", os.urandom(64 << 20))
        rng = np.random.default_rng(0)
        for _ in range(repeats):
            for flight in (64, 128, 256):
                fetcher = Fetcher(lambda: open_client("s3://ceiling/x"), in_flight=flight)
                fetcher.read([("blob", 0, 400, None)])  # connect first
                gets, cpu, load = 0, time.process_time(), os.getloadavg()[0]
                started = time.perf_counter()
                while time.perf_counter() - started < seconds:
                    starts = rng.integers(0, (64 << 20) - 400, 1024).tolist()
                    fetcher.read([("blob", a, a + 400, None) for a in starts])
                    gets += 1024
                elapsed = time.perf_counter() - started
                cpu_us = 1e6 * (time.process_time() - cpu) / gets
                rows.append((flight, gets / elapsed, cpu_us, load, s3.stats()["max_in_flight"]))
                s3.reset()
                fetcher.close()
    lines = [
        f"lading's fetcher alone against the local S3 (30 ms ± 10 a request): random 400-byte "
        f"ranges of one 64 MiB object, batches of 1,024 GETs, {seconds:g} s a cell, {repeats} "
        "repeats; client CPU: this process (obstore's threads included), per GET. Little's "
        "law's bound is in flight / 30 ms.", "",
        "| in flight | GETs/s | bound | client CPU per GET, us | load |", "|---|---|---|---|---|",
    ]  # fmt: skip
    for flight in (64, 128, 256):
        mine = [r for r in rows if r[0] == flight]
        rate = statistics.median(r[1] for r in mine)
        lines.append(
            f"| {flight} | {rate:,.0f} [{min(r[1] for r in mine):,.0f}-"
            f"{max(r[1] for r in mine):,.0f}] | {flight / 0.03:,.0f} | "
            f"{statistics.median(r[2] for r in mine):,.0f} | "
            f"{statistics.median(r[3] for r in mine):.1f} |"
        )
    return "\n".join(lines)


def throughput(corpus: dict[str, Any], args: Any, work: Path, s3: LocalS3,
               results: dict[str, Any]) -> list[dict[str, Any]]:  # fmt: skip
    """The throughput cells of one corpus: every rank count, repeated, interleaved."""
    rows = []
    for repeat in range(args.repeats):  # interleaved: ranks vary fastest
        for ranks in map(int, args.ranks.split(",")):
            s3.reset()
            row = cell(corpus, ranks, work, args.seconds)
            row.update(kind=corpus["kind"], repeat=repeat, node_gets=s3.stats()["gets"])
            print(json.dumps(row), flush=True)
            if "error" in row:
                results.setdefault("errors", []).append(row)
            else:
                rows.append(row)
    return rows


def _save(work: Path, results: dict[str, Any]) -> None:
    """What is measured so far (a run cut short still leaves its numbers)."""
    (work / "partial.json").write_text(json.dumps(results, indent=1, default=str))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--passages", type=int, default=1_000_000)
    parser.add_argument("--documents", type=int, default=200_000)
    parser.add_argument("--ranks", default="1,2,4")
    parser.add_argument("--seconds", type=float, default=10.0, help="timed window per repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--hit-passages", type=int, default=50_000)
    parser.add_argument("--peers-python", default="/work/venv-peers/bin/python")
    parser.add_argument("--peers-corpora", default="passages,documents")
    parser.add_argument("--skewed-cap", type=float, default=0.04, help="share of the text")
    parser.add_argument("--ceiling", action="store_true", help="only the GET ceiling here")
    parser.add_argument("--redo-hits", action="store_true", help="rerun the hit rates only")
    parser.add_argument("--redo-cells", help="rerun the throughput cells of this corpus only")
    add_write_flag(parser)
    args = parser.parse_args()
    if args.ceiling:
        body = ceiling(args.seconds, args.repeats)
        command = "python benchmarks/bench_remote.py " + " ".join(sys.argv[1:])
        write_section(HERE / "RESULTS.md", "Remote: the GET ceiling here", body, command,
                      write=args.write)  # fmt: skip
        return
    work = OUT.parent / "remote"
    work.mkdir(parents=True, exist_ok=True)
    if args.redo_hits or args.redo_cells:  # into the last full run's results
        last: dict[str, Any] = json.loads((work / "results.json").read_text())
        with LocalS3(latency=0.03, jitter=0.01) as s3:
            s3.make_bucket("bench")
            if args.redo_hits:
                last["hits"] = all_hit_rates(s3, args, work)
            if args.redo_cells:
                kind = args.redo_cells
                corpus = prepare(kind, args.passages if kind == "passages" else args.documents,
                                 work, s3)  # fmt: skip
                last["cells"] = [c for c in last["cells"] if c["kind"] != kind]
                last["errors"] = [e for e in last.get("errors", []) if e.get("kind") != kind]
                last["cells"] += throughput(corpus, args, work, s3, last)
        last["args"] = vars(args)  # a redo runs with the full run's arguments
        _finish(work, last, args)
        return
    started = time.time()
    results: dict[str, Any] = {"corpora": [], "cells": [], "waits": [], "gaps": {}, "hits": [],
                               "peers": {}}  # fmt: skip
    with LocalS3(latency=0.03, jitter=0.01) as s3:
        s3.make_bucket("bench")
        corpora = [prepare("passages", args.passages, work, s3)]
        if args.documents:
            corpora.append(prepare("documents", args.documents, work, s3))
        results["corpora"] = corpora
        for corpus in corpora:
            _save(work, results)
            results["gaps"][corpus["kind"]] = gap_sweep(corpus, work)
            results["cells"] += throughput(corpus, args, work, s3, results)
            for ahead in (True, False):
                row = cell(corpus, 1, work, args.seconds * 2, step=STEP_S, ahead=ahead)
                if "error" in row:
                    results.setdefault("errors", []).append(row)
                    continue
                results["waits"].append({**row, "kind": corpus["kind"], "ahead": ahead})
                print(json.dumps(results["waits"][-1]), flush=True)
        _save(work, results)
        results["hits"] = all_hit_rates(s3, args, work)
        _save(work, results)
        if Path(args.peers_python).exists():
            for corpus in [c for c in corpora if c["kind"] in args.peers_corpora.split(",")]:
                results["peers"][corpus["kind"]] = run_peers(
                    corpus, s3, args.peers_python, work, args.seconds
                )
    results["seconds"] = time.time() - started
    results["args"] = vars(args)
    _finish(work, results, args)


def _finish(work: Path, results: dict[str, Any], args: Any) -> None:
    (work / "results.json").write_text(json.dumps(results, indent=1, default=str))
    from remote_report import render

    command = "python benchmarks/bench_remote.py " + " ".join(
        f"--{k.replace('_', '-')} {v}" for k, v in results.get("args", vars(args)).items()
        if k not in ("write", "ceiling", "redo_hits", "redo_cells") and v is not None
    )  # fmt: skip
    write_section(HERE / "RESULTS.md", "Remote", render(results, argparse.Namespace(
        **results.get("args", vars(args)))), command, write=args.write)  # fmt: skip


if __name__ == "__main__":
    main()
