"""Where a remote store's client CPU goes per cold document, thread by thread (issue 40 item 1).

    python benchmarks/remote_cpu.py [--passages 100000] [--set 6400] [--repeats 3] [--write]

On the local S3 (30 ms ± 10 a request), one passage corpus: a set of documents read in random
batches of 64 with a cold node cache, by lading's ``get_many`` (no look-ahead, and with the
epoch's order handed over: ``store.plan``) and by a bare obstore GET per document driven from
Python (one ``await`` each, a batch gathered), alternated in one process. Per document: the
process's CPU, and each thread's (``/proc/self/task/*/schedstat``): the main thread (lading's
planner, ledger lookups and claims, decoding), ``lading-fetch`` (the asyncio loop that awaits
obstore's calls), ``lading-fill`` (the ledger's writer), ``tokio`` (obstore's Rust runtime:
HTTP, signing, the sockets). Each text is checked against the corpus.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import lading
from common import HERE, OUT, add_write_flag, write_section
from lading.bench.synth import synth
from lading.stores.remote.store import RemoteStore
from lading.testing import LocalS3

BATCH = 64


def thread_cpu() -> dict[str, int]:
    """CPU nanoseconds of each thread of this process so far, by name (tokio's summed)."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    out: dict[str, int] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            ns = int(Path(f"/proc/self/task/{tid}/schedstat").read_text().split()[0])
            comm = Path(f"/proc/self/task/{tid}/comm").read_text().strip()
        except OSError:  # the thread ended meanwhile
            continue
        name = names.get(int(tid), comm)
        name = "tokio" if name.startswith("tokio") else name
        out[f"{name}:{tid}"] = ns
    return out


def by_thread(before: dict[str, int], after: dict[str, int], docs: int) -> dict[str, float]:
    """ms of CPU a document per thread name, between two :func:`thread_cpu` readings."""
    out: dict[str, float] = {}
    for key, ns in after.items():
        name = key.split(":", 1)[0]
        out[name] = out.get(name, 0.0) + (ns - before.get(key, 0)) / 1e6 / docs
    return {k: v for k, v in out.items() if v > 0.0005}


def one(lookup: Callable[[list[int]], list[str]], batches: list[list[int]],
        texts: list[str]) -> dict[str, Any]:  # fmt: skip
    """Read every batch (checked); CPU a document, in all and per thread."""
    docs = sum(len(b) for b in batches)
    threads, cpu, wall = thread_cpu(), time.process_time(), time.perf_counter()
    for batch in batches:
        assert lookup(batch) == [texts[r] for r in batch], "another text came back"
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return {"cpu_ms": 1e3 * cpu / docs, "docs_s": docs / wall,
            "threads": by_thread(threads, thread_cpu(), docs)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--passages", type=int, default=100_000)
    parser.add_argument("--set", type=int, default=6400, help="documents read, each once")
    parser.add_argument("--share", type=float, default=0.1, help="node cache cap, of the text")
    parser.add_argument("--repeats", type=int, default=3)
    add_write_flag(parser)
    args = parser.parse_args()
    work = OUT.parent / "remote-cpu"
    folder = work / f"passages-{args.passages}"
    if not (folder / "collection.tsv").is_file():
        synth("passages", args.passages, folder, queries=2000)
    rows: list[dict[str, Any]] = []
    started = time.time()
    with LocalS3(latency=0.03, jitter=0.01) as s3:
        s3.make_bucket("bench")
        url = "s3://bench/cpu"
        built = lading.build_store(folder / "collection.tsv", url, cache=str(work / "up"),
                                   progress=False)  # fmt: skip
        ids = built.ids()
        texts = built.get_many(ids)
        spans = built._columns.spans("text", np.arange(len(ids)))
        cap = int(args.share * sum(b - a for _, a, b in spans))
        rng = np.random.default_rng(0)
        chosen = rng.choice(len(ids), args.set, replace=False)
        batches = [chosen[i : i + BATCH].tolist() for i in range(0, args.set, BATCH)]
        bare = bare_obstore(url, spans)
        bare(batches[0][:1])  # connected
        for repeat in range(args.repeats):
            for system in ("lading", "lading+plan", "obstore"):
                load = os.getloadavg()[0]
                if system == "obstore":
                    row = one(bare, batches, texts)
                else:
                    store = lading.open_store(url, cache=work / f"node-{time.time_ns()}",
                                              cache_bytes=cap)  # fmt: skip
                    assert isinstance(store, RemoteStore)
                    if system == "lading+plan":
                        store.plan([[ids[r] for r in b] for b in batches])
                    store.get_many([ids[batches[0][0]]])  # connected (one document)
                    row = one(_reader(store, ids), batches, texts)
                    store.close()
                row.update(system=system, repeat=repeat, load=load)
                print(json.dumps(row), flush=True)
                rows.append(row)
    body = render(rows, args, time.time() - started)
    command = "python benchmarks/remote_cpu.py " + " ".join(sys.argv[1:])
    write_section(HERE / "RESULTS.md", "Remote: client CPU per cold document, by thread", body,
                  command, write=args.write)  # fmt: skip


def _reader(store: RemoteStore, ids: list[str]) -> Callable[[list[int]], list[str]]:
    """Batch ``j`` read at step ``j``, as a loader reads: with a plan the step is what moves
    its window ahead (since issue 47 the read carries it; a read with none fetches nothing
    ahead, and this script's plan row read at the no-plan row's docs/s until it said it)."""
    steps = itertools.count()
    return lambda rows: store.get_many([ids[r] for r in rows], step=next(steps))


def bare_obstore(url: str, spans: list[tuple[str, int, int]]) -> Callable[[list[int]], list[str]]:
    """A bare obstore GET per document, one ``await`` each, a batch gathered."""
    import obstore
    from obstore.store import from_url

    store = from_url(url, client_options={"allow_http": True}, retry_config={"max_retries": 0})
    loop = asyncio.new_event_loop()

    async def batch(rows: list[int]) -> list[Any]:
        return await asyncio.gather(*(
            obstore.get_range_async(store, spans[r][0], start=spans[r][1], end=spans[r][2])
            for r in rows))  # fmt: skip

    return lambda rows: [bytes(b).decode() for b in loop.run_until_complete(batch(rows))]


def render(rows: list[dict[str, Any]], args: Any, seconds: float) -> str:
    names = ["MainThread", "lading-fetch", "lading-fill", "tokio"]
    lines = [
        f"{args.passages:,} synthesized passages on the local S3 (30 ms ± 10 a request); "
        f"{args.set:,} of them read once each in random batches of {BATCH}, a cold node "
        f"cache capped at {args.share:.1%} of the text; {args.repeats} repeats, the systems "
        f"alternated in one process, median [min-max]; this machine: {os.cpu_count()} cores "
        f"shared with other work (load in the table). {seconds:.0f} s in all.", "",
        "| system | client CPU ms/doc | / obstore's (paired) | " + " | ".join(names)
        + " | docs/s | load |",
        "|---|---|---|" + "---|" * len(names) + "---|---|",
    ]  # fmt: skip

    def cell(values: list[float], fmt: str = "{:.3f}") -> str:
        mid = statistics.median(values)
        return f"{fmt.format(mid)} [{fmt.format(min(values))}-{fmt.format(max(values))}]"

    bare = {r["repeat"]: r["cpu_ms"] for r in rows if r["system"] == "obstore"}
    for system in dict.fromkeys(r["system"] for r in rows):
        mine = [r for r in rows if r["system"] == system]
        parts = [cell([r["threads"].get(n, 0.0) for r in mine]) for n in names]
        paired = cell([r["cpu_ms"] / bare[r["repeat"]] for r in mine if r["repeat"] in bare],
                      "{:.2f}")  # fmt: skip
        lines.append(
            f"| {system} | {cell([r['cpu_ms'] for r in mine])} | {paired} | " + " | ".join(parts)
            + f" | {cell([r['docs_s'] for r in mine], '{:,.0f}')} | "
            f"{cell([r['load'] for r in mine], '{:.1f}')} |"
        )  # fmt: skip
    return "\n".join(lines)


if __name__ == "__main__":
    main()
