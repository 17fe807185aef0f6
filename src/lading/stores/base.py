"""The protocol every document store follows: lookups by id, membership, size, ids in order."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from typing import TypeVar

IdLike = str | int
T = TypeVar("T")
_MISSING = object()


class DocStore(ABC):
    """A read-only mapping from document id to document text.

    Subclasses implement :meth:`get_many`, :meth:`__len__`, :meth:`__contains__` and
    :meth:`ids`; the rest follows. Ids may be given as ``str`` or, for integer ids, ``int``.
    A store pickles as the recipe to reopen it (a path), never as its contents, so DataLoader
    workers started with ``spawn`` reopen it themselves.
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
