"""The read room: document stores, one protocol (:class:`DocStore`), four ways of keeping
a corpus; building them is the build room's (:mod:`lading.stores.building`).

``PackedStore`` (ours, memory-mapped), ``InMemoryStore`` (a dict), ``OffsetStore`` (byte
offsets into the source file) and ``IrDatasetsStore`` (ir_datasets' docstore).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lading.disk import verify_bookkeeping, verify_checksums
from lading.disk.stage import stage
from lading.errors import (
    OtherFormatError,
    RemoteChangedError,
    RemoteError,
    StoreFormatError,
    StoreNotFoundError,
)
from lading.remote.objects import is_remote
from lading.stores.base import DocStore
from lading.stores.building.build import build_shard as build_shard_local
from lading.stores.building.build import build_store as build_local
from lading.stores.building.build import merge_store as merge_local
from lading.stores.irds import IrDatasetsStore
from lading.stores.memory import InMemoryStore
from lading.stores.offsets import OffsetStore
from lading.stores.packed import OnStale, PackedStore

if TYPE_CHECKING:  # not imported with lading: it brings asyncio and sqlite3
    from lading.stores.remote.store import RemoteStore


@functools.wraps(build_local)
def build_store(source: Any, dest: str | os.PathLike[str], *args: Any, **kwargs: Any) -> Any:
    # a URL dest (s3://, gs://, ...): build here, upload, manifest last (stores/building/upload.py)
    if is_remote(dest):
        from lading.stores.building.upload import build_remote

        return build_remote(build_local, source, os.fspath(dest), *args, **kwargs)
    return build_local(source, dest, *args, **kwargs)


@functools.wraps(build_shard_local)
def build_shard(source: Any, dest: str | os.PathLike[str], *args: Any, **kwargs: Any) -> Any:
    return build_shard_local(source, dest, *args, **kwargs)  # a URL: uploaded once whole


@functools.wraps(merge_local)
def merge_store(dest: str | os.PathLike[str], **kwargs: Any) -> Any:
    merged = merge_local(dest, **kwargs)  # a URL: committed in the bucket, opened there
    return merged


def verify_store(path: str | os.PathLike[str]) -> list[str]:
    """Every check an open makes (a packed store or an offsets index: manifest, sizes, spot
    checksums, row counts, offsets, index), then every byte of every file of that snapshot
    against its CRC32, and (a local directory) the records beside it against its manifest
    (:func:`lading.disk.verify_bookkeeping`: ``snap-<id>/manifest.json``, ``shard.json``,
    ``build.json``); the problems found (empty: intact).

    Raises:
        RemoteError: a URL whose store could not be reached to check (no bucket, access
            denied, no answer); an object gone since the manifest was written is a problem.
        OtherFormatError: a manifest of another lading format (a token corpus: check it with
            :func:`lading.lm.verify_corpus`); that is no damage.
    """
    from lading.disk.meta import declared_format

    if is_remote(path):  # open (stages the index, checked), then read the payload
        from lading.stores.remote.store import open_remote

        try:
            remote = open_remote(os.fspath(path))
        except (StoreFormatError, OSError) as e:
            if isinstance(e, StoreNotFoundError | OtherFormatError) or (
                isinstance(e, RemoteError) and not isinstance(e, RemoteChangedError)
            ):
                raise  # nothing there to check (no store, no bucket, denied, no answer)
            return [str(e)]
        try:
            return remote.verify()
        finally:
            remote.close()
    directory = Path(path)
    opened: PackedStore | OffsetStore
    try:
        if declared_format(directory) == "lading.offsets":
            opened = OffsetStore(directory)
            meta = opened._open()["meta"]
        else:
            opened = PackedStore(directory, on_stale="ignore")
            meta = opened.meta
    except OtherFormatError:
        raise
    except (StoreFormatError, ValueError, OSError) as e:
        return [str(e)]
    problems = verify_checksums(directory, meta["format"], meta)
    return problems + verify_bookkeeping(directory, meta, meta["format"])


def open_store(
    path: str | os.PathLike[str],
    *,
    on_stale: OnStale = "warn",
    stage_to: str | os.PathLike[str] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    snapshot: str | None = None,
    cache: str | os.PathLike[str] | None = None,
    cache_bytes: int | str | None = None,
    index_bytes: int | str | None = None,
    timeout: float | None = None,
) -> PackedStore | RemoteStore:
    """Open a store built by :func:`build_store`: cheap, memory-mapped, checked.

    Args:
        path: the store directory, or an object-store URL (``s3://bucket/prefix/name``,
            ``gs://...``): then the index is staged to this node and documents are read by
            ranged GETs through the node cache (:class:`~lading.stores.remote.RemoteStore`).
        on_stale: what to do when the store's source file changed since the build.
        stage_to: first copy the whole store to ``stage_to/<name>`` on this node (local rank 0
            copies once, checked; later runs reuse the copy; see :func:`lading.disk.stage.stage`)
            and open that copy.
        storage_options: options of the object store's client for a URL ``path`` (e.g.
            ``endpoint_url``; credentials come from the environment).
        snapshot: open this snapshot (one still kept: see :mod:`lading.disk.snapshot`), not
            the current one; the store object reads it however often ``path`` is rebuilt.
            A local store only (a remote store pins the snapshot it opened).
        cache: the node cache directory of a URL ``path`` (default: ``remote/`` in
            ``$LADING_CACHE`` or ``~/.cache/lading``), shared by every process of the node.
        cache_bytes: the node cache's hard cap (``8G``, ``500M``, bytes; default
            ``$LADING_REMOTE_CACHE_BYTES``, else 8 GiB or half the free space): the size of
            its payload file.
        index_bytes: the node cache folder's bytes besides the payload (staged indexes of
            the snapshots opened, the ledger; the oldest copies go to keep within it);
            default sized from the store (:func:`lading.remote.stage.index_budget`).
        timeout: seconds each attempt of a remote call may take (open, list, stage, read;
            3 retries), default ``$LADING_REMOTE_TIMEOUT`` or 20; past them the error names
            the endpoint, the object and this setting.

    Raises:
        StoreFormatError: the directory is not a complete store of a version this lading reads
            (a :class:`~lading.disk.SnapshotGoneError` for a ``snapshot`` no longer kept).
    """
    if stage_to is None and is_remote(path):  # (file:// stages: lading.disk.stage)
        if snapshot is not None:
            raise ValueError(
                f"snapshot= opens a kept snapshot of a local store; {os.fspath(path)} is remote "
                "and pins the snapshot it opens (store.snapshot). Stage it first (stage_to=) "
                "to open an older one"
            )
        from lading.stores.remote.store import open_remote

        more: dict[str, Any] = {} if timeout is None else {"timeout": float(timeout)}
        if index_bytes is not None:
            more["index_bytes"] = index_bytes
        return open_remote(
            os.fspath(path), cache=cache, cache_bytes=cache_bytes, options=storage_options, **more
        )
    if stage_to is not None:
        name = os.fspath(path).rstrip("/").rsplit("/", 1)[-1]
        path = stage(
            path, Path(stage_to) / name, storage_options=storage_options, remote_timeout=timeout
        )
    return PackedStore(path, on_stale=on_stale, snapshot=snapshot)


__all__ = [
    "DocStore",
    "InMemoryStore",
    "IrDatasetsStore",
    "OffsetStore",
    "PackedStore",
    "build_shard",
    "build_store",
    "merge_store",
    "open_store",
    "verify_store",
]
