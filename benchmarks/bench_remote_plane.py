"""The remote data plane's figures (issue 47): CPU per cold document, documents held, epoch-2
hits against Belady, bytes written, the folder against its budgets.

    python benchmarks/bench_remote_plane.py [--passages 1000000] [--epoch 100000]
        [--shares 0.1,0.005] [--repeats 3] [--write]

On the local S3 (30 ms ± 10 a request), ``--passages`` MS MARCO passages (resampled from the
TREC DL pool in ../shared/data; synthetic without it) in one store. An epoch reads ``--epoch``
of them, each once, in random batches of 64, twice (the order drawn again); the caps are
``--shares`` of the text an epoch reads. Per cap and repeat, in one process, the order
rotated from one repeat to the next (each leg first, second and third in turn over 3 repeats):

- ``lading``: batches read with no plan (a cold cache), ``get_many`` alone;
- ``lading+plan``: as ``lading.loader`` drives a store: at each epoch's start the order of it
  and the next one (``store.plan``), the batches 8 to 16 ahead announced (``store.prefetch``);
- ``obstore``: a bare obstore GET a document from Python (one ``await`` each, a batch
  gathered), the same ranges: the floor a GET costs here.

Reported: client CPU a cold document (epoch 1, the process's own, less the folder probe's
thread: the bare GETs have no folder to watch); documents held after the
epoch against ``cap / mean document bytes``; epoch-2 hits (documents that caused no GET)
against Belady and LRU computed in document bytes at the same cap on the same trace; the
payload file's bytes written (``pwrite``) and the process's ``wchar`` against bytes fetched;
the cache folder sampled every 50 ms against ``cap`` and ``index_bytes``.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import lading
from common import HERE, OUT, add_write_flag, cell, make_corpora, write_section
from lading.remote.cache.regions import DataFile, folder_bytes
from lading.remote.settings import RemoteSettings
from lading.stores.remote.store import RemoteStore
from lading.testing import LocalS3
from remote_cpu import bare_obstore

BATCH, AHEAD = 64, 8
SYSTEMS = ("lading", "lading+plan", "obstore")  # the legs of a repeat, rotated by repeat


def belady(trace: list[int], sizes: list[int], cap: int) -> list[bool]:
    """Hits of keeping the documents needed soonest (in bytes at ``cap``)."""
    nexts, last = [0] * len(trace), dict[int, int]()
    for i in range(len(trace) - 1, -1, -1):
        nexts[i], last[trace[i]] = last.get(trace[i], 1 << 60), i
    held: dict[int, int] = {}
    heap: list[tuple[int, int]] = []
    used, hits = 0, []
    for i, d in enumerate(trace):
        hits.append(d in held)
        if d not in held:
            while used + sizes[d] > cap and heap:
                far, x = heapq.heappop(heap)
                if held.get(x) == -far:
                    used -= sizes[x]
                    del held[x]
            used += sizes[d]
        held[d] = nexts[i]
        heapq.heappush(heap, (-nexts[i], d))
    return hits


def lru(trace: list[int], sizes: list[int], cap: int) -> list[bool]:
    """Hits of keeping the documents used most recently (in bytes at ``cap``)."""
    held: dict[int, None] = {}
    used, hits = 0, []
    for d in trace:
        hits.append(d in held)
        if d in held:
            del held[d]
        else:
            used += sizes[d]
        held[d] = None
        while used > cap:
            x = next(iter(held))
            used -= sizes[x]
            del held[x]
    return hits


class Watch:
    """The most the cache folder held (payload, the rest), sampled every 50 ms; ``cpu``: the
    seconds of CPU its own thread spent sampling (the probe's, not the client's: left out of
    a leg's client CPU, which the obstore leg, with no folder to watch, never paid)."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.worst, self.stop = folder, (0, 0), threading.Event()
        self.cpu = 0.0
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.stop.wait(0.05):
            began = time.thread_time()
            payload, rest = folder_bytes(self.folder)
            self.worst = (max(self.worst[0], payload), max(self.worst[1], rest))
            self.cpu += time.thread_time() - began


class Written:
    """Bytes written into the payload file (every :meth:`DataFile.write`), counted."""

    def __init__(self) -> None:
        self.bytes = 0
        self._write = DataFile.write

        def counted(data_file: DataFile, region: int, at: int, data: Any) -> None:
            self.bytes += len(data)
            self._write(data_file, region, at, data)

        DataFile.write = counted  # type: ignore[method-assign,assignment]


def wchar() -> int:
    """Bytes this process passed to write calls so far (``/proc/self/io``)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    return 0


def run_lading(
    url: str, cache: Path, cap: int, epochs: list[list[list[str]]], plan: bool, written: Written
) -> dict[str, Any]:
    """Two epochs of ``epochs`` (batches of ids) through a cold node cache."""
    store = RemoteStore(url, RemoteSettings.of(cache, cap))
    watch = Watch(cache)
    watch.thread.start()
    store.get_many([epochs[0][0][0]], step=-1)  # connected (one document)
    base = store.cache_stats()
    row: dict[str, Any] = {}
    for e, batches in enumerate(epochs):
        steps = [(e << 32) + j for j in range(len(batches))]
        if plan:
            ahead = batches + (epochs[e + 1] if e + 1 < len(epochs) else [])
            at = steps + [((e + 1) << 32) + j for j in range(len(ahead) - len(batches))]
            store.plan(ahead, steps=at)
        told = 0
        cpu, wall, wrote, chars = time.process_time(), time.perf_counter(), written.bytes, wchar()
        probe = watch.cpu
        before = store.cache_stats()
        for j, ids in enumerate(batches):
            if plan and told < min(j + AHEAD, len(batches)):
                upto = min(j + 2 * AHEAD, len(batches))
                store.prefetch(batches[told:upto], steps[told], steps[j])
                told = upto
            elif plan:
                store.prefetch([], steps[j] + 1, steps[j])
            store.get_many(ids, step=steps[j])
        store._columns.cache.drain()
        after = store.cache_stats()
        docs = sum(map(len, batches))
        row[f"e{e}"] = {
            "cpu_ms": 1e3 * (time.process_time() - cpu - (watch.cpu - probe)) / docs,
            "docs_s": docs / (time.perf_counter() - wall),
            "hits": after["hits"] - before["hits"], "misses": after["misses"] - before["misses"],
            "gets": after["gets"] - before["gets"],
            "fetched": after["bytes_fetched"] - before["bytes_fetched"],
            "written": written.bytes - wrote, "wchar": wchar() - chars,
        }  # fmt: skip
        if e == 0:
            with store._columns.cache.ledger.read() as conn:
                held = conn.execute("SELECT count(*) FROM blocks WHERE owner IS NULL").fetchone()
            row["held"] = int(held[0])
    watch.stop.set()
    watch.thread.join(5)
    stats = store.cache_stats()
    row.update(folder=watch.worst, index_bytes=stats["index_bytes"], cap=stats["cap"],
               gets_all=stats["gets"] - base["gets"])  # fmt: skip
    store.close()
    return row


def run_obstore(
    lookup: Callable[[list[int]], list[str]], batches: list[list[int]], fetched: int
) -> dict[str, Any]:
    """One epoch of bare GETs; ``wchar`` here is the requests' bytes alone (no cache)."""
    docs = sum(map(len, batches))
    cpu, wall, chars = time.process_time(), time.perf_counter(), wchar()
    for batch in batches:
        lookup(batch)
    return {"e0": {"cpu_ms": 1e3 * (time.process_time() - cpu) / docs,
                   "docs_s": docs / (time.perf_counter() - wall),
                   "wchar": wchar() - chars, "fetched": fetched}}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--passages", type=int, default=1_000_000)
    parser.add_argument("--epoch", type=int, default=100_000, help="documents an epoch reads")
    parser.add_argument("--shares", default="0.1,0.005", help="caps, of the text an epoch reads")
    parser.add_argument("--repeats", type=int, default=3)
    add_write_flag(parser)
    args = parser.parse_args()
    work = OUT.parent / "remote-plane"
    work.mkdir(parents=True, exist_ok=True)
    tsv, _, origin = make_corpora(args.passages, work)
    rows: list[dict[str, Any]] = []
    written = Written()
    started = time.time()
    with LocalS3(latency=0.03, jitter=0.01) as s3:
        s3.make_bucket("bench")
        url = "s3://bench/plane"
        built = lading.build_store(tsv, url, cache=str(work / "up"), progress=False)
        ids = built.ids()
        spans = built._columns.spans("text", np.arange(len(ids)))
        sizes = [b - a for _, a, b in spans]
        rng = np.random.default_rng(0)
        chosen = rng.choice(len(ids), args.epoch, replace=False)
        orders = [rng.permutation(chosen) for _ in range(2)]
        rows_of = [[o[i : i + BATCH].tolist() for i in range(0, len(o), BATCH)] for o in orders]
        epochs = [[[ids[r] for r in b] for b in batches] for batches in rows_of]
        text = sum(sizes[r] for r in chosen)
        trace = [r for o in orders for r in o.tolist()]
        bare = bare_obstore(url, spans)
        bare(rows_of[0][0][:1])
        for share in [float(s) for s in args.shares.split(",")]:
            cap = int(share * text)
            half = len(trace) // 2
            optimum = float(np.mean(belady(trace, sizes, cap)[half:]))
            recent = float(np.mean(lru(trace, sizes, cap)[half:]))
            for repeat in range(args.repeats):
                order = SYSTEMS[repeat % 3 :] + SYSTEMS[: repeat % 3]  # each place in turn
                for system in order:
                    load = os.getloadavg()[0]
                    if system == "obstore":
                        row = run_obstore(bare, rows_of[0], text)
                    else:
                        cache = work / f"node-{time.time_ns()}"
                        row = run_lading(url, cache, cap, epochs, system == "lading+plan", written)
                    row.update(system=system, share=share, repeat=repeat, load=load,
                               belady=optimum, lru=recent, mean=text / args.epoch)  # fmt: skip
                    print(json.dumps(row), flush=True)
                    rows.append(row)
    body = render(rows, args, origin, time.time() - started)
    command = "python benchmarks/bench_remote_plane.py " + " ".join(sys.argv[1:])
    write_section(HERE / "RESULTS.md", "Remote: the data plane (issue 47)", body, command,
                  write=args.write)  # fmt: skip


def _per_fetched(row: dict[str, Any], key: str) -> float:
    """Bytes ``key`` over bytes fetched, both epochs: ``written``, the payload file's
    (``pwrite``); ``wchar``, every byte the process wrote (the payload, the ledger's WAL and
    checkpoints, the figures, the requests)."""
    wrote = row["e0"][key] + row["e1"][key]
    return float(wrote / max(1, row["e0"]["fetched"] + row["e1"]["fetched"]))


def _over_lru(hits: list[float], rows: list[dict[str, Any]]) -> str:
    """Hits over LRU's on the same trace; LRU with no hit at all: said, not divided by."""
    if any(r["lru"] == 0 for r in rows):
        return "n/a (LRU: 0 hits)"
    return cell([h / r["lru"] for h, r in zip(hits, rows)], "{:.1f}")


def render(rows: list[dict[str, Any]], args: Any, origin: str, seconds: float) -> str:
    lines = [
        f"{args.passages:,} passages ({origin}) in one store on the local S3 (30 ms ± 10 a "
        f"request); an epoch reads {args.epoch:,} of them once each in random batches of "
        f"{BATCH}, twice; caps are shares of the text an epoch reads. {args.repeats} repeats, "
        f"the systems in one process, their order rotated a repeat, median [min-max]; ratios "
        f"taken within each "
        f"repeat; {os.cpu_count()} cores shared with other work (load in the table). "
        f"{seconds:.0f} s in all.", "",
        "| cap | system | client CPU ms / cold doc | x obstore GET | docs held / (cap / mean) | "
        "epoch-2 hits | x Belady | x LRU | written / fetched | wchar / fetched | "
        "folder payload / cap | folder rest / index_bytes | load |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for share in dict.fromkeys(r["share"] for r in rows):
        base = {r["repeat"]: r["e0"]["cpu_ms"] for r in rows if r["share"] == share
                and r["system"] == "obstore"}  # fmt: skip
        for system in SYSTEMS:
            mine = [r for r in rows if r["share"] == share and r["system"] == system]
            if not mine:
                continue
            cpu = [r["e0"]["cpu_ms"] for r in mine]
            ratio = [r["e0"]["cpu_ms"] / base[r["repeat"]] for r in mine if r["repeat"] in base]
            if system == "obstore":
                chars = [r["e0"]["wchar"] / r["e0"]["fetched"] for r in mine]
                lines.append(f"| {share:.1%} | {system} | {cell(cpu)} | 1 | | | | | | "
                             f"{cell(chars, '{:.1f}')} | | | "
                             f"{cell([r['load'] for r in mine], '{:.1f}')} |")  # fmt: skip
                continue
            e1 = [r["e1"] for r in mine]
            hits = [x["hits"] / max(1, x["hits"] + x["misses"]) for x in e1]
            held = [r["held"] / (r["cap"] / r["mean"]) for r in mine]
            lines.append(
                f"| {share:.1%} | {system} | {cell(cpu)} | {cell(ratio, '{:.2f}')} | "
                f"{cell(held, '{:.2f}')} | {cell(hits)} | "
                f"{cell([h / r['belady'] for h, r in zip(hits, mine)], '{:.2f}')} | "
                f"{_over_lru(hits, mine)} | "
                f"{cell([_per_fetched(r, 'written') for r in mine], '{:.2f}')} | "
                f"{cell([_per_fetched(r, 'wchar') for r in mine], '{:.1f}')} | "
                f"{cell([r['folder'][0] / r['cap'] for r in mine], '{:.2f}')} | "
                f"{cell([r['folder'][1] / r['index_bytes'] for r in mine], '{:.2f}')} | "
                f"{cell([r['load'] for r in mine], '{:.1f}')} |"
            )  # fmt: skip
    lines += ["", "Belady and LRU are computed on the very trace (both epochs) in document "
              "bytes at the same cap; hits are documents read that caused no GET. written: "
              "the payload file's bytes (pwrite); wchar: every byte the process wrote, the "
              "ledger's WAL and checkpoints and the requests' bytes included (obstore's row: "
              "the requests' alone)."]  # fmt: skip
    return "\n".join(lines)


if __name__ == "__main__":
    main()
