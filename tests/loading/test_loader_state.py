"""The one loader state: one schema for every loader, checked in one place on load."""

from __future__ import annotations

import json
from typing import Any

import pytest

from contracts import Numbers
from lading.loading.map_workload import loader
from lading.loading.runs import Runs
from lading.loading.state import STATE_VERSION, Cursor, LoaderStateError, restore, state_dict
from lading.world import World


def unended(layout: Any, cursor: Cursor) -> bool:
    """A saved position short of its segment's end (an elastic resume reads what is left)."""
    return False


def test_a_state_is_json_and_says_where_the_loader_is() -> None:
    data = loader(Numbers(40), 4, seed=1, world=World(0, 2))
    data.set_epoch(3)
    for _ in zip(range(2), data):
        pass
    state = data.state_dict()
    assert json.loads(json.dumps(state)) == state  # no pickle: JSON through and through
    assert state["version"] == STATE_VERSION and state["kind"] == "map"
    assert (state["epoch"], state["segment"], state["batches"], state["base"]) == (3, 0, 2, None)
    assert state["consumed"] == 2 * 4 * 2  # batches x batch size x ranks
    assert state["layout"] == {"world_size": 2, "batch_size": 4}
    assert state["fingerprint"]["n"] == 40 and state["fingerprint"]["seed"] == 1


def test_states_of_another_kind_version_or_data_are_refused_by_name() -> None:
    fingerprint = {"n": 10, "seed": 0}
    saved = state_dict("map", Cursor(), {"world_size": 1}, fingerprint)

    def unread(layout: Any, cursor: Cursor) -> Runs:
        raise AssertionError("not an elastic resume")

    with pytest.raises(LoaderStateError, match="of a 'map' loader, this one is 'parquet'"):
        restore(saved, "parquet", {"world_size": 1}, fingerprint, unread, unended)
    with pytest.raises(LoaderStateError, match="n=10, this loader 11"):
        restore(saved, "map", {"world_size": 1}, {"n": 11, "seed": 0}, unread, unended)
    old = {"version": 1, "epoch": 0, "batches_done": 3}  # what lading.loader saved before
    with pytest.raises(LoaderStateError, match="version 1"):
        restore(old, "map", {"world_size": 1}, fingerprint, unread, unended)
    assert issubclass(LoaderStateError, ValueError)


def test_same_layout_skips_and_another_layout_starts_a_segment_of_what_is_left() -> None:
    cursor = Cursor(epoch=2, segment=0, base=None, batches=5)
    saved = state_dict("map", cursor, {"world_size": 2}, {})
    same = restore(saved, "map", {"world_size": 2}, {}, lambda layout, c: Runs([], []), unended)
    assert (same.epoch, same.segment, same.base, same.batches) == (2, 0, None, 5)
    seen: list[Any] = []

    def unread(layout: Any, c: Cursor) -> Runs:
        seen.append((layout, c.batches))
        return Runs([7], [9])

    other = restore(saved, "map", {"world_size": 3}, {}, unread, unended)
    assert seen == [({"world_size": 2}, 5)]  # asked with the saved layout and position
    assert (other.epoch, other.segment, other.batches) == (2, 1, 0)
    assert other.base == Runs([7], [9])


def test_a_state_at_the_end_of_its_epoch_resumes_the_next_epoch_on_another_layout() -> None:
    """The issue's example: 13 items under truncate, every rank of 4 reads epoch 1 to its end
    in batches of 3, and 5 ranks in batches of 2 load the state: they read epoch 2, as a
    fresh loader set to it does (not the item truncate left out, padded to all five)."""
    import lading

    def made(world_size: int, rank: int, batch_size: int) -> Any:
        return lading.loader(
            list(range(13)), batch_size=batch_size, seed=5, equalize="truncate",
            world=World(rank, world_size), collate_fn=list,
        )  # fmt: skip

    olds = [made(4, r, 3) for r in range(4)]
    for old in olds:
        old.set_epoch(1)
        list(old)
    for rank in range(5):
        resumed, fresh = made(5, rank, 2), made(5, rank, 2)
        resumed.load_state_dict(olds[rank % 4].state_dict())
        fresh.set_epoch(2)
        assert list(resumed) == list(fresh)


def test_restore_at_the_end_of_a_segment_starts_an_empty_one_on_another_layout() -> None:
    """What the saved layout read to its end leaves nothing of its epoch for another: the
    new segment reads no position, whatever ``unread`` holds (truncate's leftovers)."""
    cursor = Cursor(epoch=2, segment=0, base=None, batches=3)
    saved = state_dict("map", cursor, {"world_size": 2}, {})
    asked: list[Any] = []

    def ended(layout: Any, c: Cursor) -> bool:
        asked.append((layout, c.batches))
        return True

    other = restore(saved, "map", {"world_size": 3}, {}, lambda layout, c: Runs([7], [9]), ended)
    assert asked == [({"world_size": 2}, 3)]
    assert (other.epoch, other.segment, other.batches) == (2, 1, 0)
    assert other.base == Runs([], [])


def test_a_state_saved_at_the_last_batch_then_set_to_its_own_epoch_reads_nothing_more() -> None:
    """A hand-written loop checkpoints inside its body (``{"epoch": e, "loader": state}``) and
    is stopped right after the last batch of epoch 0. Resumed, the loop calls ``set_epoch(0)``:
    that epoch has no batch left, so the pass is empty and ``set_epoch(1)`` reads epoch 1 once
    (it read epoch 1 under the loop's epoch 0, then again: 16 batches trained twice)."""
    import lading

    def made() -> Any:
        return lading.loader(list(range(24)), batch_size=4, seed=3, collate_fn=list)

    straight, interrupted = made(), made()
    reference = []
    for epoch in range(3):
        straight.set_epoch(epoch)
        reference += [(epoch, b) for b in straight]
    interrupted.set_epoch(0)
    saved = None
    for step, _ in enumerate(interrupted):
        if step == len(interrupted) - 1:
            saved = {"epoch": 0, "loader": interrupted.state_dict()}
    assert saved is not None
    resumed = made()
    resumed.load_state_dict(saved["loader"])
    got = [(0, b) for epoch, b in reference if epoch == 0]
    for epoch in range(saved["epoch"], 3):
        resumed.set_epoch(epoch)
        got += [(epoch, b) for b in resumed]
    assert got == reference


def test_a_state_past_its_epochs_end_is_refused_as_damaged() -> None:
    """A state whose ``batches`` is past its epoch's last batch on its own layout is no state
    a loader saves (a damaged or edited checkpoint): refused, naming the count and the
    epoch's (was: loaded, and the next pass read the next epoch: the rest of the saved one
    skipped without a word). A state at the epoch's last batch resumes the next epoch."""
    import lading

    def made() -> Any:
        return lading.loader(list(range(20)), 4, collate_fn=list, world=World(0, 2))

    old = made()
    old.set_epoch(2)
    next(iter(old))
    state = old.state_dict()
    assert len(old) == 3
    for batches in (4, 999):
        with pytest.raises(LoaderStateError, match=rf"batches={batches}.* 3 batches") as e:
            made().load_state_dict({**state, "batches": batches})
        assert "damaged" in str(e.value) and "\n" not in str(e.value)
    at_end = made()
    at_end.load_state_dict({**state, "batches": 3})
    assert at_end.remaining() == 0
    next(iter(at_end))
    assert at_end.epoch == 3
    elastic = lading.loader(list(range(20)), 4, collate_fn=list, world=World(0, 1))
    elastic.load_state_dict({**state, "batches": 3})  # another layout: planned anew, as before
    assert elastic.position().segment == 1
