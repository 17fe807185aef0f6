"""The one loader contract, and the framework-facing view every integration shares.

Every lading loader is :class:`Resumable`: iterate it for this rank's batches, ``set_epoch``
before each epoch, ``len()`` for the batches left, ``state_dict``/``load_state_dict`` for
checkpoints (one schema, :mod:`lading.loading.state`). Wrappers compose through the same
methods and never reach inside: a prefetcher that runs ahead of the caller takes a cheap
:meth:`Resumable.position` with each batch it pulls and asks for ``state_dict(at=position)`` of
the last one it handed out (torchdata.nodes' prefetcher keeps per-item snapshots the same way).

:class:`EpochLoader` is a loader as training frameworks expect a ``DataLoader`` to be (the HF
Trainer, Lightning): ``len()`` counts the whole epoch, and ``set_epoch`` of the epoch a
just-restored position belongs to keeps that position.
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
        """Go to the first batch of ``epoch`` (its order comes from (seed, epoch))."""

    def __iter__(self) -> Iterator[Any]:
        """This rank's batches from the current position to the end of the epoch."""
        ...

    def __len__(self) -> int:
        """Batches left in the current epoch (the same on every rank)."""
        ...

    def epoch_length(self) -> int:
        """Batches of the current epoch on this rank, read and left (``len()`` + read)."""
        ...

    def position(self) -> Cursor:
        """A cheap copy of where the loader is: give it back to :meth:`state_dict`."""
        ...

    def state_dict(self, at: Cursor | None = None) -> dict[str, Any]:
        """The loader's state now, or as of an earlier :meth:`position` of this epoch."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state`` (bitwise with its layout, elastically with another)."""


class EpochLoader:
    """A lading loader as a framework expects a DataLoader: the epoch's ``len()`` and a
    ``set_epoch`` that keeps a just-restored (or just-started) position unread.

    Frameworks call ``set_epoch(e)`` when they start epoch ``e``, also right after restoring a
    mid-epoch checkpoint (the HF Trainer, Lightning). Passing that on would restart the epoch
    and read again what was read before the checkpoint.
    """

    def __init__(self, loader: Resumable) -> None:
        self.loader = loader
        self._fresh = True  # nothing read since the position was set or restored

    def __len__(self) -> int:
        """Batches of the whole epoch on this rank, as a DataLoader's ``len()``."""
        return self.loader.epoch_length()

    def set_epoch(self, epoch: int) -> None:
        """Start ``epoch``, unless the loader stands, unread, at a position of that epoch."""
        if not (self._fresh and epoch == self.loader.epoch):
            self.loader.set_epoch(epoch)
        self._fresh = True

    def __iter__(self) -> Iterator[Any]:
        for batch in self.loader:
            self._fresh = False
            yield batch

    def state_dict(self) -> dict[str, Any]:
        return self.loader.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.loader.load_state_dict(state)
        self._fresh = True
