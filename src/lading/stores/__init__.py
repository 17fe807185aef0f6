"""Document stores: one protocol (:class:`DocStore`), four ways of keeping a corpus.

``PackedStore`` (ours, memory-mapped), ``InMemoryStore`` (a dict), ``OffsetStore`` (byte
offsets into the source file) and ``IrDatasetsStore`` (ir_datasets' docstore).
"""

from __future__ import annotations

import os

from lading.stores.base import DocStore
from lading.stores.build import build_store
from lading.stores.irds import IrDatasetsStore
from lading.stores.memory import InMemoryStore
from lading.stores.offsets import OffsetStore
from lading.stores.packed import OnStale, PackedStore


def open_store(path: str | os.PathLike[str], *, on_stale: OnStale = "warn") -> PackedStore:
    """Open a store built by :func:`build_store`: cheap, memory-mapped, checked.

    Raises:
        StoreFormatError: the directory is not a complete store of a version this lading reads.
    """
    return PackedStore(path, on_stale=on_stale)


__all__ = [
    "DocStore",
    "InMemoryStore",
    "IrDatasetsStore",
    "OffsetStore",
    "PackedStore",
    "build_store",
    "open_store",
]
