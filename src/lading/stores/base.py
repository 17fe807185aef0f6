"""The protocol every document store follows: lookups by id, membership, size, ids in order,
row codes, and (the tokenized-store capability) token ids."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

IdLike = str | int
T = TypeVar("T")
ID_TYPES = (str, int, np.integer)  # an id read out of a numpy array is as good as an int


def is_id(doc_id: object) -> bool:
    """Whether ``doc_id`` has an id's type: a str, or an integer (Python's or numpy's).
    ``__contains__`` answers False for anything else, as every lookup finds nothing for it."""
    return isinstance(doc_id, ID_TYPES)


def id_text(doc_id: object) -> str | None:
    """The id ``doc_id`` spells as the stores hold it (a str; an integer's canonical digits,
    a bool's ``"True"``), or None for an object that is no id: no store holds None, so a
    lookup of it finds nothing, as :func:`is_id` says."""
    if type(doc_id) is str:
        return doc_id
    return str(doc_id) if isinstance(doc_id, ID_TYPES) else None


def id_list(ids: Sequence[IdLike], call: str = "get_many") -> Sequence[IdLike]:
    """``ids`` if it is a sequence of ids (a list, tuple, range or 1-d numpy array), else a
    TypeError: a str or bytes would be read as one id a character (``get_many("12")`` gave
    documents '1' and '2'); a generator has no length and no ``ids[i]`` to name an absent id
    by; a set or dict has no order for the rows to follow. Every route then refuses alike.
    A pandas Series comes back as its values (a numpy array): its ``ids[i]`` looks ``i`` up
    as a label, and the KeyError of an absent id named another id."""
    if type(ids) is list or type(ids) is tuple:
        return ids
    if isinstance(ids, (str, bytes)):
        kind = type(ids).__name__
        raise TypeError(
            f"{call}() takes a list of ids, not the {kind} {ids!r} (it would be read as one "
            f"id per character): pass [{ids!r}], or store[{ids!r}] for one document"
        )
    if (
        isinstance(ids, (AbstractSet, Mapping))
        or not hasattr(ids, "__len__")
        or not hasattr(ids, "__getitem__")
        or getattr(ids, "ndim", 1) != 1
    ):
        raise TypeError(
            f"{call}() takes a sequence of ids (a list, tuple or 1-d numpy array), not a "
            f"{type(ids).__name__}: pass list(...) of it (in the order the rows should follow)"
        )
    if hasattr(ids, "iloc") and hasattr(ids, "to_numpy"):  # a pandas Series: ids[i] is a label
        values: Sequence[IdLike] = ids.to_numpy()
        return values
    return ids


def checked_rows(rows: npt.ArrayLike, count: int) -> npt.NDArray[np.int64]:
    """``rows`` as int64 row codes, each in ``0..count-1``, as the packed store checks them:
    numpy and Python read -1 (what :meth:`DocStore.find_rows` gives an absent id) as the last
    row, and -2 as the one before it.

    Raises:
        IndexError: ``row R out of range for N rows``, naming the first such row.
    """
    codes = np.asarray(rows, dtype=np.int64)
    outside = codes.view(np.uint64) >= count  # both ends at once: -1 reads as 2**64 - 1
    if outside.any():
        raise IndexError(f"row {codes[outside][0]} out of range for {count} rows")
    return codes


_MISSING = object()
_POSITIONS = "_row_positions"  # instance attribute of the default row codes (never pickled)


class DocStore(ABC):
    """A read-only mapping from document id to document text.

    Subclasses implement :meth:`get_many`, :meth:`__len__`, :meth:`__contains__` and
    :meth:`ids`; the rest follows. Ids may be given as ``str`` or, for integer ids, ``int``.
    A store pickles as the recipe to reopen it (a path), never as its contents, so DataLoader
    workers started with ``spawn`` reopen it themselves.

    Row codes: every store numbers its documents ``0 .. len - 1`` in the order of :meth:`ids`,
    so a dataset can keep int64 codes instead of id strings (:meth:`find_rows`, :meth:`rows`,
    :meth:`ids_at`, :meth:`texts_at`). By default the codes are positions in :meth:`ids`, found
    through a dict built on first use (the memory of the ids once more); a store with an index
    of its own (the packed store, the offsets index) answers from it instead.

    Tokens (the *tokenized store* capability): :attr:`has_tokens` says whether the store holds
    every document's token ids. Only then do :meth:`tokens_at`, :meth:`tokens_many`,
    :meth:`tokenizer`, :attr:`token_info` and :attr:`tokenizer_path` answer; code that uses
    tokens asks :attr:`has_tokens`, never the store's class.
    """

    @abstractmethod
    def get_many(self, ids: Sequence[IdLike]) -> list[str]:
        """Texts of ``ids`` in request order (duplicates allowed).

        Raises:
            KeyError: naming the first absent id and the store.
        """

    @abstractmethod
    def __len__(self) -> int:
        """Number of documents."""

    @abstractmethod
    def __contains__(self, doc_id: object) -> bool:
        """Whether ``doc_id`` is in the store."""

    @abstractmethod
    def ids(self) -> list[str]:
        """Every id, in the order of the source."""

    def __getitem__(self, doc_id: IdLike) -> str:
        return self.get_many([doc_id])[0]

    def get(self, doc_id: IdLike, default: T | None = None) -> str | T | None:
        """Text of ``doc_id``, or ``default`` when absent."""
        try:
            return self[doc_id]
        except KeyError:
            return default

    def __iter__(self) -> Iterator[str]:
        return iter(self.ids())

    def missing(self, doc_id: IdLike) -> KeyError:
        """The KeyError for an absent id, naming the id and this store."""
        return KeyError(f"id {doc_id!r} is not in {self!r}")

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop(_POSITIONS, None)  # rebuilt on first use wherever the store lands
        return state

    # -- row codes ---------------------------------------------------------------------------

    def _positions(self) -> tuple[list[str], dict[str, int]]:
        found: tuple[list[str], dict[str, int]] | None = self.__dict__.get(_POSITIONS)
        if found is None:
            ids = self.ids()
            found = (ids, {doc_id: i for i, doc_id in enumerate(ids)})
            self.__dict__[_POSITIONS] = found
        return found

    def find_rows(self, ids: Sequence[IdLike]) -> npt.NDArray[np.int64]:
        """Row codes of ``ids`` in request order, -1 for each absent one."""
        id_list(ids, "find_rows")
        index = self._positions()[1]
        found = (index.get(i if type(i) is str else id_text(i), -1) for i in ids)  # type: ignore[arg-type]
        return np.fromiter(found, np.int64, len(ids))  # id_text's None (no id) is no key: -1

    def rows(self, ids: Sequence[IdLike]) -> npt.NDArray[np.int64]:
        """Row codes of ``ids`` in request order: a compact handle for datasets to keep.

        Raises:
            KeyError: naming the first absent id and the store.
        """
        ids = id_list(ids, "rows")  # (a Series' values: the absent id is named by position)
        rows = self.find_rows(ids)
        if len(rows) and rows.min() < 0:
            raise self.missing(ids[int(np.argmin(rows >= 0))])
        return rows

    def ids_at(self, rows: npt.NDArray[np.int64]) -> list[str]:
        """Ids of row codes (as returned by :meth:`rows`).

        Raises:
            IndexError: a row is not in the store (-1, an absent id's, included).
        """
        ids = self._positions()[0]
        return [ids[r] for r in checked_rows(rows, len(ids)).tolist()]

    def texts_at(self, rows: npt.NDArray[np.int64]) -> list[str]:
        """Texts of row codes (as returned by :meth:`rows`); an IndexError for a row outside
        the store, as :meth:`ids_at`."""
        return self.get_many(self.ids_at(rows))

    # -- tokens (the tokenized-store capability) -----------------------------------------------

    @property
    def has_tokens(self) -> bool:
        """Whether the store holds every document's token ids (built with a tokenizer)."""
        return False

    @property
    def token_info(self) -> dict[str, Any] | None:
        """The tokenizer the tokens were made with (``sha256``, ``vocab_size``, ``dtype``,
        ``max_length``), or None without tokens."""
        return None

    @property
    def tokenizer_path(self) -> Path | None:
        """The ``tokenizer.json`` kept with the tokens, or None without tokens."""
        return None

    def tokenizer(self) -> Any:
        """The ``tokenizers.Tokenizer`` the tokens were made with."""
        raise self.no_tokens()

    def tokens_at(self, rows: npt.NDArray[np.int64]) -> list[np.ndarray]:
        """Token ids of row codes, in the order given."""
        raise self.no_tokens()

    def token_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """All token ids back to back and the ``n + 1`` offsets of the rows (row order)."""
        raise self.no_tokens()

    def tokens_many(self, ids: Sequence[IdLike]) -> list[np.ndarray]:
        """Token ids of ``ids`` in request order."""
        return self.tokens_at(self.rows(id_list(ids, "tokens_many")))

    def tokens(self, doc_id: IdLike) -> np.ndarray:
        """Token ids of one document."""
        return self.tokens_many([doc_id])[0]

    def no_tokens(self) -> ValueError:
        """The error for asking a store without tokens for them, saying how to get them."""
        return ValueError(
            f"{self!r} has no tokens: build it with a tokenizer "
            "(lading.build_store(..., tokenizer=...) or `lading build --tokenizer`)"
        )


def store_identity(store: object) -> dict[str, object]:
    """What identifies the content of the store object in hand, cheaply: for a lading
    directory (packed store, offsets index), the content of the snapshot this object reads
    (:func:`lading.disk.snapshot.content_id`: its files' sizes and CRC32s from the manifest it
    pinned, never what is on disk now, so a rebuild since the object was opened changes
    nothing it is keyed on), the same whichever route reads it (a local folder, a staged copy,
    its ``s3://`` URL); otherwise its type and size (an in-memory dict or an ir_datasets
    docstore has no build record to read)."""
    content = getattr(store, "content_id", None)
    if isinstance(content, str):
        return {"content": content}
    return {"type": type(store).__name__, "size": len(store)}  # type: ignore[arg-type]
