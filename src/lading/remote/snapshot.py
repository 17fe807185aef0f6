"""Opening one snapshot of something in a bucket: its manifest, its small files, its cache.

A store and a token corpus open the same way, differing only in their manifest's format and in
which files are staged: :func:`open_snapshot` reads the manifest (the current one, or a pinned
snapshot's from the node's staged copy or the bucket's ``snap-<id>/manifest.json``), stages the
files the reader names once per node and snapshot (:mod:`lading.remote.stage`), pins the others
to their ETags, and gives the node cache's view of them (:mod:`lading.remote.cache`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from lading.disk.meta import META_FILE
from lading.disk.snapshot import (
    BUILD_MARK,
    BUILD_PREFIX,
    MANIFEST,
    SNAP_PREFIX,
    grace_seconds,
    merge_command,
    unmerged,
)
from lading.errors import RemoteNotFoundError, StoreFormatError, StoreNotFoundError
from lading.remote.cache import NodeCache
from lading.remote.fetch import Fetcher
from lading.remote.objects import PermanentError
from lading.remote.settings import RemoteSettings
from lading.remote.stage import stage_dir, stage_index, staged_etags

Parse = Callable[[bytes, str], dict[str, Any]]
Files = Callable[[dict[str, Any]], tuple[list[str], list[str]]]  # meta -> (staged, pinned)
Missing = Callable[[str, str, Exception], Exception]  # url, endpoint, error -> what to raise


class Snapshot(NamedTuple):
    """An opened snapshot: its manifest, the node's staged copy, and the cache of the rest."""

    meta: dict[str, Any]
    path: Path
    cache: NodeCache

    @property
    def fetcher(self) -> Fetcher:
        return self.cache.fetcher


def open_snapshot(
    url: str,
    settings: RemoteSettings,
    parse: Parse,
    files: Files,
    missing: Missing,
    snapshot: str | None = None,
) -> Snapshot:
    """Open ``snapshot`` (default: the current one) of what is at ``url``.

    Args:
        parse: the manifest's bytes and where they came from -> the checked manifest (with
            its ``snapshot``).
        files: which of its files are staged to the node, which are read by ranged GETs.
        missing: the error of a manifest that is not there (naming bucket, endpoint, fix).

    Raises:
        StoreFormatError: another format, a damaged manifest or staged file, a snapshot gone.
        RemoteReadError: a call failed for good.
    """
    fetcher = settings.fetcher(url)
    try:
        raw = manifest_bytes(fetcher, url, settings.cache, snapshot, parse)
    except PermanentError as e:
        error = missing(url, getattr(fetcher.client, "endpoint", ""), e)
        if isinstance(error, StoreNotFoundError) and snapshot is None:
            waiting = _waiting_builds(fetcher)
            if waiting:  # shards of a parallel build wait for their merge: that is the fix
                raise unmerged(url, waiting, "store or token corpus") from None
        raise error from None
    meta = parse(raw, f"{url}/{META_FILE}")
    staged, pinned = files(meta)
    budget = settings.index_budget(sum(int(meta["files"][n]["size"]) for n in staged))
    path = stage_index(fetcher, url, raw, meta, settings.cache, staged, pinned, budget)
    cache = settings.node_cache(fetcher, f"{url}@{meta['snapshot']}", staged_etags(path))
    cache.index_bytes = budget
    return Snapshot(meta, path, cache)


def manifest_bytes(
    fetcher: Fetcher, url: str, cache: Path, snapshot: str | None, parse: Parse
) -> bytes:
    """The manifest of ``snapshot`` (the node's staged copy when there is one, else the one
    the bucket keeps in ``snap-<id>/``), or the current one."""
    if snapshot is not None:
        staged = stage_dir(cache, url, snapshot) / META_FILE
        if staged.is_file():
            return staged.read_bytes()
    raw = fetcher.get_object(META_FILE)
    if snapshot is None or parse(raw, url)["snapshot"] == snapshot:
        return raw
    if snapshot.startswith(SNAP_PREFIX) and "/" not in snapshot:
        try:
            return fetcher.get_object(f"{snapshot}/{MANIFEST}")
        except RemoteNotFoundError:  # (the store is there: its current manifest was read)
            raise StoreFormatError(
                f"{url}: snapshot {snapshot} was replaced and removed since (past its grace, "
                f"{grace_seconds():.0f} s) and this node has no staged copy of it; open the "
                "store again to read its current snapshot"
            ) from None
    raise StoreFormatError(
        f"{url}: snapshot {snapshot} is no longer the current one and this node has no staged "
        "copy of it; open it again to read its current snapshot"
    )


def _waiting_builds(fetcher: Fetcher, most: int = 8) -> dict[str, str]:
    """The parallel builds whose shards wait in the bucket (a ``build-<id>/build.json``
    there), at most ``most`` of them, each with the command that merges it: an open that
    found no manifest names them, as a folder's does (it said "no store ... build a store
    there", to a user whose workers had built every shard)."""
    found = sorted(
        key.split("/", 1)[0]
        for key in fetcher.list()  # (an error path: one listing)
        if key.startswith(BUILD_PREFIX) and key.count("/") == 1 and key.endswith(f"/{BUILD_MARK}")
    )
    waiting = {}
    for bid in found[:most]:
        try:
            record: bytes | None = fetcher.get_object(f"{bid}/{BUILD_MARK}")
        except PermanentError:  # (gone since the listing: its merge reads and says)
            record = None
        waiting[bid] = merge_command(record)
    return waiting
