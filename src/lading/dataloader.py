"""A DataLoader wired for DDP: disjoint equal shares per global rank, deterministic, resumable.

The global sample order of an epoch is a permutation drawn from ``(seed, epoch)`` alone, the
same on every rank and independent of the world size; it is padded (or cut, with
``drop_last``) to a multiple of the world size and dealt round-robin, so every rank takes the
same number of batches and DDP never waits on a rank that ran out. After ``k`` batches every
rank has consumed exactly the first ``k * batch_size * world_size`` samples of the padded order,
which is what makes a resume exact: the rest of the epoch is recomputed from there.

The same fact makes a resume *elastic*: a run checkpointed at world size 4 can continue at 2
(or 3, or with another batch size). The saved position counts samples of the global order,
which no world size changes; the rest of the order is dealt over the new ranks, so every
sample not yet consumed is read exactly once more this epoch. Bitwise equal across the change:
the sequence of samples in global order, and what each sample is (an epoch-aware dataset draws
from ``(epoch, index)``). Not equal, and cannot be: which rank reads a sample, which samples
share a batch, and the few samples repeated (or dropped, with ``drop_last``) to even out the
new world size's shares.

DataLoader workers prefetch ahead of the training loop, so the position saved by
:meth:`ResumableLoader.state_dict` counts the batches the loop has *received*, not those the
sampler has handed out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sized
from typing import Any, NamedTuple, Protocol

import numpy as np
import numpy.typing as npt
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from lading.world import World

STATE_VERSION = 1


class MapDataset(Protocol):
    """What :func:`loader` needs of a dataset: a length and items by index."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: Any) -> Any: ...


class EpochIndex(NamedTuple):
    """An index handed to an epoch-aware dataset together with the epoch it belongs to.

    Persistent DataLoader workers hold their own copy of the dataset, which never sees a
    ``set_epoch`` called in the main process; passing the epoch with every index keeps
    per-epoch sampling (e.g. hard negatives) correct in every worker.
    """

    epoch: int
    item: int


def epoch_order(n: int, seed: int, epoch: int, shuffle: bool = True) -> npt.NDArray[np.int64]:
    """The global order of ``n`` samples in ``epoch``: the same everywhere, any world size."""
    if not shuffle:
        return np.arange(n, dtype=np.int64)
    return np.random.default_rng([seed, epoch]).permutation(n).astype(np.int64)


def dealt(
    order: npt.NDArray[np.int64], world_size: int, drop_last: bool, start: int = 0
) -> npt.NDArray[np.int64]:
    """``order[start:]`` padded (or cut, with ``drop_last``) to a multiple of ``world_size``.

    Padding repeats samples from the start of the whole order, so resuming at the same world
    size from any multiple of it gives exactly the tail of the uninterrupted epoch's order.
    """
    rest = order[min(start, len(order)) :]
    if drop_last:
        return rest[: len(rest) - len(rest) % world_size]
    pad = -len(rest) % world_size
    if pad == 0 or len(order) == 0:
        return rest
    return np.concatenate([rest, np.resize(order, pad)])


class ShardedSampler(Sampler[Any]):
    """Indices of this rank's share of each epoch (see the module docstring).

    Args:
        n: dataset size.
        shuffle: permute each epoch (else natural order).
        seed: with the epoch, fixes the order.
        drop_last: cut the order to a multiple of the world size instead of padding it.
        world: rank and world size (default: :meth:`World.detect`).
        epoch_aware: yield :class:`EpochIndex` instead of plain ints.
    """

    def __init__(
        self,
        n: int,
        *,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        world: World | None = None,
        epoch_aware: bool = False,
    ) -> None:
        self.n, self.shuffle, self.seed, self.drop_last = n, shuffle, seed, drop_last
        self.world = world or World.detect()
        self.epoch_aware = epoch_aware
        self.epoch = 0
        self.start = 0  # samples of the dealt global order already consumed this epoch

    def set_epoch(self, epoch: int) -> None:
        """Start ``epoch`` from its beginning."""
        self.epoch, self.start = epoch, 0

    def rest(self) -> npt.NDArray[np.int64]:
        """What all ranks read from ``start`` to the end of the epoch, padded or cut."""
        order = epoch_order(self.n, self.seed, self.epoch, self.shuffle)
        return dealt(order, self.world.world_size, self.drop_last, self.start)

    def share(self) -> npt.NDArray[np.int64]:
        """What this rank reads from ``start`` to the end of the epoch."""
        return self.rest()[self.world.rank :: self.world.world_size]

    def __len__(self) -> int:
        return len(self.share())

    def __iter__(self) -> Iterator[Any]:
        indices = self.share().tolist()
        if self.epoch_aware:
            epoch = self.epoch
            return (EpochIndex(epoch, i) for i in indices)
        return iter(indices)


class ResumableLoader:
    """A DataLoader over a :class:`ShardedSampler` that can save and restore its position.

    Iterate it like a DataLoader; call :meth:`set_epoch` before each epoch. ``len()`` is the
    number of batches left in the current epoch (the same on every rank).
    """

    def __init__(self, loader: DataLoader[Any], sampler: ShardedSampler, batch_size: int) -> None:
        self.loader, self.sampler, self.batch_size = loader, sampler, batch_size
        self.batches_done = 0  # batches of this epoch received by the caller

    @property
    def epoch(self) -> int:
        return self.sampler.epoch

    @property
    def dataset(self) -> Any:
        return self.loader.dataset

    def set_epoch(self, epoch: int) -> None:
        """Start ``epoch`` (reshuffles; tells the dataset too, if it listens)."""
        self.sampler.set_epoch(epoch)
        self.batches_done = 0
        set_epoch = getattr(self.loader.dataset, "set_epoch", None)
        if callable(set_epoch):
            set_epoch(epoch)

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[Any]:
        for batch in self.loader:
            self.batches_done += 1
            yield batch
        # the epoch ran out: a resume from here starts the next one
        self.sampler.start = 0

    def state_dict(self) -> dict[str, Any]:
        """Where the caller is: epoch, batches received, and what fixes the order."""
        return {
            "version": STATE_VERSION,
            "epoch": self.sampler.epoch,
            "batches_done": self.batches_done,
            "consumed": self.sampler.start
            + self.batches_done * self.batch_size * self.sampler.world.world_size,
            "seed": self.sampler.seed,
            "n": self.sampler.n,
            "world_size": self.sampler.world.world_size,
            "batch_size": self.batch_size,
            "shuffle": self.sampler.shuffle,
            "drop_last": self.sampler.drop_last,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state``: the next batch is the one after the last one received.

        The world size and batch size may differ from the saved run's (see the module
        docstring): the samples not yet consumed are dealt over this run's ranks.

        Raises:
            ValueError: the state belongs to another dataset size, seed or order.
        """
        if state.get("version") != STATE_VERSION:
            raise ValueError(
                f"loader state version {state.get('version')}, expected {STATE_VERSION}"
            )
        for key in ("n", "seed", "shuffle", "drop_last"):
            mine = getattr(self.sampler, key)
            if state[key] != mine:
                raise ValueError(
                    f"loader state has {key}={state[key]!r}, this loader {mine!r}; "
                    "resume with the settings of the saved run"
                )
        self.sampler.epoch = state["epoch"]
        self.sampler.start = state["consumed"]
        set_epoch = getattr(self.loader.dataset, "set_epoch", None)
        if callable(set_epoch):
            set_epoch(state["epoch"])
        self.batches_done = 0


def loader(
    dataset: MapDataset,
    batch_size: int,
    collate_fn: Callable[[list[Any]], Any] | None = None,
    num_workers: int = 0,
    pin_memory: bool = False,
    shuffle: bool = True,
    drop_last: bool = False,
    seed: int = 0,
    *,
    world: World | None = None,
    prefetch_factor: int | None = None,
    persistent_workers: bool | None = None,
    multiprocessing_context: str | None = None,
) -> ResumableLoader:
    """A DataLoader for ``dataset`` in which each global rank reads a disjoint, equal share.

    Args:
        dataset: a map-style dataset. If it has ``epoch_aware = True`` it receives
            :class:`EpochIndex` items (needed for per-epoch sampling with persistent workers).
        batch_size: samples per batch on this rank.
        collate_fn: builds a batch from a list of items (runs in the workers).
        num_workers: DataLoader worker processes per rank. Stores reopen lazily in each.
        pin_memory: page-locked batches for faster host-to-device copies (GPU only).
        shuffle, seed: the epoch order is a permutation from (seed, epoch).
        drop_last: cut the order to a multiple of ``world_size * batch_size`` (no padding, no
            partial last batch) instead of padding it by repeating samples from its start.
        world: rank and world size (default: detected).
        prefetch_factor: batches each worker keeps ready (default 2 when workers are used).
        persistent_workers: keep workers between epochs (default: when there are workers).
        multiprocessing_context: ``"fork"``, ``"spawn"`` or ``"forkserver"`` for workers.
    """
    if not isinstance(dataset, Sized):
        raise TypeError("lading.loader needs a map-style dataset with __len__")
    torch_dataset: Dataset[Any] = dataset  # type: ignore[assignment]  # any map-style object
    world = world or World.detect()
    sampler = ShardedSampler(
        len(dataset),
        shuffle=shuffle,
        seed=seed,
        drop_last=drop_last,
        world=world,
        epoch_aware=bool(getattr(dataset, "epoch_aware", False)),
    )
    generator = torch.Generator()
    generator.manual_seed(seed)  # worker seeds from here, not from the global RNG (dropout)
    kwargs: dict[str, Any] = {}
    if num_workers > 0:
        kwargs["prefetch_factor"] = prefetch_factor or 2
        kwargs["persistent_workers"] = True if persistent_workers is None else persistent_workers
        if multiprocessing_context:
            kwargs["multiprocessing_context"] = multiprocessing_context
    data_loader = DataLoader(
        torch_dataset,
        batch_size=batch_size,
        sampler=sampler,
        collate_fn=collate_fn,
        num_workers=num_workers,
        pin_memory=pin_memory,
        drop_last=drop_last,
        generator=generator,
        **kwargs,
    )
    return ResumableLoader(data_loader, sampler, batch_size)
