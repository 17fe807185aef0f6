"""The one loader contract: what every lading loader is and every wrapper of one composes.

:class:`~lading.loading.loader.Loader` (every loader lading makes) is :class:`Resumable`, and so
is each wrapper of one (the device prefetcher, the bench's endless and replayed loaders),
through these methods only: never a loader's workload or cursor. A wrapper that runs ahead of its
caller takes a cheap :meth:`Resumable.position` with each batch it pulls and reports
``state_dict(at=position)`` of the last one it handed out (torchdata.nodes' prefetcher keeps
per-item states the same way).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol, runtime_checkable

from lading.loading.state import Cursor


@runtime_checkable
class Resumable(Protocol):
    """What every lading loader is, and what every wrapper of one needs."""

    @property
    def epoch(self) -> int:
        """The epoch being read."""
        ...

    def set_epoch(self, epoch: int) -> None:
        """Go to the first batch of ``epoch`` (a just-loaded state of that epoch stays put)."""

    def __iter__(self) -> Iterator[Any]:
        """A pass: this rank's batches of the next epoch, as each ``iter()`` of a DataLoader
        starts one; after ``set_epoch`` or ``load_state_dict``, from that position to the end
        of its epoch."""
        ...

    def __len__(self) -> int:
        """Batches on this rank (the same on every rank) of the epoch a pass in progress reads;
        between passes, of the one the next pass reads."""
        ...

    def remaining(self) -> int:
        """Batches left in the current epoch."""
        ...

    def position(self) -> Cursor:
        """A cheap copy of where the loader is: give it back to :meth:`state_dict`."""
        ...

    def state_dict(self, at: Cursor | None = None) -> dict[str, Any]:
        """The loader's state now, or as of an earlier :meth:`position` of this epoch."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state`` (bitwise with its layout, elastically with another)."""
