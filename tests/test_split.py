"""Shares of N items across ranks and workers: disjoint, complete, equal (property-tested)."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lading.split import Runs, contiguous_range, equal_share, per_rank_count, worker_share
from lading.world import World


@given(n=st.integers(0, 500), parts=st.integers(1, 17))
def test_contiguous_ranges_tile_the_items(n: int, parts: int) -> None:
    bounds = [contiguous_range(n, parts, i) for i in range(parts)]
    assert bounds[0][0] == 0 and bounds[-1][1] == n
    assert all(a[1] == b[0] for a, b in itertools.pairwise(bounds))
    sizes = [hi - lo for lo, hi in bounds]
    assert max(sizes) - min(sizes) <= 1


@given(
    n=st.integers(1, 400),
    world=st.integers(1, 9),
    workers=st.integers(1, 4),
    seed=st.integers(0, 2**32 - 1),
)
def test_pad_gives_equal_shares_that_cover_everything(
    n: int, world: int, workers: int, seed: int
) -> None:
    order = np.random.default_rng(seed).permutation(n)
    shares = [equal_share(order, world, r, "pad") for r in range(world)]
    assert {len(s) for s in shares} == {per_rank_count(n, world, "pad")}
    seen = Counter(np.concatenate(shares).tolist())
    assert set(seen) == set(range(n))  # complete
    assert sum(c - 1 for c in seen.values()) == len(shares[0]) * world - n  # only padding repeats
    for share in shares:  # workers split a rank's share exactly
        parts = [worker_share(share, workers, w) for w in range(workers)]
        assert sorted(np.concatenate(parts).tolist()) == sorted(share.tolist())


@given(n=st.integers(0, 400), world=st.integers(1, 9), seed=st.integers(0, 2**32 - 1))
def test_drop_gives_equal_disjoint_shares(n: int, world: int, seed: int) -> None:
    order = np.random.default_rng(seed).permutation(n)
    shares = [equal_share(order, world, r, "drop") for r in range(world)]
    assert {len(s) for s in shares} == {n // world}
    flat = np.concatenate(shares).tolist()
    assert len(flat) == len(set(flat)) == n - n % world


def test_bad_arguments_say_what_is_valid() -> None:
    with pytest.raises(ValueError, match=r"part index 3 outside \[0, 3\)"):
        equal_share(np.arange(5), 3, 3)
    with pytest.raises(ValueError, match="unknown equalize mode 'even'"):
        per_rank_count(5, 2, "even")  # type: ignore[arg-type]
    assert equal_share(np.arange(0), 2, 1, "pad").tolist() == []


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
