"""ResumableLoader: torch's DataLoader over a position source, with a position it can save.

One wrapper for every workload. The sampler it hands the DataLoader asks the source for this
rank's keys *when an epoch's iteration starts*, from the cursor on, so a resumed or elastic
loader needs no special path: the cursor already says where to begin. DataLoader workers
prefetch ahead of the training loop, so the cursor counts the batches the loop has
*received*, never those the sampler handed out; batches still in flight are not consumed.

Persistent workers work for every workload: everything a worker needs to build an item is
in its key (epoch, and for batch keys the rows to read), never in dataset attributes set in
the main process after the workers started.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from lading.loading.lookahead import Announce, announcer
from lading.loading.source import PositionSource, restore, state_of
from lading.loading.state import Cursor


class CursorSampler(Sampler[Any]):
    """Yields the source's keys from its cursor on; read afresh each time iteration starts.
    With ``announce``, the dataset hears of the batches ahead (:mod:`lading.loading.lookahead`)."""

    def __init__(self, source: PositionSource, announce: Announce | None = None) -> None:
        self.source = source
        self.announce = announce

    def __iter__(self) -> Iterator[Any]:
        keys = self.source.keys()
        if self.announce is None:
            return keys
        return self.announce(keys, self.source.cursor.epoch, self.source.cursor.batches)


class ResumableLoader:
    """Iterate it like a DataLoader; call :meth:`set_epoch` before each epoch.

    ``len()`` is the number of batches left in the current epoch (the same on every rank).
    ``batch_size=None`` means the source's keys are whole batches (the dataset builds them).
    """

    def __init__(
        self,
        source: PositionSource,
        dataset: Any,
        *,
        batch_size: int | None,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        num_workers: int = 0,
        pin_memory: bool = False,
        seed: int = 0,
        prefetch_factor: int | None = None,
        persistent_workers: bool | None = None,
        multiprocessing_context: str | None = None,
    ) -> None:
        self.source = source
        generator = torch.Generator()
        generator.manual_seed(seed)  # worker seeds from here, not from the global RNG (dropout)
        kwargs: dict[str, Any] = {}
        if num_workers > 0:
            kwargs["prefetch_factor"] = prefetch_factor or 2
            kwargs["persistent_workers"] = (
                True if persistent_workers is None else persistent_workers
            )
            if multiprocessing_context:
                kwargs["multiprocessing_context"] = multiprocessing_context
        torch_dataset: Dataset[Any] = dataset
        self.loader: DataLoader[Any] = DataLoader(
            torch_dataset,
            batch_size=batch_size,
            sampler=CursorSampler(source, announcer(dataset, batch_size)),
            collate_fn=collate_fn,
            num_workers=num_workers,
            pin_memory=pin_memory,
            generator=generator,
            **kwargs,
        )

    @property
    def epoch(self) -> int:
        return self.source.cursor.epoch

    @property
    def dataset(self) -> Any:
        return self.loader.dataset

    @property
    def num_workers(self) -> int:
        return self.loader.num_workers

    def set_epoch(self, epoch: int) -> None:
        """Start ``epoch`` from its first batch (reshuffles; tells the dataset if it listens)."""
        self.source.set_epoch(epoch)
        set_epoch = getattr(self.loader.dataset, "set_epoch", None)
        if callable(set_epoch) and self.loader.dataset is not self.source:
            set_epoch(epoch)

    def __len__(self) -> int:
        return max(0, self.source.batches() - self.source.cursor.batches)

    def epoch_length(self) -> int:
        """Batches of the current epoch (segment) on this rank, read and left."""
        return self.source.batches()

    def position(self) -> Cursor:
        """A copy of the cursor: where the loader is, for :meth:`state_dict`'s ``at``."""
        return copy.copy(self.source.cursor)

    def __iter__(self) -> Iterator[Any]:
        cursor = self.source.cursor
        for batch in self.loader:
            cursor.batches += 1
            yield batch

    def state_dict(self, at: Cursor | None = None) -> dict[str, Any]:
        """The one loader state (:mod:`lading.loading.state`), now or as of ``at``."""
        return state_of(self.source, at)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state``: bitwise with the saved layout, elastically with another.

        Raises:
            LoaderStateError: the state belongs to other data, another seed or order.
        """
        source = self.source
        restore(source, state)
        set_epoch = getattr(self.loader.dataset, "set_epoch", None)
        if callable(set_epoch) and self.loader.dataset is not self.source:
            set_epoch(source.cursor.epoch)


class BatchKeyed:
    """Mixin of sources that are their own dataset and whose keys are whole batches."""

    seed: int

    def _set_workers(self, num_workers: int) -> None:
        """Called before the loader is made: a source whose plan depends on it checks it."""

    def loader(
        self,
        num_workers: int = 0,
        pin_memory: bool = False,
        multiprocessing_context: str | None = None,
        persistent_workers: bool | None = None,
    ) -> ResumableLoader:
        """A DataLoader whose workers build the batches, resumable like this source."""
        self._set_workers(num_workers)
        return ResumableLoader(
            self,  # type: ignore[arg-type]  # the subclass is a PositionSource
            self,
            batch_size=None,
            num_workers=num_workers,
            pin_memory=pin_memory,
            seed=int(self.seed),
            persistent_workers=persistent_workers,
            multiprocessing_context=multiprocessing_context,
        )
