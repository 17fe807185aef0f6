"""Feeding a node from object storage, head to head on one local S3 bucket (issue 40).

One trace for every system: a working set of documents drawn from the corpus, read in
random 64-document batches, epoch 1 in one order and epoch 2 in another (a training run's
shape: every document of the set once an epoch). Per system and node-cache cap (a share of the
corpus's text): docs/s and client CPU per document over epoch 1 (cold: nothing cached), GETs
per document and bytes fetched / used (the proxy's counters), epoch-2 hit rate (accesses that
caused no GET), the cache's bytes on disk, and the server's CPU per document (the local S3's
process tree). Systems: lading with the epoch's order handed over (``store.plan``) and without
(no look-ahead: each ``get_many`` fetches what it misses), a bare obstore GET per document
driven from Python (one ``await`` each, a batch gathered), Lance ``take`` (no cache of its
own), Mosaic ``StreamingDataset`` and litdata ``StreamingDataset`` by their own routes (cache
capped the same). The server's own ceiling: lading's fetcher alone, 256 in flight, 400-byte
ranges, in the same run.

    python benchmarks/bench_remote_node.py --passages 100000 --set 6400 --repeats 2 --write
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import psutil

import lading
from common import HERE, OUT, add_write_flag, write_section
from lading.bench.synth import synth
from lading.stores.remote.store import RemoteStore
from lading.testing import LocalS3

BATCH = 64
Lookup = Callable[[list[int]], list[str]]
# Systems that keep nothing between reads on this route: no epoch-2 hit to count
NO_CACHE = {
    "obstore": "no cache: a GET a read",
    "lance": "no data cache: take reads its pages again",
    "litdata": "ds[i] reads ranges on demand, caches nothing",
}


def disk_bytes(folder: Path) -> int:
    """Bytes of every file below ``folder`` but lading's staged index (its manifest, id index
    and offsets, 26-94 B a document: the store's, not the cache's)."""
    if not folder.exists():
        return 0
    files = [p for p in folder.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files if p.relative_to(folder).parts[0] != "stores")


def server_cpu(s3: LocalS3) -> float:
    """CPU seconds of the local S3's process tree so far."""
    assert s3._process is not None
    root = psutil.Process(s3._process.pid)
    total = 0.0
    for p in [root, *root.children(recursive=True)]:
        times = p.cpu_times()
        total += times.user + times.system
    return total


def run_epochs(s3: LocalS3, lookup: Lookup, epochs: list[list[list[int]]], texts: list[str],
               cache: Path | None, hits: Callable[[], tuple[int, int, bool]] | None,
               ) -> dict[str, Any]:  # fmt: skip
    """Both epochs through ``lookup`` (checked against the corpus); epoch 1's rates."""
    s3.reset()
    load = os.getloadavg()[0]
    cpu, wall, server = time.process_time(), time.perf_counter(), server_cpu(s3)
    docs = used = 0
    for batch in epochs[0]:
        assert lookup(batch) == [texts[r] for r in batch], "another text came back"
        docs += len(batch)
        used += sum(len(texts[r].encode()) for r in batch)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    server = server_cpu(s3) - server
    first = s3.stats()
    before = hits() if hits is not None else None
    for batch in epochs[1]:
        assert lookup(batch) == [texts[r] for r in batch], "another text came back"
    second = s3.stats()
    accesses = sum(len(b) for b in epochs[1])
    if before is not None and hits is not None:
        after = hits()
        h, m = (after[0], after[1]) if after[2] else (after[0] - before[0], after[1] - before[1])
        rate = h / max(1, h + m)
    else:  # no per-access count: the share of epoch 1's GETs epoch 2 (same size) did not need
        rate = max(0.0, 1 - (second["gets"] - first["gets"]) / max(1, first["gets"]))
    return {
        "docs_s": docs / wall, "cpu_ms": 1e3 * cpu / docs, "server_ms": 1e3 * server / docs,
        "gets_per_doc": first["gets"] / docs, "fetched_used": first["get_bytes"] / used,
        "hit2": rate, "gets2_per_doc": (second["gets"] - first["gets"]) / accesses,
        "disk": disk_bytes(cache) if cache is not None else 0, "load": load,
    }  # fmt: skip


Hits = Callable[[], tuple[int, int, bool]]


def lading_lookup(url: str, cache: Path, cap: int, ids: list[str], epochs: Any,
                  plan: bool) -> tuple[Lookup, Hits, Any]:  # fmt: skip
    store = lading.open_store(url, cache=cache, cache_bytes=cap)
    assert isinstance(store, RemoteStore)
    if plan:  # as the loader at epoch 1's start: its order and the next epoch's (epoch 2's
        # start would hand epoch 2 and 3); reads move along it, matched to their batches
        steps = [(e << 32) + j for e, batches in enumerate(epochs) for j in range(len(batches))]
        store.plan([[ids[r] for r in b] for e in epochs for b in e], steps=steps)

    clock = iter(steps) if plan else None  # (run_epochs reads the batches in this order)

    def lookup(rows: list[int]) -> list[str]:
        # the step travels with the read (issue 47): with no step a read follows no plan
        step = next(clock) if clock is not None else None
        return store.get_many([ids[r] for r in rows], step=step)

    def hits() -> tuple[int, int, bool]:
        s = store.cache_stats()["process"]
        if plan:  # counted when planned, ahead of the read: epoch 2's own, whenever counted
            h, m = s["by_epoch"].get(1, (0, 0))
            return h, m, True
        return s["hits"], s["misses"], False

    return lookup, hits, store


def obstore_lookup(url: str, spans: list[tuple[str, int, int]]) -> Lookup:
    import obstore
    from obstore.store import from_url

    store = from_url(url, client_options={"allow_http": True}, retry_config={"max_retries": 0})
    loop = asyncio.new_event_loop()

    async def batch(rows: list[int]) -> list[Any]:
        return await asyncio.gather(*(
            obstore.get_range_async(store, spans[r][0], start=spans[r][1], end=spans[r][2])
            for r in rows))  # fmt: skip

    def lookup(rows: list[int]) -> list[str]:
        return [bytes(b).decode() for b in loop.run_until_complete(batch(rows))]

    return lookup


def lance_lookup(s3: LocalS3, bucket: str, ids: list[str], texts: list[str]) -> Lookup:
    import lance
    import pyarrow as pa

    options = {"endpoint": s3.endpoint, "allow_http": "true", "region": "us-east-1",
               "aws_access_key_id": "testing", "aws_secret_access_key": "testing"}  # fmt: skip
    uri = f"s3://{bucket}/lance"
    lance.write_dataset(pa.table({"id": ids, "text": texts}), uri, storage_options=options,
                        mode="overwrite")  # fmt: skip
    ds = lance.dataset(uri, storage_options=options)

    def lookup(rows: list[int]) -> list[str]:
        found: list[str] = ds.take(rows, columns=["text"]).column("text").to_pylist()
        return found

    return lookup


def peer_lookup(kind: str, s3: LocalS3, bucket: str, texts: list[str], work: Path, cap: int,
                shard_bytes: int) -> tuple[Lookup, Path]:  # fmt: skip
    """Mosaic or litdata by their own routes (``remote_peers.py``), 16 threads a batch, the
    local cache capped at ``cap`` bytes (Mosaic's shards ``shard_bytes``, so four fit)."""
    import remote_peers

    if kind == "mosaic":
        return remote_peers.mosaic_node(s3.endpoint, bucket, texts, work, cap, shard_bytes)
    if kind == "litdata":
        return remote_peers.litdata_node(s3.endpoint, bucket, texts, work)
    raise ValueError(f"unknown peer {kind!r}: mosaic or litdata")


def ceiling(seconds: float) -> dict[str, float]:
    """lading's fetcher alone, 256 in flight, random 400-byte ranges of one 64 MiB object
    (``seconds <= 0``: not measured)."""
    if seconds <= 0:
        return {"gets_s": float("nan"), "cpu_us": float("nan")}
    from lading.remote.clients import open_client
    from lading.remote.fetch import Fetcher

    open_client("s3://bench/ceiling").put("blob", os.urandom(64 << 20))
    fetcher = Fetcher(lambda: open_client("s3://bench/ceiling"), in_flight=256)
    fetcher.read([("blob", 0, 400, None)])
    rng = np.random.default_rng(0)
    gets, cpu, started = 0, time.process_time(), time.perf_counter()
    while time.perf_counter() - started < seconds:
        starts = rng.integers(0, (64 << 20) - 400, 2048).tolist()
        fetcher.read([("blob", a, a + 400, None) for a in starts])
        gets += 2048
    elapsed = time.perf_counter() - started
    fetcher.close()
    return {"gets_s": gets / elapsed, "cpu_us": 1e6 * (time.process_time() - cpu) / gets}


def one_cap(s3: LocalS3, args: Any, env: dict[str, Any], share: float, repeat: int) -> list[Any]:
    """Every system at a cap of ``share`` of the corpus's text."""
    ids, texts, spans, epochs = env["ids"], env["texts"], env["spans"], env["epochs"]
    work = env["work"]
    cap = int(share * env["text_bytes"])
    rows = []
    systems = ["lading+plan", "lading", "obstore", "lance", *args.peers.split(",")]
    for system in [s for s in systems if s]:
        node = work / f"node-{system}-{time.time_ns()}"
        cache: Path | None = node
        hits = None
        try:
            if system.startswith("lading"):
                lookup, hits, _ = lading_lookup(env["url"], node, cap, ids, epochs,
                                                system == "lading+plan")  # fmt: skip
            elif system == "obstore":
                lookup, cache = obstore_lookup(env["url"], spans), None
            elif system == "lance":
                lookup, cache = env.setdefault("lance", lance_lookup(s3, "bench", ids, texts)), None
            else:
                lookup, cache = peer_lookup(system, s3, "bench", texts, work, cap,
                                            env["shard_bytes"])  # fmt: skip
            row = run_epochs(s3, lookup, epochs, texts, cache, hits)
        except Exception as e:  # a peer that cannot do it: say why
            row = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"}
        row.update(system=system, share=share, cap=cap, repeat=repeat)
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--passages", type=int, default=100_000)
    parser.add_argument("--set", type=int, default=6400, help="documents an epoch reads")
    parser.add_argument("--shares", default="0.1,0.005", help="node cache caps, of the text")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--peers", default="mosaic,litdata")
    parser.add_argument("--ceiling-seconds", type=float, default=4.0)
    add_write_flag(parser)
    args = parser.parse_args()
    work = OUT.parent / "remote-node"
    import shutil

    for pattern in ("mds*", "litdata*", "mosaic-cache-*", "node-*"):  # an earlier run's files
        for stale in work.glob(pattern):  # (its bucket is gone: the peers upload again)
            shutil.rmtree(stale)
    folder = work / f"passages-{args.passages}"
    if not (folder / "collection.tsv").is_file():
        synth("passages", args.passages, folder, queries=2000)
    started = time.time()
    with LocalS3(latency=0.03, jitter=0.01) as s3:
        s3.make_bucket("bench")
        url = "s3://bench/lading"
        store = lading.build_store(folder / "collection.tsv", url, cache=str(work / "up"),
                                   progress=False)  # fmt: skip
        ids = store.ids()
        texts = store.get_many(ids)  # the corpus as lading reads it (checked against the local)
        spans = store._columns.spans("text", np.arange(len(ids)))
        rng = np.random.default_rng(0)
        chosen = rng.choice(len(ids), args.set, replace=False)
        orders = [rng.permutation(chosen) for _ in range(2)]  # each document once an epoch
        epochs = [[o[i : i + BATCH].tolist() for i in range(0, args.set, BATCH)] for o in orders]
        text_bytes = sum(b - a for _, a, b in spans)
        working = sum(spans[r][2] - spans[r][1] for r in chosen)
        # Mosaic refuses a cache_limit below four of its largest shards: shards of a fifth of
        # the smallest cap, for every cap (one upload)
        shares = [float(x) for x in args.shares.split(",")]
        shard_bytes = min(1 << 20, int(min(shares) * text_bytes) // 5)
        env = {"ids": ids, "texts": texts, "spans": spans, "epochs": epochs, "work": work,
               "url": url, "text_bytes": text_bytes, "shard_bytes": shard_bytes}  # fmt: skip
        rows = []
        for repeat in range(args.repeats):
            for share in shares:
                rows += one_cap(s3, args, env, share, repeat)
        roof = ceiling(args.ceiling_seconds)
        roof["server_ms"] = 0.0
    results = {"rows": rows, "ceiling": roof, "text_bytes": text_bytes, "working": working,
               "shard_bytes": shard_bytes,
               "args": vars(args), "seconds": time.time() - started}  # fmt: skip
    (work / "results.json").write_text(json.dumps(results, indent=1))
    command = "python benchmarks/bench_remote_node.py " + " ".join(sys.argv[1:])
    write_section(HERE / "RESULTS.md", "Remote: feeding a node, head to head (issue 40)",
                  render(results), command, write=args.write)  # fmt: skip


def render(results: dict[str, Any]) -> str:
    args = results["args"]
    rows = [r for r in results["rows"] if "error" not in r]
    lines = [
        f"{args['passages']:,} synthesized passages ({results['text_bytes'] / 2**20:.1f} MiB of "
        f"text) on the local S3 (moto behind lading's proxy, 30 ms ± 10 a request), this "
        f"machine: {os.cpu_count()} cores shared with other work. One trace for every system: "
        f"{args['set']:,} documents ({results['working'] / 2**20:.2f} MiB, the working set) read "
        f"in random batches of {BATCH}, epoch 1 cold, epoch 2 in another order. "
        f"{args['repeats']} repeats, median [min-max]; rates over epoch 1; CPU: the client "
        "process's own (its Rust threads included), the server's: the local S3's process tree. "
        f"{results['seconds']:.0f} s in all. Mosaic: `StreamingDataset(remote=s3://..., "
        f"cache_limit=cap).get_item(i)`, MDS shards of at most {results['shard_bytes']:,} bytes "
        "(a fifth of the smallest cap: Mosaic refuses a cap below four shards); litdata: "
        "`StreamingDataset(s3://...)[i]` (two ranged GETs an item, its on-demand route); both "
        "from 16 threads a batch, as a DataLoader's workers would. Epoch-2 hit rate: lading's "
        "own count of accesses; Mosaic's: the share of epoch 1's GETs epoch 2 did not need.", "",
        "| cap / corpus | system | docs/s | client CPU ms/doc | server CPU ms/doc | GETs/doc | "
        "bytes fetched / used | epoch-2 hit rate | cache bytes on disk | load |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for share in dict.fromkeys(r["share"] for r in results["rows"]):
        for system in dict.fromkeys(r["system"] for r in results["rows"]):
            mine = [r for r in rows if r["share"] == share and r["system"] == system]
            failed = [r for r in results["rows"] if r["share"] == share and r["system"] == system
                      and "error" in r]  # fmt: skip
            if not mine:
                why = failed[0]["error"] if failed else "not run"
                lines.append(f"| {share:.1%} | {system} | failed: {why} | | | | | | | |")
                continue

            def cell(key: str, fmt: str, mine: list[Any] = mine) -> str:
                values = [r[key] for r in mine]
                mid = statistics.median(values)
                return f"{fmt.format(mid)} [{fmt.format(min(values))}-{fmt.format(max(values))}]"

            hit2 = cell("hit2", "{:.1%}")
            if system in NO_CACHE:
                hit2 = f"n/a: {NO_CACHE[system]} ({cell('gets2_per_doc', '{:.2f}')} GETs/doc)"
            lines.append(
                f"| {share:.1%} | {system} | {cell('docs_s', '{:,.0f}')} | "
                f"{cell('cpu_ms', '{:.3f}')} | {cell('server_ms', '{:.3f}')} | "
                f"{cell('gets_per_doc', '{:.2f}')} | {cell('fetched_used', '{:.2f}')} | "
                f"{hit2} | {cell('disk', '{:,.0f}')} | {cell('load', '{:.1f}')} |"
            )
    roof = results["ceiling"]
    lines += ["", f"The server's ceiling in the same run: lading's fetcher alone, 256 in flight, "
              f"random 400-byte ranges: {roof['gets_s']:,.0f} GETs/s at {roof['cpu_us']:.0f} us "
              "of client CPU a GET."]  # fmt: skip
    return "\n".join(lines)


if __name__ == "__main__":
    main()
