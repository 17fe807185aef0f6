"""Contracts every loader must meet, as reusable checks (torchdata's run_test_save_load_state).

``make_loader(world, num_workers)`` builds the loader one rank would use; the checks run every
rank's loader in this process (a rank's share depends only on (seed, epoch, rank, world)).
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable
from typing import Any

from lading.world import World

MakeLoader = Callable[[World, int], Any]


def forked(workers: int) -> Any:
    """A ``workers`` parameter of DataLoader worker processes: a fork each, so in the slow set
    (tests/loading/test_contracts.py runs every loader with workers there too)."""
    import pytest

    return pytest.param(workers, marks=pytest.mark.slow)


class Numbers:
    """Map-style dataset whose item ``i`` is ``i``."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        return i


def batches_of(
    loader: Any, key: Callable[[Any], list[Any]], most: int | None = None
) -> list[list[Any]]:
    """Every batch of one epoch (at most ``most``) as a list of sample keys."""
    return [key(batch) for batch in itertools.islice(loader, most)]


def assert_batches_kept(
    make_loader: MakeLoader, world: World, num_workers: int, key: Callable[[Any], list[Any]]
) -> None:
    """Batches kept past the next one (``list(loader)``) are the batches as they came: no
    loader hands out a view that a later batch overwrites."""
    as_they_came = make_loader(world, num_workers)
    as_they_came.set_epoch(1)
    want = batches_of(as_they_came, key)  # each batch read before the next one is asked for
    kept_loader = make_loader(world, num_workers)
    kept_loader.set_epoch(1)
    kept = list(kept_loader)
    assert len(kept) == len(want) > 0
    assert [key(batch) for batch in kept] == want, "a kept batch was overwritten by a later one"


def tensors_of(batch: Any) -> list[Any]:
    """Every tensor in ``batch`` (a tensor, a tuple or list, a dict, a NamedTuple)."""
    import torch

    if isinstance(batch, torch.Tensor):
        return [batch]
    if isinstance(batch, dict):
        return [t for v in batch.values() for t in tensors_of(v)]
    if isinstance(batch, (tuple, list)):
        return [t for v in batch for t in tensors_of(v)]
    return []


def assert_batches_independent(
    make_loader: MakeLoader, world: World, num_workers: int, key: Callable[[Any], list[Any]]
) -> None:
    """A batch the caller changes in place (``y[y == eos] = -100``) changes no other batch:
    each batch's keys, taken as it comes while every earlier batch was zeroed, are the keys
    of a run where none was touched (and the same at any ``num_workers``)."""
    clean = make_loader(world, num_workers)
    clean.set_epoch(1)
    want = batches_of(clean, key)
    touched = make_loader(world, num_workers)
    touched.set_epoch(1)
    got = []
    for batch in touched:
        got.append(key(batch))
        for tensor in tensors_of(batch):
            tensor.zero_()  # the caller's own, to change
    assert len(got) == len(want) > 0
    changed = [i for i, (a, b) in enumerate(zip(got, want)) if a != b]
    assert not changed, f"batches {changed[:5]} changed by an in-place edit of an earlier one"


def assert_exact_partition(
    make_loader: MakeLoader,
    world_size: int,
    num_workers: int,
    n: int,
    key: Callable[[Any], list[Any]],
    drop_last: bool = False,
    readers: int | None = None,
) -> None:
    """Ranks get disjoint shares (up to padding), together complete, with equal batch counts.

    ``readers`` (default: ``world_size``) is how many equal shares the loader cuts: padding
    repeats fewer than that many items, truncation leaves fewer out.
    """
    readers = readers or world_size
    per_rank = []
    for rank in range(world_size):
        loader = make_loader(World(rank=rank, world_size=world_size), num_workers)
        loader.set_epoch(0)
        per_rank.append(batches_of(loader, key))
    counts = {len(b) for b in per_rank}
    assert len(counts) == 1, f"ranks yield different batch counts: {[len(b) for b in per_rank]}"
    seen = Counter(s for batches in per_rank for batch in batches for s in batch)
    assert set(seen) <= set(range(n)), f"unknown samples: {set(seen) - set(range(n))}"
    if drop_last:
        assert all(c == 1 for c in seen.values()), "a sample was seen twice with drop_last"
        assert len(seen) >= n - readers * max(1, len(per_rank[0][0]) if per_rank[0] else 1)
    else:
        assert set(seen) == set(range(n)), f"missing samples: {set(range(n)) - set(seen)}"
        assert sum(seen.values()) - n < readers, "more repeats than padding explains"


def assert_resumes(
    make_loader: MakeLoader,
    world: World,
    num_workers: int,
    midpoint: int,
    key: Callable[[Any], list[Any]],
    epoch: int = 0,
) -> None:
    """A loader restored from the state after ``midpoint`` batches yields exactly the rest."""
    reference = make_loader(world, num_workers)
    reference.set_epoch(epoch)
    full = batches_of(reference, key)
    first = make_loader(world, num_workers)
    first.set_epoch(epoch)
    head = []
    for batch in first:
        head.append(key(batch))
        if len(head) == midpoint:
            break
    state = first.state_dict()
    resumed = make_loader(world, num_workers)
    resumed.load_state_dict(state)
    # the rest of the epoch: remaining() batches (none when the midpoint ended the epoch; the
    # loader would then read the next epoch, as assert_reiterates checks)
    assert head + batches_of(resumed, key, resumed.remaining()) == full


def assert_elastic(
    make_loader: MakeLoader,
    old_world: int,
    new_world: int,
    num_workers: int,
    midpoint: int,
    n: int,
    key: Callable[[Any], list[Any]],
    max_repeats: int,
    epoch: int = 0,
) -> None:
    """Checkpointed after ``midpoint`` batches at ``old_world`` ranks and resumed at
    ``new_world``: every sample is read, at most ``max_repeats`` reads are repeats (padding),
    and the new ranks take equal batch counts."""
    seen: Counter[Any] = Counter()
    states = []
    for rank in range(old_world):
        loader = make_loader(World(rank=rank, world_size=old_world), num_workers)
        loader.set_epoch(epoch)
        taken = 0
        for batch in loader:
            seen.update(key(batch))
            taken += 1
            if taken == midpoint:
                break
        assert taken == midpoint, "midpoint past the end of the epoch"
        states.append(loader.state_dict())
    assert all(s == states[0] for s in states), "ranks saved different loader states"
    counts = []
    for rank in range(new_world):
        loader = make_loader(World(rank=rank, world_size=new_world), num_workers)
        loader.load_state_dict(states[rank % old_world])
        rest = batches_of(loader, key, loader.remaining())
        counts.append(len(rest))
        for batch in rest:
            seen.update(batch)
    assert len(set(counts)) == 1, f"resumed ranks yield different batch counts: {counts}"
    missing = set(range(n)) - set(seen)
    assert not missing, f"{len(missing)} samples never read after the resume: {sorted(missing)[:9]}"
    assert set(seen) <= set(range(n))
    repeats = sum(seen.values()) - n
    assert repeats <= max_repeats, f"{repeats} repeated reads, padding explains {max_repeats}"


def assert_reiterates(
    make_loader: MakeLoader, world: World, num_workers: int, key: Callable[[Any], list[Any]]
) -> None:
    """Iterating a loader again reads the next epoch, as a DataLoader does: three passes over
    one loader are epochs 0, 1 and 2 (each what a fresh loader set to that epoch reads),
    ``len()`` is the epoch's length before and after a pass, and a state saved after a whole
    epoch loads to the next epoch (torchdata's StatefulDataLoader does the same)."""
    loader = make_loader(world, num_workers)
    first = len(loader)
    passes = [batches_of(loader, key) for _ in range(3)]
    for epoch, got in enumerate(passes):
        fresh = make_loader(world, num_workers)
        fresh.set_epoch(epoch)
        assert got == batches_of(fresh, key), f"pass {epoch} is not epoch {epoch}"
    assert first == len(passes[0]) > 0
    fourth = make_loader(world, num_workers)
    fourth.set_epoch(3)
    assert len(loader) == len(fourth), "len() between passes is not the coming epoch's"
    assert loader.epoch == 2
    resumed = make_loader(world, num_workers)
    resumed.load_state_dict(loader.state_dict())
    after = make_loader(world, num_workers)
    after.set_epoch(3)
    assert batches_of(resumed, key) == batches_of(after, key)


def assert_every_pass_starts_an_epoch(
    make_loader: MakeLoader, world: World, num_workers: int, key: Callable[[Any], list[Any]]
) -> None:
    """Every ``iter()`` starts an epoch, as a DataLoader's and a StatefulDataLoader's do: after
    a peek (``next(iter(loader))``), a ``break``, or a pass of exactly ``len()`` batches that
    never saw the end, the next pass is the next epoch, whole; ``len()`` between passes is
    that pass's. The one exception is the first pass after ``load_state_dict``, which resumes
    (then the next is the next epoch again)."""
    epochs = []
    for epoch in range(6):
        fresh = make_loader(world, num_workers)
        fresh.set_epoch(epoch)
        epochs.append(batches_of(fresh, key))
    loader = make_loader(world, num_workers)
    assert key(next(iter(loader))) == epochs[0][0]  # a peek
    assert len(loader) == len(epochs[1])
    assert batches_of(loader, key) == epochs[1]
    for taken, _ in enumerate(loader, 1):  # a break after 2 batches of epoch 2
        if taken == 2:
            break
    state = loader.state_dict()
    assert (state["epoch"], state["batches"]) == (2, 2)
    assert len(loader) == len(epochs[3])
    assert batches_of(loader, key, len(loader)) == epochs[3]  # exactly len(): no StopIteration
    assert batches_of(loader, key) == epochs[4]
    resumed = make_loader(world, num_workers)
    resumed.load_state_dict(state)
    assert len(resumed) == len(epochs[2])  # the resumed pass's epoch, read and left
    assert batches_of(resumed, key) == epochs[2][2:]  # the first pass resumes
    assert batches_of(resumed, key) == epochs[3]  # and the next is the next epoch


def assert_set_epoch_then_a_peek(
    make_loader: MakeLoader, world: World, num_workers: int, key: Callable[[Any], list[Any]]
) -> None:
    """``set_epoch(e)`` then a peek trains epoch ``e``, as a DataLoader over a
    DistributedSampler does: a pass abandoned after its first batch (a peek, held or dropped,
    or a ``break`` there) does not consume the epoch ``set_epoch`` chose: the next pass reads
    it from its first batch; a pass that reads past its first batch does (the next
    pass is the next epoch, as in :func:`assert_every_pass_starts_an_epoch`). The peek's batch
    counts in a state taken after it, as any batch received does."""
    epochs = []
    for epoch in range(4):
        fresh = make_loader(world, num_workers)
        fresh.set_epoch(epoch)
        epochs.append(batches_of(fresh, key))
    loader = make_loader(world, num_workers)
    for epoch in range(2):  # the loop: set_epoch(e); next(iter(loader)); for ...
        loader.set_epoch(epoch)
        assert key(next(iter(loader))) == epochs[epoch][0]
        # a state taken now counts the batch received (a checkpoint resumes after it)
        assert (loader.epoch, loader.state_dict()["batches"]) == (epoch, 1)
        assert len(loader) == len(epochs[epoch])
        assert batches_of(loader, key) == epochs[epoch], f"epoch {epoch} was not trained"
    loader.set_epoch(2)
    held = iter(loader)  # a peek still held while the pass runs
    assert key(next(held)) == epochs[2][0]
    assert key(next(iter(loader))) == epochs[2][0]  # and a second peek
    assert batches_of(loader, key) == epochs[2]
    del held
    loader.set_epoch(2)
    for taken, _ in enumerate(loader, 1):  # a break after 2 batches consumes the epoch
        if taken == 2:
            break
    assert batches_of(loader, key) == epochs[3]
    loader.set_epoch(3)
    older = iter(loader)
    next(older)
    newer = iter(loader)  # a second peek, held while the first one is dropped: it reads on
    assert key(next(newer)) == epochs[3][0]
    del older
    assert key(next(newer)) == epochs[3][1]


def assert_epoch_end_resumes_the_next_epoch(
    make_loader: MakeLoader,
    old_world: int,
    new_world: int,
    num_workers: int,
    key: Callable[[Any], list[Any]],
    epoch: int = 1,
) -> None:
    """A state saved after an epoch read to its end and loaded on another world size goes to
    the next epoch, as the same-layout resume does: nothing of the old epoch is read again
    (with ``truncate``, not what it left out, padded to every rank)."""
    states = []
    for rank in range(old_world):
        loader = make_loader(World(rank, old_world), num_workers)
        loader.set_epoch(epoch)
        batches_of(loader, key)
        states.append(loader.state_dict())
    for rank in range(new_world):
        resumed = make_loader(World(rank, new_world), num_workers)
        resumed.load_state_dict(states[rank % old_world])
        fresh = make_loader(World(rank, new_world), num_workers)
        fresh.set_epoch(epoch + 1)
        want = batches_of(fresh, key)
        assert len(resumed) == len(want), f"rank {rank}: len() is not the next epoch's"
        assert batches_of(resumed, key) == want, f"rank {rank} did not go to epoch {epoch + 1}"
