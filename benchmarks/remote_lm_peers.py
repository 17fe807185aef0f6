"""The LM peers of bench_remote_lm.py on the local S3, each by its own documented route.

- Mosaic ``StreamingDataset`` over MDS token shards (llm-foundry's layout: one sample a window
  of ``seq_len + 1`` tokens, column ``ndarray:uint16``), read with ``StreamingDataLoader``.
- litdata ``StreamingDataset`` with ``TokensLoader(block_size=seq_len + 1)`` over chunks that
  ``litdata.optimize(..., item_loader=TokensLoader())`` wrote (litgpt's pretraining route), read
  with ``StreamingDataLoader``.

Both write to a local folder, the folder goes to the bucket, and a reader with an empty cache
capped at the node cache's bytes reads one shuffled epoch. Each yields batches of
``[batch, seq_len + 1]`` token tensors.

litdata 0.2.76 and this local S3 (found for issue 41): its whole-chunk downloads go through an
obstore ``S3Store`` whose ``client_options`` it fixes (timeouts, pool), which replaces the
environment's ``AWS_ALLOW_HTTP``; on an ``http://`` endpoint every chunk GET then fails inside
the prefetch thread ("builder error: BadScheme"). :func:`allow_http_in_litdata` adds
``allow_http`` to those options, as any user of an ``http://`` S3-compatible endpoint (MinIO)
must. The ``struct.error`` of ``ds[i]`` in issue 40's benchmark is litdata's own: ``ds[i]`` on a
remote dataset reads the item's bytes by the chunk's offset table (``on_demand_bytes``), but
0.2.76 writes a dict of strings as an Arrow footer whose offset table is all header (every item
0 bytes long), so the item's bytes are empty. Iterating (as here) or ``ds[i]`` with
``on_demand_bytes`` off downloads whole chunks and reads them right.
"""

from __future__ import annotations

import itertools
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

import remote_peers

Batches = Iterator[torch.Tensor]


def allow_http_in_litdata(endpoint: str) -> None:
    """Let litdata's obstore chunk downloads reach an ``http://`` endpoint (see the module's
    docstring): its client options otherwise drop the environment's ``AWS_ALLOW_HTTP``."""
    import litdata.streaming.downloader as downloader

    if endpoint.startswith("http://"):
        options = dict(downloader._OBSTORE_CLIENT_OPTIONS)
        options["allow_http"] = True
        downloader._OBSTORE_CLIENT_OPTIONS = options


def windows_of(tokens: np.ndarray, seq_len: int) -> int:
    """How many windows of ``seq_len + 1`` tokens, every ``seq_len`` (lading's stream windows)."""
    return (len(tokens) - 1) // seq_len


# --- Mosaic -------------------------------------------------------------------------------


def mosaic_write(tokens: np.ndarray, seq_len: int, out: Path, shard_bytes: int) -> None:
    """Every window as one MDS sample (``seq_len + 1`` uint16 tokens), shards of at most
    ``shard_bytes``: Mosaic wants its cache to hold four shards, so shards are small."""
    remote_peers._stub_torchvision()
    from streaming import MDSWriter

    columns = {"tokens": f"ndarray:uint16:{seq_len + 1}"}
    with MDSWriter(out=str(out), columns=columns, size_limit=shard_bytes) as writer:
        for w in range(windows_of(tokens, seq_len)):
            writer.write({"tokens": np.asarray(tokens[w * seq_len : w * seq_len + seq_len + 1])})


def mosaic_loader(remote: str, local: Path, cap: int, batch: int, window_bytes: int,
                  shard_bytes: int) -> Any:  # fmt: skip
    """``StreamingDataLoader`` over ``StreamingDataset(remote=...)``, cache capped at ``cap``.

    One canonical node and a shuffle block of half the cache's samples: Mosaic's defaults (64
    canonical nodes, blocks of 262,144 samples) draw every sample from anywhere in the corpus,
    so a cache of a few shards downloads each shard again and again."""
    remote_peers._stub_torchvision()
    from streaming import StreamingDataLoader, StreamingDataset
    from streaming.base.util import clean_stale_shared_memory

    clean_stale_shared_memory()
    block = max(shard_bytes // window_bytes, cap // window_bytes // 2)
    dataset = StreamingDataset(
        remote=remote, local=str(local), shuffle=True, shuffle_seed=0, batch_size=batch,
        cache_limit=cap, num_canonical_nodes=1, shuffle_block_size=block,
    )  # fmt: skip
    return StreamingDataLoader(dataset, batch_size=batch, num_workers=0)


def mosaic_batches(loader: Any) -> Batches:
    for found in loader:
        yield found["tokens"]


def mosaic_setup(env: dict[str, Any], s3: Any, bucket: str) -> dict[str, Any]:
    """Write and upload the MDS shards once; what a reader needs."""
    os.environ["S3_ENDPOINT_URL"] = s3.endpoint  # streaming's own variable for its boto3
    work: Path = env["work"] / "mds"
    shard_bytes = max(env["window_bytes"], env["cap"] // 8)  # 8 shards fit the cache
    if work.exists():
        shutil.rmtree(work)
    mosaic_write(env["tokens"], env["seq_len"], work, shard_bytes)
    remote_peers._upload(work, bucket, "mds-lm")
    shards = sorted(work.glob("shard.*.mds"))
    return {"remote": f"s3://{bucket}/mds-lm", "shard_bytes": shard_bytes, "shards": len(shards)}


def mosaic_open(env: dict[str, Any], setup: dict[str, Any], cache: Path) -> Any:
    return mosaic_loader(setup["remote"], cache, env["cap"], env["batch"], env["window_bytes"],
                         setup["shard_bytes"])  # fmt: skip


def mosaic_resume(env: dict[str, Any], setup: dict[str, Any], k: int) -> str:
    """Read ``k`` batches, save, resume in a fresh reader with a cold cache: the next two
    batches compared with the uninterrupted run's."""
    first = mosaic_open(env, setup, env["work"] / f"mds-resume-a-{time.time_ns()}")
    seen, state = [], None
    for i, found in enumerate(first):
        seen.append(found["tokens"].clone())
        if i == k - 1:  # k batches handed out: save here
            state = first.state_dict()
        if i == k + 1:
            break
    del first
    second = mosaic_open(env, setup, env["work"] / f"mds-resume-b-{time.time_ns()}")
    second.load_state_dict(state)
    again = [found["tokens"].clone() for _, found in zip(range(2), second)]
    return verdict(seen[k:], again)


# --- litdata ------------------------------------------------------------------------------


def _litdata_documents(job: tuple[str, str, str, int, int]) -> Iterator[torch.Tensor]:
    """One input of ``optimize``: documents ``start .. end`` of the corpus, one tensor each,
    as litgpt's pretraining recipes yield them (the tokens, not the text, are the corpus:
    tokenizing again would change nothing measured here)."""
    tokens_path, dtype, offsets_path, start, end = job
    tokens = np.memmap(tokens_path, dtype=np.dtype(dtype), mode="r")
    offsets = np.memmap(offsets_path, dtype=np.uint64, mode="r")
    for doc in range(start, end):
        a, b = int(offsets[doc]), int(offsets[doc + 1])
        yield torch.from_numpy(np.array(tokens[a:b]))  # the corpus's dtype: uint16 here


def litdata_setup(env: dict[str, Any], s3: Any, bucket: str) -> dict[str, Any]:
    """``optimize`` the documents into chunks of whole windows, 8 to the cache; upload once."""
    import litdata
    from litdata import TokensLoader

    allow_http_in_litdata(s3.endpoint)
    work: Path = env["work"] / "litdata-lm"
    if work.exists():
        shutil.rmtree(work)
    per_window = env["seq_len"] + 1
    chunk_windows = max(1, env["cap"] // env["window_bytes"] // 8)
    path = Path(env["tokens_path"])
    bounds = np.linspace(0, env["documents"], 17, dtype=np.int64)  # 16 inputs, in order
    jobs = [(str(path), env["tokens"].dtype.str, str(path.with_suffix(".off")), int(a), int(b))
            for a, b in itertools.pairwise(bounds) if b > a]  # fmt: skip
    litdata.optimize(fn=_litdata_documents, inputs=jobs, output_dir=str(work),
                     chunk_size=per_window * chunk_windows, item_loader=TokensLoader(),
                     num_workers=1, mode="overwrite")  # fmt: skip
    remote_peers._upload(work, bucket, "litdata-lm")
    return {"remote": f"s3://{bucket}/litdata-lm", "chunks": len(list(work.glob("*.bin")))}


def litdata_open(env: dict[str, Any], setup: dict[str, Any], cache: Path) -> Any:
    import litdata
    from litdata import StreamingDataLoader, TokensLoader

    dataset = litdata.StreamingDataset(
        setup["remote"], cache_dir=str(cache), item_loader=TokensLoader(env["seq_len"] + 1),
        shuffle=True, seed=0, max_cache_size=env["cap"],
        storage_options={"endpoint_url": os.environ["AWS_ENDPOINT_URL"]},
    )  # fmt: skip
    return StreamingDataLoader(dataset, batch_size=env["batch"], num_workers=0)


def litdata_batches(loader: Any) -> Batches:
    yield from loader


def litdata_resume(env: dict[str, Any], setup: dict[str, Any], k: int) -> str:
    """As :func:`mosaic_resume`, with litdata's ``StreamingDataLoader.state_dict``. Its state
    names the cache folder (resuming in another one is refused: "The provided `input_dir` path
    state doesn't match"), so the fresh reader gets the same folder, emptied."""
    cache = env["work"] / f"lit-resume-{time.time_ns()}"
    first = litdata_open(env, setup, cache)
    seen, state = [], None
    for i, found in enumerate(first):
        seen.append(found.clone())
        if i == k - 1:  # k batches handed out: save here
            state = first.state_dict()
        if i == k + 1:
            break
    del first
    for _ in range(50):  # its download thread may still be writing a chunk it had started
        try:
            shutil.rmtree(cache)
            break
        except OSError:
            time.sleep(0.1)
    second = litdata_open(env, setup, cache)
    second.load_state_dict(state)
    again = [found.clone() for _, found in zip(range(2), second)]
    return verdict(seen[k:], again)


def verdict(expected: list[torch.Tensor], got: list[torch.Tensor]) -> str:
    """``exact`` when the resumed batches are the uninterrupted run's, else what differed."""
    if len(got) != len(expected):
        return f"not exact: {len(got)} batches after resuming, {len(expected)} expected"
    same = [bool(torch.equal(a, b)) for a, b in zip(expected, got)]
    if all(same):
        return "exact"
    rows = [
        sum(any(torch.equal(r, s) for s in b) for r in a) / len(a) for a, b in zip(expected, got)
    ]
    return f"not exact: {np.mean(rows):.0%} of the next batches' windows came back"


# --- a bare client: one GET a window ----------------------------------------------------
# Not a loader: obstore's ``get_ranges`` over the windows of the stored order in a random
# permutation, a batch's windows in one call (its GETs in parallel, none coalesced), no cache
# and no resume. What any exact shuffle of windows spends on its GETs alone, at one a window:
# the floor under lading@stored's client CPU.


def bare_setup(env: dict[str, Any], s3: Any, bucket: str) -> dict[str, Any]:
    key = Path(env["tokens_path"]).relative_to(env["local"]).as_posix()
    return {"url": env["url"], "key": key, "windows": windows_of(env["tokens"], env["seq_len"])}


def bare_open(env: dict[str, Any], setup: dict[str, Any], cache: Path) -> Any:
    from obstore.store import from_url

    store = from_url(setup["url"], client_options={"allow_http": True})
    order = np.random.default_rng(0).permutation(setup["windows"])
    return store, setup["key"], order, env


def bare_batches(loader: Any) -> Batches:
    import obstore

    store, key, order, env = loader
    dtype, seq = env["tokens"].dtype, env["seq_len"]
    for i in range(0, len(order), env["batch"]):
        starts = [int(w) * seq * dtype.itemsize for w in order[i : i + env["batch"]]]
        lengths = [(seq + 1) * dtype.itemsize] * len(starts)
        raw = obstore.get_ranges(store, key, starts=starts, lengths=lengths, coalesce=0)
        rows = np.stack([np.frombuffer(memoryview(r), dtype=dtype) for r in raw]).astype(np.int64)
        yield torch.from_numpy(rows)


def bare_resume(env: dict[str, Any], setup: dict[str, Any], k: int) -> str:
    return "none (not a loader)"


PEERS = {
    "mosaic": (mosaic_setup, mosaic_open, mosaic_batches, mosaic_resume),
    "litdata": (litdata_setup, litdata_open, litdata_batches, litdata_resume),
    "obstore-windows": (bare_setup, bare_open, bare_batches, bare_resume),
}
