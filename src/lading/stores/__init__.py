"""Document stores: one protocol (:class:`DocStore`), four ways of keeping a corpus.

``PackedStore`` (ours, memory-mapped), ``InMemoryStore`` (a dict), ``OffsetStore`` (byte
offsets into the source file) and ``IrDatasetsStore`` (ir_datasets' docstore).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lading.disk import verify_checksums
from lading.disk.stage import stage
from lading.errors import StoreFormatError
from lading.stores.base import DocStore
from lading.stores.build import build_store, merge_store
from lading.stores.irds import IrDatasetsStore
from lading.stores.memory import InMemoryStore
from lading.stores.offsets import OffsetStore
from lading.stores.packed import OnStale, PackedStore


def verify_store(path: str | os.PathLike[str]) -> list[str]:
    """Every check an open makes (a packed store or an offsets index: manifest, sizes, spot
    checksums, row counts, offsets, index), then every byte of every file of that snapshot
    against its CRC32; the problems found (empty: intact)."""
    from lading.disk.meta import declared_format

    directory = Path(path)
    opened: PackedStore | OffsetStore
    try:
        if declared_format(directory) == "lading.offsets":
            opened = OffsetStore(directory)
            meta = opened._open()["meta"]
        else:
            opened = PackedStore(directory, on_stale="ignore")
            meta = opened.meta
    except (StoreFormatError, ValueError, OSError) as e:
        return [str(e)]
    return verify_checksums(directory, meta["format"], meta)


def open_store(
    path: str | os.PathLike[str],
    *,
    on_stale: OnStale = "warn",
    stage_to: str | os.PathLike[str] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    snapshot: str | None = None,
) -> PackedStore:
    """Open a store built by :func:`build_store`: cheap, memory-mapped, checked.

    Args:
        path: the store directory, or with ``stage_to`` also an fsspec URL (``s3://...``).
        on_stale: what to do when the store's source file changed since the build.
        stage_to: first copy the store to ``stage_to/<name>`` on this node (local rank 0
            copies once, checked; later runs reuse the copy; see :func:`lading.disk.stage.stage`)
            and open that copy.
        storage_options: fsspec options for a URL ``path`` (e.g. ``endpoint_url``).
        snapshot: open this snapshot (one still kept: see :mod:`lading.disk.snapshot`), not
            the current one; the store object reads it however often ``path`` is rebuilt.

    Raises:
        StoreFormatError: the directory is not a complete store of a version this lading reads
            (a :class:`~lading.disk.SnapshotGoneError` for a ``snapshot`` no longer kept).
    """
    if stage_to is not None:
        name = os.fspath(path).rstrip("/").rsplit("/", 1)[-1]
        path = stage(path, Path(stage_to) / name, storage_options=storage_options)
    return PackedStore(path, on_stale=on_stale, snapshot=snapshot)


__all__ = [
    "DocStore",
    "InMemoryStore",
    "IrDatasetsStore",
    "OffsetStore",
    "PackedStore",
    "build_store",
    "merge_store",
    "open_store",
    "verify_store",
]
