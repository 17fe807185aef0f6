"""Shards of a token corpus built straight into object storage, and their merge in the bucket.

``TokenCorpus.build_shard(src, "s3://b/wiki", (i, n), tok)``: the bucket is checked writable
first (one line naming bucket, endpoint and fix, before any tokenizing), then the shard is
tokenized into a scratch folder beside the node cache (the worker holds this one shard on local
disk) and uploaded as soon as it is whole: ``build-<id>/build.json``, the shard's files, then
its ``shard.json`` last, so a shard is in the bucket whole or not at all (a killed worker
leaves objects no merge takes; a rerun skips a shard whose ``shard.json`` is there). The scratch
folder is removed either way.

``TokenCorpus.merge("s3://b/wiki")`` lists the bucket, reads every ``build.json`` and
``shard.json`` and checks the shards exactly as a local merge does (:mod:`lading.lm.merge`,
on a mirror of those small files and of the other objects' sizes), then PUTs the snapshot's
``manifest.json`` and ``meta.json`` last: a reader opening meanwhile sees the previous snapshot
or the new one, never a mixture. A merge of a build already committed commits nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from lading.disk.commit import units
from lading.disk.meta import META_FILE
from lading.disk.snapshot import BUILD_PREFIX, MANIFEST, new_snapshot_id
from lading.errors import StoreFormatError
from lading.lm.corpus import TokenCorpus
from lading.lm.merge import check_same_tokens, manifest
from lading.lm.shards import COMMAND, CorpusShardReport, build_corpus_shard, read_corpus_shard
from lading.remote.clients import check_reachable, open_client
from lading.remote.objects import PermanentError
from lading.remote.settings import RemoteSettings
from lading.stores.building.shardset import (
    BUILD_FILE,
    SHARD_FILE,
    check_same_inputs,
    check_same_options,
    check_shard,
    complete_shards,
    pending_build,
)
from lading.stores.building.upload import check_writable, put_files
from lading.stores.layout import shard_name


def upload_shard(
    source: Any,
    url: str,
    shard: tuple[int, int],
    tokenizer: Any,
    cache: str | os.PathLike[str] | None,
    storage_options: Any,
    **options: Any,
) -> CorpusShardReport:
    """Shard ``(i, n)`` of the corpus at ``url`` (see the module doc)."""
    from lading.lm.shards import corpus_build_id

    check_reachable(url, "TokenCorpus.build_shard")
    i, n = check_shard(shard)
    settings = RemoteSettings.of(cache, None, storage_options)
    check_writable(url, settings)  # before the source is read: a shard may take hours
    bid = options.pop("build_id", None) or corpus_build_id(source, n, **options)
    rel = f"{bid}/{shard_name(i, n)}"
    fetcher = settings.fetcher(url)
    try:
        if f"{rel}/{SHARD_FILE}" in fetcher.list(f"{rel}/"):  # a rerun: whole already
            record = json.loads(fetcher.get_object(f"{rel}/{SHARD_FILE}"))
            return CorpusShardReport(Path(url), bid, i, n, int(record["documents"]), True)
    finally:
        fetcher.close()
    settings.cache.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="shard-", dir=settings.cache))
    try:
        local = scratch / "corpus"
        report = build_corpus_shard(source, local, (i, n), tokenizer, build_id=bid, **options)
        client = open_client(url, settings.backend, settings.options, settings.timeout)
        where = local / rel
        first = [local / bid / BUILD_FILE]
        first += [p for p in sorted(where.iterdir()) if p.name != SHARD_FILE]
        sized: list[tuple[str, bytes | Path, int]] = [
            (p.relative_to(local).as_posix(), p, p.stat().st_size) for p in first
        ]
        put_files(client, sized, timeout=settings.timeout)
        last = where / SHARD_FILE
        put_files(client, [(f"{rel}/{SHARD_FILE}", last, last.stat().st_size)])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return CorpusShardReport(Path(url), bid, i, n, report.documents, False)


def merge_remote(
    url: str,
    build_id: str | None,
    cache: str | os.PathLike[str] | None,
    cache_bytes: int | str | None,
    storage_options: Any,
) -> TokenCorpus:
    """Commit the shards at ``url`` as its new snapshot, in the bucket; open it there."""
    check_reachable(url, "TokenCorpus.merge")
    settings = RemoteSettings.of(cache, cache_bytes, storage_options)
    settings.cache.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="merge-", dir=settings.cache))
    fetcher = settings.fetcher(url)
    try:
        listing = fetcher.list()
        for key, info in listing.items():
            if key.startswith(BUILD_PREFIX) and key.count("/") <= 2:
                _mirror(fetcher, scratch, key, info.size)
        previous = _current(fetcher) if META_FILE in listing else None
        try:
            bid = build_id or pending_build(scratch, previous, read_corpus_shard, COMMAND)
            if previous is not None and previous.get("build_id") == bid:
                snapshot = str(previous["snapshot"])
            else:
                shards = complete_shards(scratch, bid, read_corpus_shard, COMMAND)
                check_same_inputs(scratch, shards)
                recipe = check_same_options(scratch, bid, shards)
                check_same_tokens(scratch, shards)
                snapshot = new_snapshot_id()
                meta = {**manifest(bid, shards, recipe["options"], snapshot), "snapshot": snapshot}
                _commit(url, settings, meta, previous)
        except StoreFormatError as e:  # named as the bucket, not the mirror
            raise StoreFormatError(str(e).replace(str(scratch), url)) from None
    finally:
        fetcher.close()
        shutil.rmtree(scratch, ignore_errors=True)
    return TokenCorpus.open(
        url, cache=cache, cache_bytes=cache_bytes, storage_options=storage_options,
        snapshot=snapshot,
    )  # fmt: skip


def _mirror(fetcher: Any, root: Path, key: str, size: int) -> None:
    """``key`` below ``root``: ``build.json`` and ``shard.json`` as they are, any other object
    as a sparse stand-in of its size (what the checks read of it)."""
    path = root / key
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.name in (BUILD_FILE, SHARD_FILE):
        path.write_bytes(fetcher.get_object(key))
    else:
        with open(path, "wb") as f:
            f.truncate(size)


def _current(fetcher: Any) -> dict[str, Any] | None:
    try:
        meta = json.loads(fetcher.get_object(META_FILE))
    except (PermanentError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def _commit(
    url: str, settings: RemoteSettings, meta: dict[str, Any], previous: dict[str, Any] | None
) -> None:
    """PUT the snapshot's manifest, then ``meta.json`` (the commit); the snapshot replaced
    enters the history (its files are kept within the grace, as a local commit keeps them)."""
    now = time.time()
    history = []
    if previous is not None and previous.get("snapshot"):
        history.append(
            {"snapshot": previous["snapshot"], "replaced_at": now, "units": sorted(units(previous))}
        )
    meta.update(history=history, committed_at=now)
    raw = json.dumps(meta, indent=2, sort_keys=True).encode("utf-8")
    client = open_client(url, settings.backend, settings.options, settings.timeout)
    put_files(client, [(f"{meta['snapshot']}/{MANIFEST}", raw, len(raw))], timeout=settings.timeout)
    put_files(client, [(META_FILE, raw, len(raw))], timeout=settings.timeout)
