"""PackedStore: a memory-mapped store, opened for free in every rank and DataLoader worker.

Nothing of the corpus is copied into a process: texts, ids, fields and tokens stay in files
mapped read-only, so their pages sit once in the OS page cache and are shared by every process
on the machine. A process pays only for the rows it decodes and a few small objects. The maps
are reopened after a fork (the object remembers the pid that opened them) and a pickled store
is just its path, so ``spawn`` workers reopen it too.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from lading.disk import RaggedColumn, read_meta
from lading.errors import StaleStoreWarning, StoreFormatError
from lading.sources import Record, fingerprint_changed
from lading.stores.base import DocStore, IdLike, id_list, is_id
from lading.stores.bulk import bytes_at, contiguous, texts_range
from lading.stores.index import IdIndex
from lading.stores.layout import FORMAT_NAME

OnStale = Literal["warn", "raise", "ignore"]
ON_STALE_MODES: tuple[str, ...] = ("ignore", "raise", "warn")


@dataclass
class _Mapped:
    """Everything one process maps of a store."""

    meta: dict[str, Any]
    text: RaggedColumn
    ids: RaggedColumn
    fields: dict[str, RaggedColumn]
    tokens: RaggedColumn | None
    index: IdIndex


class PackedStore(DocStore):
    """A store built by :func:`lading.build_store`, memory-mapped.

    Args:
        path: the store directory.
        on_stale: what to do when the source changed since the build: ``"warn"`` (default)
            emits a :class:`~lading.errors.StaleStoreWarning`, ``"raise"`` refuses to open,
            ``"ignore"`` says nothing. :attr:`stale` holds the reason either way.

    Raises:
        StoreFormatError: the directory is missing, truncated, foreign or of another version.
    """

    def __init__(self, path: str | os.PathLike[str], *, on_stale: OnStale = "warn") -> None:
        if on_stale not in ON_STALE_MODES:
            raise ValueError(f"unknown on_stale {on_stale!r}; choose from {sorted(ON_STALE_MODES)}")
        self.path = Path(path)
        self.on_stale = on_stale
        self._pid = -1
        self._mapped: _Mapped | None = None
        self.stale = fingerprint_changed(self._maps().meta.get("source", {}))
        if self.stale and on_stale == "raise":
            raise StoreFormatError(f"store {self.path} is stale: {self.stale}; rebuild it")
        if self.stale and on_stale == "warn":
            warnings.warn(
                f"store {self.path} is stale: {self.stale}", StaleStoreWarning, stacklevel=2
            )

    def __repr__(self) -> str:
        return f"PackedStore({str(self.path)!r})"

    def __getstate__(self) -> dict[str, Any]:
        # the maps belong to this process; a copy elsewhere reopens from the path
        return {"path": str(self.path), "on_stale": self.on_stale, "stale": self.stale}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.path = Path(state["path"])
        self.on_stale = state["on_stale"]
        self.stale = state["stale"]
        self._pid = -1
        self._mapped = None

    def _maps(self) -> _Mapped:
        if self._pid != os.getpid() or self._mapped is None:
            self._mapped = _map(self.path)
            self._pid = os.getpid()
        return self._mapped

    @property
    def meta(self) -> dict[str, Any]:
        """The store's ``meta.json``: counts, dtypes, source, build options and report."""
        return self._maps().meta

    @property
    def fields(self) -> tuple[str, ...]:
        """Names of the extra fields stored besides the text (e.g. ``title``)."""
        return tuple(self._maps().fields)

    @property
    def has_tokens(self) -> bool:
        """Whether the store was built with a tokenizer."""
        return self._maps().tokens is not None

    @property
    def token_info(self) -> dict[str, Any] | None:
        info: dict[str, Any] | None = self._maps().meta.get("tokens")
        return info

    @property
    def tokenizer_path(self) -> Path | None:
        return self.path / "tokenizer.json" if self.has_tokens else None

    def __len__(self) -> int:
        return len(self._maps().text)

    def __contains__(self, doc_id: object) -> bool:
        if not is_id(doc_id):
            return False
        return self._maps().index.row(doc_id) >= 0  # type: ignore[arg-type]  # is_id checked

    def ids(self) -> list[str]:
        ids = self._maps().ids
        return texts_range(ids, 0, len(ids))

    def find_rows(self, ids: Sequence[IdLike]) -> npt.NDArray[np.int64]:
        """Row numbers of ``ids`` (request order), -1 for each absent one: from the id index."""
        return self._maps().index.rows(id_list(ids, "find_rows"))

    def rows(self, ids: Sequence[IdLike]) -> npt.NDArray[np.int64]:
        # the index reports the first absent id itself: no second pass over the rows
        rows, absent = self._maps().index.lookup(id_list(ids, "rows"))
        if absent >= 0:
            raise self.missing(ids[absent])
        return rows

    def __getitem__(self, doc_id: IdLike) -> str:
        maps = self._maps()
        row = maps.index.row(doc_id)
        if row < 0:
            raise self.missing(doc_id)
        return maps.text.text(row)

    def get_many(self, ids: Sequence[IdLike]) -> list[str]:
        return self._maps().text.texts(self.rows(id_list(ids)))

    def get_many_bytes(self, ids: Sequence[IdLike]) -> list[bytes]:
        """UTF-8 bytes of ``ids`` in request order, not decoded: one copy per document instead
        of two (for long documents that a tokenizer or a writer takes as bytes anyway).
        Each ``bytes`` is the caller's own."""
        return bytes_at(self._maps().text, self.rows(id_list(ids, "get_many_bytes")))

    def texts_range(self, start: int, stop: int) -> list[str]:
        """Texts of rows ``start .. stop - 1`` (a scan): made in bulk by Arrow when ``pyarrow``
        is installed (see :mod:`lading.stores.bulk`), each ``str`` the caller's own."""
        return texts_range(self._maps().text, start, stop)

    def ids_at(self, rows: npt.NDArray[np.int64]) -> list[str]:
        """Ids of rows (as returned by :meth:`rows`)."""
        return self._maps().ids.texts(np.asarray(rows, dtype=np.int64))

    def tokenizer(self) -> Any:
        """The ``tokenizers.Tokenizer`` the tokens were made with (a copy is kept in the store)."""
        path = self.tokenizer_path
        if path is None:
            raise self.no_tokens()
        from lading.stores.tokens import load_tokenizer

        return load_tokenizer(path)

    def texts_at(self, rows: npt.NDArray[np.int64]) -> list[str]:
        """Texts of rows (as returned by :meth:`rows`); a run of consecutive rows (a scan)
        goes through :meth:`texts_range`."""
        text = self._maps().text
        rows = np.asarray(rows, dtype=np.int64)
        run = contiguous(rows, len(text))
        return texts_range(text, *run) if run else text.texts(rows)

    def field(self, doc_id: IdLike, name: str) -> str:
        """Field ``name`` of a document (``""`` where that document had none)."""
        maps = self._maps()
        if name not in maps.fields:
            raise KeyError(f"{self!r} has no field {name!r}; it has {sorted(maps.fields)}")
        return maps.fields[name].texts(self.rows([doc_id]))[0]

    def record(self, doc_id: IdLike) -> Record:
        """Id, text and fields of one document."""
        maps = self._maps()
        rows = self.rows([doc_id])
        fields = {name: col.texts(rows)[0] for name, col in maps.fields.items()}
        return Record(maps.ids.texts(rows)[0], maps.text.texts(rows)[0], fields)

    def token_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Every document's token ids back to back and their ``n + 1`` offsets (row order),
        both views of the map: what :func:`lading.device.to_device` copies to a GPU."""
        tokens = self._maps().tokens
        if tokens is None:
            raise self.no_tokens()
        return tokens.data.array(tokens.dtype), tokens.offsets

    def tokens_at(self, rows: npt.NDArray[np.int64]) -> list[np.ndarray]:
        """Token ids of rows (as returned by :meth:`rows`), each a read-only view of the map
        (no copy); :meth:`tokens` and :meth:`tokens_many` go through here."""
        tokens = self._maps().tokens
        if tokens is None:
            raise self.no_tokens()
        return tokens.arrays(np.asarray(rows, dtype=np.int64))


def _map(path: Path) -> _Mapped:
    meta = read_meta(path, FORMAT_NAME)
    try:
        # rows are read by id, anywhere in the files: no read-ahead around each page fault
        text = RaggedColumn(path, "text", random_access=True)
        ids = RaggedColumn(path, "ids", random_access=True)
        fields = {
            name: RaggedColumn(path, f"field.{name}", random_access=True) for name in meta["fields"]
        }
        tok_meta = meta.get("tokens")
        tokens = (
            RaggedColumn(path, "tokens", tok_meta["dtype"], random_access=True)
            if tok_meta
            else None
        )
        index = IdIndex(path, meta["index"])
    except (KeyError, TypeError) as e:
        raise StoreFormatError(f"{path}/meta.json lacks {e}; rebuild the store") from None
    count = meta.get("count")
    for column in (text, ids, *fields.values(), *([tokens] if tokens else [])):
        if len(column) != count:
            raise StoreFormatError(
                f"{path}: a column has {len(column)} rows, meta.json says {count}; "
                "rebuild the store"
            )
    return _Mapped(meta, text, ids, fields, tokens, index)
