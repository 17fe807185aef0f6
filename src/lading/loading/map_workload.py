"""``lading.loader``: a DataLoader over a map-style dataset, each global rank a disjoint share.

The global order of an epoch is a permutation drawn from ``(seed, epoch)`` alone, the same on
every rank and independent of the world size. The planner (:mod:`lading.loading.plan`) deals
it round-robin over the ranks (``interleave``), padded or truncated to equal shares, so every
rank takes the same number of batches and DDP never waits on a rank that ran out. After ``k``
batches the ranks have together consumed exactly the first ``k * batch_size * world_size``
samples of the order.

That fact makes a resume exact and also *elastic*: a run checkpointed at world size 4 can
continue at 2 (or 3, or with another batch size). The rest of the order becomes a new segment
of the epoch, dealt over the new ranks, so every sample not yet consumed is read exactly once
more. Bitwise equal across the change: the sequence of samples in global order, and what each
sample is (an epoch-aware dataset draws from ``(epoch, index)``). Not equal, and cannot be:
which rank reads a sample, which samples share a batch, and the few samples repeated (or
left out, with ``equalize="truncate"``) to even out the new world size's shares, and, with
``drop_partial_batch=True``, each new rank's last partial batch of the rest (left out).

``batching="no_duplicates"`` regroups each step's samples so that no batch holds two samples
sharing a key (a query, a document: the dataset's ``duplicate_keys``), for losses that take the
rest of a batch as negatives (:mod:`lading.loading.distinct`). The batch counts stay the plan's,
and every sample is read once an epoch: an epoch that cannot be so arranged (one query in more
samples than the epoch has batches) is refused, epoch 0 when the loader is made, never read
with repeats. The regrouping depends on the world size and batch size, so such a run resumes
bitwise with its saved layout and refuses another.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sized
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
from torch.utils.data import default_collate

from lading.loading.announce import announcer
from lading.loading.distinct import arrange, most_shared
from lading.loading.hooks import DuplicateKeys, EpochIndex, Hooks, MapDataset
from lading.loading.loader import Loader, Workers
from lading.loading.order import epoch_order
from lading.loading.reading import Reading, refuse_drop_last
from lading.loading.runs import Runs
from lading.loading.segment import Segment
from lading.loading.state import Cursor, LoaderStateError
from lading.loading.workload import SegmentWorkload
from lading.step import as_reader, at_step, step_of
from lading.world import World

__all__ = ["BATCHING", "EpochIndex", "MapBatch", "MapWorkload", "loader"]

BATCHING: tuple[str, ...] = ("no_duplicates", "order")


def check_batching(batching: str, duplicate_keys: DuplicateKeys | None) -> str:
    """``batching`` if it names a policy the dataset supports, else a ValueError saying why."""
    if batching not in BATCHING:
        raise ValueError(f"unknown batching {batching!r}; choose from {sorted(BATCHING)}")
    if batching == "no_duplicates" and duplicate_keys is None:
        raise ValueError(
            "batching='no_duplicates' needs a dataset with duplicate_keys(items, epoch) (the "
            "keys no two samples of a batch may share), such as lading.ir.TrainingGroups"
        )
    return batching


class MapBatch(NamedTuple):
    """The key of one batch of a map-style dataset: its epoch and the dataset items it holds,
    in order, and its number in the epoch (-1: unknown): all a DataLoader worker needs to
    build it (persistent ones too)."""

    epoch: int
    items: tuple[int, ...]
    batch: int = -1


class MapWorkload(SegmentWorkload):
    """The samples of a map-style dataset as a workload: one reader per rank.

    Args:
        dataset: what is read (``dataset[i]``); its optional hooks are looked up once, here
            (:mod:`lading.loading.hooks`).
        collate_fn: a batch from a list of items (default: torch's ``default_collate``).
        reading: the loader's settings; the epoch order is a permutation from
            ``(seed, epoch)``, one reader per rank.
        batching: ``"order"`` (a batch is a run of the order) or ``"no_duplicates"`` (the
            dataset's ``duplicate_keys(items, epoch)`` says what no two samples may share).
    """

    kind = "map"

    def __init__(
        self,
        dataset: MapDataset,
        collate_fn: Callable[[list[Any]], Any] | None,
        reading: Reading,
        batching: str = "order",
    ) -> None:
        self.dataset, self.collate = dataset, collate_fn or default_collate
        self.n = len(dataset)
        self.hooks = Hooks.of(dataset)
        self.batching = check_batching(batching, self.hooks.duplicate_keys)
        self._arranged: tuple[tuple[int, int], list[npt.NDArray[np.int64]]] | None = None
        self._told = -1  # the epoch last passed to a dataset's own set_epoch
        self.reading = reading
        reading.refuse_empty(self.n, "samples")
        if self.batching == "no_duplicates":
            self._distinct_shares(Cursor())  # epoch 0 arranged (and kept): a refusal comes now

    def __getstate__(self) -> dict[str, Any]:
        """What a DataLoader worker gets: no arranged epoch (it is planned in the main
        process; the keys carry the result)."""
        return {**self.__dict__, "_arranged": None}

    def segment(self, cursor: Cursor, layout: Mapping[str, Any] | None = None) -> Segment:
        """``cursor``'s segment of the samples, interleaved over ``layout``'s ranks."""
        world, size = self.sizes(layout)
        return Segment.of(self.n, world, cursor, self.reading, size, interleave=True)

    def share(self, cursor: Cursor) -> npt.NDArray[np.int64]:
        """Dataset indices this rank reads in ``cursor``'s segment, in order."""
        if self.batching == "no_duplicates":
            return self._distinct_shares(cursor)[self.reading.rank]
        seg = self.segment(cursor)
        positions = seg.share(self.reading.rank).positions()
        order = epoch_order(self.n, self.reading.seed, cursor.epoch, self.reading.shuffle)
        return order[positions[: seg.take]]

    def _distinct_shares(self, cursor: Cursor) -> list[npt.NDArray[np.int64]]:
        """Every rank's share, regrouped into batches without a shared key (cached per epoch).

        The pool is what the ranks would read, in reading order (step by step, rank by rank);
        the slots are the ranks' batches in the same order, so step ``k`` of every rank is
        filled from the front of what is left, as s-t fills its next batch.
        """
        at = (cursor.epoch, cursor.segment)
        if self._arranged is not None and self._arranged[0] == at:
            return self._arranged[1]
        world, size = self.sizes(None)
        seg = self.segment(cursor)
        order = epoch_order(self.n, self.reading.seed, cursor.epoch, self.reading.shuffle)
        shares = [order[seg.share(r).positions()] for r in range(world)]
        pool = np.stack(shares, axis=1).reshape(-1)  # step-major: share j of rank 0, 1, …
        take = seg.take
        sizes = [size] * (take // size) + ([take % size] if take % size else [])
        duplicate_keys = self.hooks.duplicate_keys
        assert duplicate_keys is not None  # check_batching made sure
        unique, inverse = np.unique(pool, return_inverse=True)
        keys = np.asarray(duplicate_keys(unique, cursor.epoch))[inverse]
        most = most_shared(keys)
        if most > len(sizes) * world:
            said = f"one key (a query or document) is shared by {most} samples"
            raise ValueError(self._refusal(cursor, said, most))
        done = arrange(pool, [s for s in sizes for _ in range(world)], keys)
        if done.repeated:  # the rest of left_out is what equalize/drop_partial_batch leave out
            said = f"{done.repeated} samples could not be placed without a duplicate key"
            raise ValueError(self._refusal(cursor, said, None))
        per_rank = [
            np.concatenate(done.slots[r::world]) if sizes else np.empty(0, np.int64)
            for r in range(world)
        ]
        self._arranged = (at, per_rank)
        return per_rank

    def _refusal(self, cursor: Cursor, why: str, most: int | None) -> str:
        """Why a no_duplicates epoch is refused (rather than read with repeats), and the fix:
        the largest batch size with at least ``most`` batches an epoch, where one is known."""
        world, size = self.sizes(None)
        batches = self.segment(cursor).batches
        fits = [
            b
            for b in range(1, size)
            if self.segment(Cursor(), {"world_size": world, "batch_size": b}).batches * world
            >= (most or 0)
        ]
        lower = "lower batch_size" + (f" to at most {max(fits)}" if most and fits else "")
        return (
            f"batching='no_duplicates', epoch {cursor.epoch}: {why}, and the epoch has "
            f"{batches * world} batches ({world} rank(s) x {batches} of batch_size={size}): "
            "lading reads every sample once an epoch, with equal batch counts on every rank, "
            f"or refuses; {lower}, or batch in order (batching='order'; sentence-transformers: "
            "batch_sampler='batch_sampler'; its per_device_train_batch_size is batch_size)"
        )

    def keys(self, cursor: Cursor) -> Iterator[MapBatch]:
        """This rank's batches from ``cursor.batches`` on, as their epoch and items."""
        size, epoch = self.reading.batch_size, cursor.epoch
        first, indices = cursor.batches, self.share(cursor)[cursor.batches * size :].tolist()
        return (
            MapBatch(epoch, tuple(indices[i : i + size]), first + i // size)
            for i in range(0, len(indices), size)
        )

    def items(self, key: MapBatch) -> list[Any]:
        """What the dataset is asked for to build ``key``: :class:`EpochIndex` items where it
        is epoch-aware, else its indices."""
        if self.hooks.epoch_aware:
            return [EpochIndex(key.epoch, i) for i in key.items]
        return list(key.items)

    def build(self, key: MapBatch) -> Any:
        """The collated batch of ``key``'s items, each read as ``dataset[item]`` or all at once
        by ``__getitems__``; the dataset's ``set_epoch`` and ``at_step`` are called first, in
        whichever process builds the batch (:mod:`lading.loading.hooks`); the reads of the
        build are the batch's step's (:func:`lading.step.at_step`: a remote store reads it)."""
        hooks, items = self.hooks, self.items(key)
        if hooks.set_epoch is not None and key.epoch != self._told:
            hooks.set_epoch(key.epoch)
            self._told = key.epoch
        step = step_of(key.epoch, key.batch) if key.batch >= 0 else None
        if hooks.at_step is not None and step is not None:  # the reads below are this batch's
            hooks.at_step(step)
        with at_step(step), as_reader(self):
            if hooks.getitems is not None:
                return self.collate(hooks.getitems(items))
            dataset = self.dataset
            return self.collate([dataset[i] for i in items])

    def settle(self, timeout: float) -> None:
        """The dataset's ``settle`` hook, where it has one (a loader that closes calls this:
        what its ``prefetch`` asked for is fetched before ``close`` returns)."""
        if self.hooks.settle is not None:
            with as_reader(self):
                self.hooks.settle(timeout)

    def announced(self) -> Hooks:
        """The hooks the announcer calls, each as this loader's (:func:`lading.step.as_reader`:
        a store read by two loaders keeps a plan and a window for each)."""
        hooks = self.hooks
        return dataclasses.replace(
            hooks,
            prefetch=None if hooks.prefetch is None else self._as_mine(hooks.prefetch),
            plan=None if hooks.plan is None else self._as_mine(hooks.plan),
        )

    def _as_mine(self, hook: Callable[..., Any]) -> Callable[..., Any]:
        def mine(*args: Any, **kwargs: Any) -> Any:
            with as_reader(self):
                return hook(*args, **kwargs)

        return mine

    def fingerprint(self) -> dict[str, Any]:
        """The settings', the sample count and the dataset's identity (where it has one)."""
        found: dict[str, Any] = {
            "n": self.n,
            **self.reading.fingerprint(),
            "data": self.hooks.identity,  # the dataset's data_fingerprint(), where it has one
        }
        if self.batching != "order":  # absent by default: states saved before it still load
            found["batching"] = self.batching
        return found

    def unread(self, layout: Mapping[str, Any], cursor: Cursor) -> Runs:
        """What ``layout`` left unread at ``cursor``; refused for a no_duplicates epoch (its
        batches were regrouped for their layout)."""
        if self.batching == "no_duplicates":
            raise LoaderStateError(
                f"a no_duplicates epoch is regrouped for its layout; the state was saved with "
                f"{dict(layout)}, this loader has {self.layout()}: resume with the saved "
                "world size and batch size, or start the epoch afresh"
            )
        return super().unread(layout, cursor)


def loader(
    dataset: MapDataset,
    batch_size: int,
    collate_fn: Callable[[list[Any]], Any] | None = None,
    *,
    num_workers: int = 0,
    pin_memory: bool = False,
    shuffle: bool = True,
    seed: int = 0,
    drop_last: None = None,
    equalize: str = "pad",
    drop_partial_batch: bool = False,
    world: World | None = None,
    prefetch_factor: int | None = None,
    persistent_workers: bool | None = None,
    multiprocessing_context: str | None = None,
    batching: str = "order",
    read_ahead: int = 0,
) -> Loader:
    """A loader of ``dataset`` in which each global rank reads a disjoint, equal share.

    Args:
        dataset: a map-style dataset: ``len()`` and ``dataset[i]``, and any of the optional
            hooks of :mod:`lading.loading.hooks` (``epoch_aware``, ``set_epoch``,
            ``__getitems__``, ``prefetch``, ``duplicate_keys``...), looked up once, here.
        batch_size: samples per batch on this rank.
        collate_fn: builds a batch from a list of items (runs in the workers).
        num_workers: DataLoader worker processes per rank (0: read in this process). Stores
            reopen lazily in each.
        pin_memory: page-locked batches for faster host-to-device copies (GPU only).
        shuffle, seed: the epoch order is a permutation from (seed, epoch).
        drop_last: refused with a TypeError naming lading's two arguments for it.
        equalize: ``"pad"`` repeats samples from the start of the order to even out the
            shares, ``"truncate"`` leaves the last ``n % world_size`` out.
        drop_partial_batch: leave out each rank's last batch when it is not full.
        world: rank and world size (default: detected).
        prefetch_factor: batches each worker keeps ready (default 2 when workers are used).
        persistent_workers: keep workers between epochs (default: when there are workers).
        multiprocessing_context: ``"fork"``, ``"spawn"`` or ``"forkserver"`` for workers.
        read_ahead: with ``num_workers=0``, batches built ahead on a thread while the caller
            holds the last one (:mod:`lading.loading.read_ahead`: a remote store's reads beside the
            training step). Off by default: ``dataset`` and ``collate_fn`` run on that thread,
            and one that draws from torch's or NumPy's global random generator would draw in
            an order that depends on the thread's timing. A dataset that reads from object
            storage (its ``remote_url``) with ``num_workers`` > 0 warns: the thread reads it
            faster than workers do.
        batching: ``"order"`` (batches are runs of the epoch's order) or ``"no_duplicates"``
            (no two samples of a batch share a key of ``dataset.duplicate_keys``: for losses
            with in-batch negatives; see the module docstring).
    """
    if not isinstance(dataset, Sized):
        raise TypeError("lading.loader needs a map-style dataset with __len__")
    refuse_drop_last(drop_last, "lading.loader")
    reading = Reading.of(batch_size, shuffle, seed, equalize, drop_partial_batch, world)
    workload = MapWorkload(dataset, collate_fn, reading, batching)
    workers = Workers(
        num_workers, pin_memory, prefetch_factor, persistent_workers, multiprocessing_context
    )
    remote = workload.hooks.remote_url
    workers = (
        workers.with_read_ahead(read_ahead, default=0)
        if remote is None
        else workers.for_remote(read_ahead, remote, default=0)
    )
    made = Loader(workload, workers, announce=announcer(workload.announced(), workload.items))
    made.dataset = dataset
    return made
