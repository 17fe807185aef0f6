"""Shards of a token corpus built straight into object storage, and their merge in the bucket.

``TokenCorpus.build_shard(src, "s3://b/wiki", (i, n), tok)`` and ``TokenCorpus.merge(url)``,
on the rules every kind shares (:mod:`lading.stores.building.remote_shards`): the bucket checked
writable and the build claimed as in a folder (from the bucket's ``build.json``) before any
tokenizing, the shard tokenized beside the node cache and uploaded once whole (its
``shard.json`` last; a rerun skips it), the merge checked as a local merge
(:mod:`lading.lm.merge`) on a mirror of the small files and committed by PUTs, ``meta.json``
last, swapped only over the manifest the merge mirrored (two merges at once: one commits):
a reader opening meanwhile sees the last snapshot, never a mixture. A merged corpus's
manifest names the shards' files in place, so the merge uploads its manifest only.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from lading.disk.snapshot import MANIFEST, new_snapshot_id
from lading.errors import SourceError, StoreFormatError
from lading.lm.corpus_format import FORMAT_NAME
from lading.lm.merge import check_same_tokens, manifest
from lading.lm.shards import (
    COMMAND,
    CorpusShard,
    CorpusShardReport,
    DocumentOptions,
    build_corpus_shard,
    corpus_build_id,
    read_corpus_shard,
)
from lading.remote.clients import check_reachable
from lading.remote.settings import RemoteSettings
from lading.stores.building.bucket_kind import check_bucket_kind
from lading.stores.building.pending import BuildToCommit, builds_record
from lading.stores.building.remote_shards import (
    commit_remote,
    merge_in_bucket,
    named_as,
    shard_into_bucket,
)
from lading.stores.building.shard_work import check_shard
from lading.stores.building.upload import check_writable


def upload_shard(
    source: Any,
    url: str,
    shard: tuple[int, int],
    tokenizer: Any,
    cache: str | os.PathLike[str] | None,
    storage_options: Any,
    documents: DocumentOptions,
    *,
    build_id: str | None = None,
    progress: bool | None = None,
) -> CorpusShardReport:
    """Shard ``(i, n)`` of the corpus at ``url``, its documents cut and ended as ``documents``
    says (see the module doc)."""
    check_reachable(url, "TokenCorpus.build_shard")
    i, n = check_shard(shard)
    settings = RemoteSettings.of(cache, None, storage_options)
    check_writable(url, settings, "token corpus")  # before the source is read (hours)
    check_bucket_kind(url, settings, FORMAT_NAME)
    bid = build_id or corpus_build_id(source, n, tokenizer, documents)

    def write(local: Path) -> CorpusShardReport:
        return build_corpus_shard(
            source, local, (i, n), tokenizer, documents, build_id=bid, progress=progress
        )

    made: CorpusShardReport = shard_into_bucket(url, (i, n), write, settings, bid, "corpus")
    return made


def merge_remote(
    url: str,
    build_id: str | None,
    cache: str | os.PathLike[str] | None,
    cache_bytes: int | str | None,
    storage_options: Any,
) -> str:
    """Commit the shards at ``url`` as its new snapshot, in the bucket; its id."""
    check_reachable(url, "TokenCorpus.merge")
    settings = RemoteSettings.of(cache, cache_bytes, storage_options)

    def commit(
        root: Path, previous: dict[str, Any] | None, merge: BuildToCommit[CorpusShard]
    ) -> str:
        try:
            return commit_in_bucket(url, settings, root, previous, merge)
        except (StoreFormatError, SourceError) as e:  # named as the bucket, not the mirror
            raise named_as(e, root, url) from None

    read = read_corpus_shard
    return merge_in_bucket(url, settings, FORMAT_NAME, build_id, read, commit, build=COMMAND)


def commit_in_bucket(
    url: str,
    settings: RemoteSettings,
    root: Path,
    previous: dict[str, Any] | None,
    merge: BuildToCommit[CorpusShard],
) -> str:
    """``merge``'s shards (read from the bucket's mirror ``root``), in order, checked to be
    tokenized alike and committed at ``url`` over its manifest ``previous``, ``meta.json``
    last and only where ``previous`` is still current
    (:func:`~lading.stores.building.remote_shards.commit_remote`); its id (another merge's of
    the same build where that one committed first).

    Raises:
        StoreFormatError: another merge committed another build meanwhile (this one committed
            nothing), or the shards do not fit.
    """
    check_same_tokens(root, merge.shards)
    started = time.perf_counter()
    snapshot = new_snapshot_id()
    options = merge.recipe["options"]
    meta = {**manifest(merge.bid, merge.shards, options, snapshot), "snapshot": snapshot}
    meta["builds"] = builds_record(root, previous, merge.bid, merge.passed)
    meta["seconds"] = round(time.perf_counter() - started, 3)  # as a local merge records
    raw = json.dumps(meta, indent=2, sort_keys=True).encode("utf-8")  # (stamped at the commit)
    local = root / snapshot / MANIFEST
    local.parent.mkdir()
    local.write_bytes(raw)
    return commit_remote(url, settings, [(f"{snapshot}/{MANIFEST}", local)], raw, previous)
