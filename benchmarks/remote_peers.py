"""The peers on the local S3, each by its own documented route (run in the peers venv by
bench_remote.py): Lance ``take`` on ``s3://``, Mosaic ``StreamingDataset(remote=...)``
``get_item``, litdata ``StreamingDataset("s3://...")[i]``. Prints one JSON line.

Each system writes the corpus in its format to a local folder, the folder goes to the bucket
(Lance writes to ``s3://`` itself), then a fresh reader with an empty local cache looks up
random 64-document batches by id (an id -> position map built from the corpus, as a user of
a positional store keeps one) for the window. GETs and bytes: the proxy's counters.

Mosaic streaming imports torchvision at top level (``streaming.vision``) but reads no image
here; where torchvision cannot be imported (no build for this torch), a stub module stands in.
"""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.machinery
import json
import multiprocessing
import sys
import tempfile
import time
import traceback
import types
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

BATCH = 64
BatchLookup = Callable[[list[int]], list[str]]


def control(endpoint: str, what: str) -> Any:
    data = b"{}" if what != "stats" else None
    request = urllib.request.Request(f"{endpoint}/_lading/{what}", data=data)
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def read_corpus(path: Path) -> tuple[list[str], list[str]]:
    ids, texts = [], []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if path.suffix == ".jsonl":
                record = json.loads(line)
                ids.append(str(record.get("doc_id") or record.get("id")))
                texts.append(str(record.get("text") or record.get("body") or ""))
            else:
                doc_id, _, text = line.rstrip("\n").partition("\t")
                ids.append(doc_id)
                texts.append(text)
    return ids, texts


def timed(lookup: Callable[[list[int]], list[str]], n: int, seconds: float, endpoint: str,
          texts: list[str]) -> dict[str, Any]:  # fmt: skip
    """Random batches through ``lookup`` for ``seconds``, checked against the corpus."""
    rng = np.random.default_rng(0)
    control(endpoint, "reset")
    docs = used = 0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        rows = rng.integers(0, n, BATCH).tolist()
        got = lookup(rows)
        assert got == [texts[r] for r in rows], "a peer returned other texts"
        docs += len(rows)
        used += sum(len(texts[r].encode()) for r in rows)
    elapsed = time.perf_counter() - started
    stats = control(endpoint, "stats")
    return {"docs_s": docs / elapsed, "gets_per_doc": stats["gets"] / max(1, docs),
            "bytes_ratio": stats["get_bytes"] / max(1, used), "docs": docs}  # fmt: skip


def lance_rows(args: Any, ids: list[str], texts: list[str]) -> dict[str, Any]:
    import lance
    import pyarrow as pa

    options = {"endpoint": args.endpoint, "allow_http": "true", "region": "us-east-1",
               "aws_access_key_id": "testing", "aws_secret_access_key": "testing"}  # fmt: skip
    uri = f"s3://{args.bucket}/lance-{Path(args.corpus).stem}"
    lance.write_dataset(pa.table({"id": ids, "text": texts}), uri, storage_options=options,
                        mode="overwrite")  # fmt: skip
    ds = lance.dataset(uri, storage_options=options)

    def lookup(rows: list[int]) -> list[str]:
        table = ds.take(rows, columns=["text"])
        return table.column("text").to_pylist()

    return {"system": "lance " + lance.__version__, "route": "dataset(s3://).take(rows)",
            **timed(lookup, len(ids), args.seconds, args.endpoint, texts)}  # fmt: skip


def _upload(local: Path, bucket: str, prefix: str) -> None:
    import boto3

    s3 = boto3.client("s3")
    for path in local.rglob("*"):
        if path.is_file():
            s3.upload_file(str(path), bucket, f"{prefix}/{path.relative_to(local).as_posix()}")


def mosaic_rows(args: Any, ids: list[str], texts: list[str]) -> dict[str, Any]:
    import os

    os.environ["S3_ENDPOINT_URL"] = args.endpoint  # streaming's own variable for its boto3
    from streaming import MDSWriter, StreamingDataset

    work = Path(args.work) / "mds"
    with MDSWriter(out=str(work), columns={"id": "str", "text": "str"}) as out:
        for doc_id, text in zip(ids, texts):
            out.write({"id": doc_id, "text": text})
    prefix = f"mds-{Path(args.corpus).stem}"
    _upload(work, args.bucket, prefix)
    cache = tempfile.mkdtemp(prefix="mds-cache-", dir=args.work)
    ds = StreamingDataset(remote=f"s3://{args.bucket}/{prefix}", local=cache, shuffle=False,
                          batch_size=1)  # fmt: skip

    def lookup(rows: list[int]) -> list[str]:
        return [ds.get_item(r)["text"] for r in rows]

    import streaming

    return {"system": "mosaicml-streaming " + streaming.__version__,
            "route": "StreamingDataset(remote=s3://).get_item(i)", "note": "64 MiB shards",
            **timed(lookup, len(ids), args.seconds, args.endpoint, texts)}  # fmt: skip


def litdata_rows(args: Any, ids: list[str], texts: list[str]) -> dict[str, Any]:
    import litdata

    work = Path(args.work) / "litdata"
    # bare strings: a dict of strings is written as an Arrow footer that ds[i] reads as 0
    # bytes (see litdata_text)
    litdata.optimize(fn=litdata_text, inputs=texts, output_dir=str(work),
                     chunk_bytes="64MB", num_workers=1, mode="overwrite")  # fmt: skip
    prefix = f"litdata-{Path(args.corpus).stem}"
    _upload(work, args.bucket, prefix)
    cache = tempfile.mkdtemp(prefix="lit-cache-", dir=args.work)
    ds = litdata.StreamingDataset(
        f"s3://{args.bucket}/{prefix}", cache_dir=cache,
        storage_options={"endpoint_url": args.endpoint},
    )  # fmt: skip

    def lookup(rows: list[int]) -> list[str]:
        return [str(ds[r]) for r in rows]

    return {"system": "litdata " + litdata.__version__, "route": "StreamingDataset(s3://)[i]",
            "note": "64 MB chunks; by position", **timed(lookup, len(ids), args.seconds,
                                                          args.endpoint, texts)}  # fmt: skip


def _litdata_item(item: tuple[str, str]) -> dict[str, str]:
    return {"id": item[0], "text": item[1]}


def upload_many(local: Path, bucket: str, prefix: str, threads: int = 16) -> None:
    """``local``'s files to ``s3://bucket/prefix/`` from ``threads`` threads (a thousand small
    shards one at a time through a 30 ms proxy take a minute; boto3 clients are thread-safe)."""
    import boto3

    s3 = boto3.client("s3")
    files = [p for p in local.rglob("*") if p.is_file()]
    with ThreadPoolExecutor(threads) as pool:
        list(
            pool.map(
                lambda p: s3.upload_file(
                    str(p), bucket, f"{prefix}/{p.relative_to(local).as_posix()}"
                ),
                files,
            )
        )


def threaded(get_one: Callable[[int], str], threads: int) -> tuple[BatchLookup, Any]:
    """A batch lookup that reads its documents one ``get_one`` each from ``threads`` threads,
    request order kept (what a map-style dataset's DataLoader workers do, in one process).
    Returns the lookup and the pool (shut it down when done)."""
    pool = ThreadPoolExecutor(threads)
    return (lambda rows: list(pool.map(get_one, rows))), pool


def mosaic_node(endpoint: str, bucket: str, texts: list[str], work: Path, cap: int,
                shard_bytes: int, threads: int = 16) -> tuple[BatchLookup, Path]:  # fmt: skip
    """Mosaic ``StreamingDataset(remote=s3://..., cache_limit=cap).get_item(i)`` from
    ``threads`` threads (its ``prepare_shard`` is thread- and process-safe), the corpus written
    once as MDS shards of at most ``shard_bytes`` (Mosaic refuses a ``cache_limit`` below four
    of its largest shard) and uploaded under ``mds-<shard_bytes>``. Returns the lookup and the
    local cache folder (empty at the start)."""
    import os

    os.environ["S3_ENDPOINT_URL"] = endpoint  # streaming's own variable for its boto3
    _stub_torchvision()
    from streaming import MDSWriter, StreamingDataset

    prefix = f"mds-{shard_bytes}"
    local = work / prefix
    if not (local / "index.json").is_file():
        with MDSWriter(out=str(local), columns={"text": "str"}, size_limit=shard_bytes) as out:
            for text in texts:
                out.write({"text": text})
        upload_many(local, bucket, prefix)
    cache = work / f"mosaic-cache-{time.time_ns()}"
    ds = StreamingDataset(remote=f"s3://{bucket}/{prefix}", local=str(cache), shuffle=False,
                          batch_size=1, cache_limit=cap)  # fmt: skip
    lookup, _ = threaded(lambda r: ds.get_item(r)["text"], threads)
    return lookup, cache


def litdata_text(text: str) -> str:
    """litdata's item: the bare string. A dict of strings makes litdata 0.2.76 write its chunks
    as an Arrow footer only (every per-item offset equal), which its own ``ds[i]`` route then
    reads as 0 bytes (``struct.error``): the writer's layout and the on-demand reader disagree."""
    return text


def litdata_node(endpoint: str, bucket: str, texts: list[str], work: Path,
                 threads: int = 16) -> tuple[BatchLookup, Path]:  # fmt: skip
    """litdata ``StreamingDataset("s3://...")[i]`` from ``threads`` threads: random access by
    index reads two ranges of the chunk on demand (the item's offsets, then its bytes) and
    caches nothing (``max_cache_size`` bounds the whole chunks iteration downloads). Returns
    the lookup and the cache folder."""
    import litdata

    local = work / "litdata-str"
    if not (local / "index.json").is_file():
        method = multiprocessing.get_start_method(allow_none=True)
        litdata.optimize(fn=litdata_text, inputs=texts, output_dir=str(local),
                         chunk_bytes="1MB", num_workers=1, mode="overwrite")  # fmt: skip
        multiprocessing.set_start_method(method, force=True)  # optimize leaves 'spawn' set
        upload_many(local, bucket, "litdata-str")
    cache = work / f"litdata-cache-{time.time_ns()}"
    ds = litdata.StreamingDataset(f"s3://{bucket}/litdata-str", cache_dir=str(cache),
                                  storage_options={"endpoint_url": endpoint})  # fmt: skip
    lookup, _ = threaded(lambda r: str(ds[r]), threads)
    return lookup, cache


class _Stub(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Any ``torchvision.*`` import: a module whose every attribute is a placeholder class."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name == "torchvision" or name.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> Any:
        module = types.ModuleType(spec.name)
        module.__path__ = []  # a package: submodules import through this finder too
        module.__getattr__ = lambda attr: type(attr, (), {})  # type: ignore[method-assign]
        return module

    def exec_module(self, module: Any) -> None:
        pass


def _stub_torchvision() -> None:
    try:
        import torchvision  # noqa: F401
    except Exception:
        for name in [n for n in sys.modules if n.startswith("torchvision")]:
            del sys.modules[name]
        sys.meta_path.insert(0, _Stub())


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--corpus", "--work", "--bucket", "--endpoint"):
        parser.add_argument(name, required=True)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    Path(args.work).mkdir(parents=True, exist_ok=True)
    _stub_torchvision()
    ids, texts = read_corpus(Path(args.corpus))
    rows = []
    for run in (lance_rows, mosaic_rows, litdata_rows):
        started = time.perf_counter()
        try:
            row = run(args, ids, texts)
        except Exception:
            why = traceback.format_exc().strip().splitlines()[-1][:160]
            row = {"system": run.__name__.split("_")[0], "route": "-", "note": f"failed: {why}"}
        row["seconds"] = time.perf_counter() - started
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    print(json.dumps({"rows": rows}))


if __name__ == "__main__":
    main()
