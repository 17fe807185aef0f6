"""What every loader is on top of the core: a *position source*.

A source says which positions an epoch has, how many readers share them and how a reader's
positions become the keys of its batches; the core (:mod:`~lading.loading.plan`,
:mod:`~lading.loading.state`, :class:`~lading.loading.loader.ResumableLoader`) does sharding,
equalizing, state, resume and elastic resume, once for all of them.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from lading.loading import state as loader_state
from lading.loading.runs import Runs
from lading.loading.state import Cursor


class Positioned(Protocol):
    """What the one loader state is made of: a cursor and what fixes its meaning."""

    kind: str
    cursor: Cursor

    def layout(self) -> dict[str, Any]:
        """What fixes who reads what: world size, readers per rank, batch size, …"""

    def fingerprint(self) -> dict[str, Any]:
        """What fixes the data and its orders: sizes, seed, shuffle, equalize, …"""

    def unread(self, layout: Mapping[str, Any], cursor: Cursor) -> Runs:
        """Epoch positions that ``layout`` had not read at ``cursor`` (for elastic resumes)."""

    def consumed(self) -> int:
        """Positions read so far this segment, over all ranks."""


class PositionSource(Positioned, Protocol):
    """The planning side of a loader (map-style samples, LM streams, parquet rows)."""

    def set_epoch(self, epoch: int) -> None:
        """Start ``epoch`` from its first batch."""

    def batches(self) -> int:
        """Batches this rank yields in the current segment (the same on every rank)."""

    def keys(self) -> Iterator[Any]:
        """Keys of this rank's items from the cursor on: ``dataset[key]`` builds each one."""


def state_of(source: Positioned, at: Cursor | None = None) -> dict[str, Any]:
    """The one loader state (:mod:`lading.loading.state`) of ``source``, now or as of ``at``
    (a cursor taken earlier: what a prefetcher reports for the batches its caller has)."""
    now = source.cursor
    if at is not None:
        source.cursor = at
    try:
        return loader_state.state_dict(
            source.kind, source.cursor, source.layout(), source.fingerprint(), source.consumed()
        )
    finally:
        source.cursor = now


def restore(source: Positioned, state: dict[str, Any]) -> None:
    """Move ``source`` to ``state``: bitwise with the saved layout, elastically with another
    (what the saved layout left unread is planned over this one's readers).

    Raises:
        LoaderStateError: the state belongs to other data, another seed or order.
    """
    source.cursor = loader_state.restore(
        state, source.kind, source.layout(), source.fingerprint(), source.unread
    )


class StatefulSource:
    """``state_dict``/``load_state_dict`` of a source that iterates itself (the LM loader in
    its own process), from its cursor, layout and fingerprint: the one loader state."""

    kind: str
    cursor: Cursor

    def layout(self) -> dict[str, Any]:
        raise NotImplementedError

    def fingerprint(self) -> dict[str, Any]:
        raise NotImplementedError

    def unread(self, layout: Mapping[str, Any], cursor: Cursor) -> Runs:
        raise NotImplementedError

    def consumed(self) -> int:
        raise NotImplementedError

    def _cursor_moved(self) -> None:
        """Drop whatever was planned for the cursor a load replaced."""

    def epoch_length(self) -> int:
        """Batches of the current epoch (segment) on this rank, read and left."""
        raise NotImplementedError

    def position(self) -> Cursor:
        """A copy of the cursor: where the loader is, for :meth:`state_dict`'s ``at``."""
        return copy.copy(self.cursor)

    def state_dict(self, at: Cursor | None = None) -> dict[str, Any]:
        """The one loader state (:mod:`lading.loading.state`), now or as of ``at``."""
        return state_of(self, at)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state``: bitwise with the saved layout, elastically with another
        (what the saved layout left unread is planned over this one's readers).

        Raises:
            LoaderStateError: the state belongs to other data, another seed or order.
        """
        restore(self, state)
        self._cursor_moved()
