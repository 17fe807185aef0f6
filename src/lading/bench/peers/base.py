"""What the peers share: a store over a dataset that has rows but no lookup by id.

None of the peers (HF ``datasets``, Mosaic ``streaming``, ``litdata``) finds a document by its
id: each numbers its samples ``0 .. n - 1``. A user who needs "the text of doc 7123" builds the
map themselves, in every process that looks documents up: every id read once from the dataset
(through the peer's own read path), then an ``id -> row`` dict beside the list of ids. At
100,000 passages that is 11.5 MiB of private memory per rank for ``hf`` (the id strings, the
dict's table, the list; 21 MiB for ``litdata``, whose reader keeps buffers of its own); at 8.8M
ids about a gigabyte per rank, paid again by every DataLoader worker started with ``spawn``.
The time is one read of every id: at once from an Arrow column (``hf``), one sample at a time,
text decoded too, for ``mds`` and ``litdata`` (0.6 s for 100,000 passages with ``litdata``).
:class:`IdMapStore` is that route, once, for every peer: subclasses say how to open the
dataset, count and read its ids, and read texts at rows.

Peers are optional, untyped imports (the ``peers`` extra): :func:`peer_module` imports one as
``Any``; :func:`publish` builds a peer's directory aside and renames it into place, so a build
that dies leaves nothing a later run would take for finished.
"""

from __future__ import annotations

import importlib
import os
import shutil
from abc import abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from lading.stores.base import DocStore, IdLike


def peer_module(name: str) -> Any:
    """An optional peer's module (untyped; absent from CI's environment)."""
    return importlib.import_module(name)


def publish(dest: Path, build: Callable[[Path], None], done: str) -> Path:
    """``dest``, built by ``build(tmp)`` into ``DEST.tmp-<pid>`` and renamed into place.

    Kept as it is when ``dest/done`` exists already (a finished build of the same corpus: the
    bench's work directory is keyed by its collection).
    """
    if (dest / done).is_file():
        return dest
    tmp = dest.with_name(f"{dest.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        build(tmp)
        shutil.rmtree(dest, ignore_errors=True)  # an unfinished folder of an older run
        os.replace(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def read_tsv(corpus: Path) -> Any:
    """``(id, text)`` of every line of an ``id<TAB>text`` corpus, in order (a generator)."""
    with open(corpus, encoding="utf-8") as f:
        for line in f:
            doc_id, text = line.rstrip("\n").split("\t", 1)
            yield doc_id, text


class IdMapStore(DocStore):
    """A peer's dataset as a document store: rows found through an id map in this process.

    Subclasses set ``self.data`` in :meth:`_open` and count its rows in :meth:`_count`;
    rows are read one sample at a time unless the subclass has a column route
    (:meth:`_read_ids`, :meth:`_read_texts`). Row codes (:meth:`find_rows`,
    :meth:`texts_at`) are the dataset's own rows, so the map is built once, not twice.
    Pickled (into a DataLoader worker started with ``spawn``) as its path: the worker opens
    the dataset and builds its own map, as a user's worker would.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.data: Any = None
        self._open()
        self._ids: list[str] = self._read_ids(self._count())
        self._rows: dict[str, int] = {doc_id: row for row, doc_id in enumerate(self._ids)}

    @abstractmethod
    def _open(self) -> None:
        """Open the dataset at ``self.path`` as ``self.data``, the peer's recommended way."""

    @abstractmethod
    def _count(self) -> int:
        """Rows in the whole dataset (not this rank's share of an epoch)."""

    def _read_ids(self, count: int) -> list[str]:
        """The id of every row, in row order: what a user reads to build the map.

        By default one sample at a time (``data[row]["id"]``), the only random access the
        streaming peers (MDS, litdata) offer; a peer with a column read overrides it.
        """
        data = self.data
        return [data[row]["id"] for row in range(count)]

    def _read_texts(self, rows: list[int]) -> list[str]:
        """Texts at ``rows``, in that order (duplicates allowed), one sample at a time."""
        data = self.data
        return [data[row]["text"] for row in rows]

    def get_many(self, ids: Sequence[IdLike]) -> list[str]:
        try:
            rows = [self._rows[doc_id if type(doc_id) is str else str(doc_id)] for doc_id in ids]
        except KeyError as e:
            raise self.missing(e.args[0]) from None
        return self._read_texts(rows)

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, doc_id: object) -> bool:
        return str(doc_id) in self._rows

    def ids(self) -> list[str]:
        return list(self._ids)

    def find_rows(self, ids: Sequence[IdLike]) -> npt.NDArray[np.int64]:
        rows = self._rows
        return np.fromiter(
            (rows.get(i if type(i) is str else str(i), -1) for i in ids), np.int64, len(ids)
        )

    def ids_at(self, rows: npt.NDArray[np.int64]) -> list[str]:
        ids = self._ids
        return [ids[r] for r in np.asarray(rows, dtype=np.int64).tolist()]

    def texts_at(self, rows: npt.NDArray[np.int64]) -> list[str]:
        return self._read_texts(np.asarray(rows, dtype=np.int64).tolist())

    def scan(self) -> int:
        """Texts read in one pass over every row, in order, 1,024 rows a call."""
        done = 0
        for lo in range(0, len(self), 1024):
            done += len(self._read_texts(list(range(lo, min(lo + 1024, len(self))))))
        return done

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.path)!r})"

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"])  # type: ignore[misc]
