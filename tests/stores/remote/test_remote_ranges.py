"""The range planner: every range fetched, GETs <= ranges, the waste budget held."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lading.remote.ranges import NO_STEP, Block, Need, coalesce

needs_strategy = st.lists(
    st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 5000), st.integers(0, 400)).map(
        lambda t: Need(t[0], t[1], t[1] + t[2], t[1] % 7)
    ),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(needs=needs_strategy, gap=st.integers(0, 2000), waste=st.sampled_from([0.0, 0.25, 1.0]))
def test_blocks_hold_every_range_disjointly_within_the_waste_budget(
    needs: list[Need], gap: int, waste: float
) -> None:
    blocks = coalesce(needs, max_gap=gap, max_waste=waste)
    nonempty = [n for n in needs if n.end > n.start]
    for need in nonempty:  # each range lies wholly inside one block, needed no later than it
        holders = [b for b in blocks if b.key == need.key and b.start <= need.start < b.end]
        assert len(holders) == 1 and holders[0].end >= need.end and holders[0].step <= need.step
    for key in ("a", "b"):
        mine = sorted(b for b in blocks if b.key == key)
        assert all(x.end < y.start for x, y in itertools.pairwise(mine))  # disjoint, not touching
    covered = set()
    for need in nonempty:
        covered |= {(need.key, i) for i in range(need.start, need.end)}
    fetched = sum(b.size for b in blocks)
    assert fetched <= len(covered) * (1 + waste) + 1e-9  # the budget: bytes fetched / used
    assert len(blocks) <= len({(n.key, n.start, n.end) for n in nonempty})
    assert [b.step for b in blocks] == sorted(b.step for b in blocks)


def test_neighbours_merge_across_small_gaps_only() -> None:
    needs = [Need("t", 0, 100), Need("t", 150, 250), Need("t", 10_000, 10_100)]
    assert coalesce(needs, max_gap=40, max_waste=1.0) == [  # the first gap is 50 bytes
        Block("t", 0, 100, NO_STEP),
        Block("t", 150, 250, NO_STEP),
        Block("t", 10_000, 10_100, NO_STEP),
    ]
    assert coalesce(needs, max_gap=64, max_waste=1.0)[0] == Block("t", 0, 250, NO_STEP)
    # the same gap, but the budget (10% of 300 useful bytes = 30) is smaller than it
    assert len(coalesce(needs, max_gap=64, max_waste=0.1)) == 3


def test_smallest_gaps_are_merged_first_and_barriers_hold() -> None:
    needs = [Need("t", 0, 100), Need("t", 140, 240), Need("t", 250, 350)]  # gaps 40 and 10
    assert coalesce(needs, max_gap=64, max_waste=0.05) == [  # budget 15: only the 10-byte gap
        Block("t", 0, 100, NO_STEP),
        Block("t", 140, 350, NO_STEP),
    ]
    walls = coalesce(needs, max_gap=64, max_waste=1.0, barrier=lambda k, e, s: e == 240)
    assert walls == [Block("t", 0, 240, NO_STEP), Block("t", 250, 350, NO_STEP)]


def test_blocks_stay_under_max_block_and_go_in_step_order() -> None:
    needs = [Need("t", i * 110, i * 110 + 100, step=9 - i) for i in range(10)]
    blocks = coalesce(needs, max_gap=64, max_waste=1.0, max_block=320)
    assert all(b.size <= 320 for b in blocks) and len(blocks) == 4
    assert [b.step for b in blocks] == sorted(b.step for b in blocks)
    with pytest.raises(ValueError, match="need 0 <= start <= end"):
        coalesce([Need("t", 10, 5)])


def test_overlapping_ranges_past_max_block_become_blocks_within_it() -> None:
    # the locality shuffle's ranges are a region each and share their last token with the
    # next: merged whole, the window's first block found no place in the node cache and
    # every block behind it waited for its read (lading@blocks at a 10 % cap: 0.77x local)
    needs = [Need("t", 0, 100, 5), Need("t", 98, 198, 3), Need("t", 196, 296, 7)]
    assert coalesce(needs, max_gap=64, max_waste=1.0, max_block=120) == [
        Block("t", 0, 100, 3),  # bytes 98-99 are needed at step 3
        Block("t", 100, 198, 3),
        Block("t", 198, 296, 7),
    ]
    # a range inside a run before the last one: that run's step, not the last one's
    found = coalesce(
        [Need("t", 0, 100, 5), Need("t", 50, 150, 9), Need("t", 60, 90, 1)], max_block=120
    )
    assert found == [Block("t", 0, 100, 1), Block("t", 100, 150, 9)]
    assert coalesce([Need("t", 0, 500), Need("t", 490, 560)], max_block=120) == [
        Block("t", 0, 500, NO_STEP),  # one range larger than max_block stays whole
        Block("t", 500, 560, NO_STEP),
    ]


@settings(max_examples=200, deadline=None)
@given(needs=needs_strategy, block=st.integers(400, 1200))
def test_blocks_cover_every_range_and_stay_within_max_block(needs: list[Need], block: int) -> None:
    blocks = coalesce(needs, max_gap=64, max_waste=1.0, max_block=block)
    assert all(b.size <= block for b in blocks)  # each range is <= 400 bytes here
    for key in ("a", "b"):
        mine = sorted(b for b in blocks if b.key == key)
        assert all(x.end <= y.start for x, y in itertools.pairwise(mine))  # disjoint
        for need in (n for n in needs if n.key == key and n.end > n.start):
            held = [b for b in mine if b.start < need.end and need.start < b.end]
            assert held[0].start <= need.start and held[-1].end >= need.end  # covered,
            assert all(x.end == y.start for x, y in itertools.pairwise(held))  # no hole
            assert all(b.step <= need.step for b in held)  # needed no later than it
