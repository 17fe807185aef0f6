"""The planner and Runs: shares disjoint, complete, equal; remainders exact (property-tested)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lading.loading.plan import plan_shares
from lading.loading.runs import Runs
from lading.world import World


@given(
    n=st.integers(0, 400),
    readers=st.integers(1, 9),
    interleave=st.booleans(),
    equalize=st.sampled_from(["pad", "truncate"]),
)
def test_plan_gives_equal_shares_disjoint_up_to_padding(
    n: int, readers: int, interleave: bool, equalize: str
) -> None:
    p = plan_shares(n, readers, equalize, interleave=interleave)
    shares = [p.positions(r).positions() for r in range(readers)]
    assert {len(s) for s in shares} == {p.each}
    seen = Counter(np.concatenate(shares).tolist())
    if equalize == "pad":
        assert set(seen) == set(range(n))  # complete
        assert sum(seen.values()) - n == p.each * readers - n < readers  # only padding repeats
    else:
        assert all(c == 1 for c in seen.values())  # disjoint
        assert len(seen) == n - n % readers
    if interleave and n:  # the first k of every share are together the first k * readers
        k = p.each // 2
        firsts = sorted(x for s in shares for x in s[:k].tolist())
        assert firsts == sorted(np.arange(k * readers) % n)


@given(
    n=st.integers(0, 300),
    readers=st.integers(1, 7),
    interleave=st.booleans(),
    equalize=st.sampled_from(["pad", "truncate"]),
    data=st.data(),
)
def test_unread_is_exactly_what_no_reader_served(
    n: int, readers: int, interleave: bool, equalize: str, data: st.DataObject
) -> None:
    p = plan_shares(n, readers, equalize, interleave=interleave)
    served = [
        Runs.of_positions(sorted(data.draw(st.sets(st.integers(0, max(0, p.each - 1))))))
        if p.each
        else Runs([], [])
        for _ in range(readers)
    ]
    read = set()
    for r, done in enumerate(served):
        read |= {int(x) % n for x in p.share(r).within(done).positions()} if n else set()
    left = p.unread(served).positions().tolist()
    assert left == sorted(set(range(n)) - read)


def test_bad_arguments_say_what_is_valid() -> None:
    with pytest.raises(ValueError, match=r"reader 3 outside \[0, 3\)"):
        plan_shares(5, 3).share(3)
    with pytest.raises(ValueError, match="unknown equalize 'even'"):
        plan_shares(5, 2, "even")
    with pytest.raises(ValueError, match="readers must be >= 1"):
        plan_shares(5, 0)
    assert plan_shares(0, 2).positions(1).positions().tolist() == []
    assert (
        plan_shares(1, 3, "truncate", resumed=True).each == 1
    )  # a resumed epoch loses no position


def test_runs_wrap_minus_and_sorted() -> None:
    assert Runs([8], [13]).wrap(10).positions().tolist() == [8, 9, 0, 1, 2]
    assert Runs([0], [25]).wrap(10).positions().tolist() == [*range(10), *range(10), *range(5)]
    whole = Runs.whole(12)
    assert whole.minus(Runs([9, 2], [11, 5])).positions().tolist() == [0, 1, 5, 6, 7, 8, 11]
    assert Runs([7, 1], [9, 3]).sorted().positions().tolist() == [1, 2, 7, 8]
    assert Runs.from_dict(Runs([3], [5]).to_dict()) == Runs([3], [5])


def test_world_from_torchrun_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {
        "RANK": "5",
        "WORLD_SIZE": "8",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "4",
    }.items():
        monkeypatch.setenv(name, value)
    world = World.detect()
    assert (world.rank, world.world_size, world.local_rank, world.local_world_size) == (5, 8, 1, 4)
    assert (world.worker_id, world.num_workers) == (0, 1)
    assert world.with_worker(2, 3).global_worker == 5 * 3 + 2
    assert world.with_worker(2, 3).total_workers == 24


def test_world_defaults_to_a_single_process(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    assert World.detect() == World()
    with pytest.raises(ValueError, match=r"rank 2 outside \[0, 2\)"):
        World(rank=2, world_size=2)


def test_world_sees_the_dataloader_worker() -> None:
    import torch.utils.data as tud

    class Probe(tud.IterableDataset[tuple[int, int]]):
        def __iter__(self):  # type: ignore[no-untyped-def]
            world = World.detect()
            yield world.worker_id, world.num_workers

    got = sorted(tuple(x) for x in tud.DataLoader(Probe(), batch_size=None, num_workers=2))
    assert got == [(0, 2), (1, 2)]


@settings(max_examples=200, deadline=None)
@given(
    runs=st.lists(st.tuples(st.integers(0, 50), st.integers(0, 8)), max_size=6),
    lo=st.integers(0, 60),
    width=st.integers(0, 60),
    picks=st.lists(st.integers(0, 59), max_size=10),
)
def test_runs_slice_and_within_match_the_listed_positions(
    runs: list[tuple[int, int]], lo: int, width: int, picks: list[int]
) -> None:
    seq = Runs([a for a, _ in runs], [a + n for a, n in runs])
    listed = np.concatenate([np.arange(a, a + n) for a, n in runs] or [np.zeros(0, np.int64)])
    assert len(seq) == len(listed)
    assert np.array_equal(seq.slice(lo, lo + width).positions(), listed[lo : lo + width])
    picks = [p for p in picks if p < len(listed)]
    inner = Runs.of_positions(picks)
    assert np.array_equal(inner.positions(), np.array(picks, dtype=np.int64))
    assert np.array_equal(seq.within(inner).positions(), listed[picks])
