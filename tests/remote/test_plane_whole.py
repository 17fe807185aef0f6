"""Blocks fetched whole (:mod:`lading.remote.whole`): which stretches of an object a plan
reads nearly all of, whether the node's cap holds them beside a region, and what a read's
window fetches for them (each block once a plan)."""

from __future__ import annotations

import random
from types import SimpleNamespace

import numpy as np

from lading.remote.ranges import Need
from lading.remote.whole import PER_REGION, ObjectReads, WholeBlocks, covered


def _brute(starts: list[int], ends: list[int], length: int, size: int, waste: float) -> list[bool]:
    """``covered`` byte by byte."""
    seen = np.zeros(length, dtype=bool)
    for a, b in zip(starts, ends):
        seen[a:b] = True
    out = []
    for lo in range(0, length, size):
        hi = min(length, lo + size)
        out.append(bool(seen[lo:hi].sum() * (1 + waste) >= hi - lo))
    return out


def test_covered_agrees_with_counting_byte_by_byte(rng: random.Random) -> None:
    """Random reads (overlapping, touching, past the end) over random lengths and blocks:
    the numpy answer is the byte count's."""
    for _ in range(300):
        length = rng.randrange(1, 400)
        size = rng.randrange(1, 60)
        n = rng.randrange(1, 30)
        starts = [rng.randrange(0, length) for _ in range(n)]
        ends = [a + rng.randrange(1, 80) for a in starts]
        waste = rng.choice([0.0, 0.1, 0.5])
        got = covered(np.array(starts), np.array(ends), length, size, waste).tolist()
        assert got == _brute(starts, ends, length, size, waste), (length, size, starts, ends)


def _cache(cap: int, region: int, node: object) -> SimpleNamespace:
    return SimpleNamespace(cap=cap, max_block=region, node=node)


def _reads(key: str, length: int, cache: SimpleNamespace, step: int = 8) -> ObjectReads:
    """Reads of ``step`` bytes each, covering ``[0, length)``."""
    starts = np.arange(0, length, step, dtype=np.int64)
    return ObjectReads(key, length, 2, starts, np.minimum(starts + step, length), cache)


def test_blocks_are_chosen_only_where_the_node_holds_the_objects_beside_a_region() -> None:
    """An object of 1,000 bytes in regions of 160 (blocks of 40): chosen at a cap of 1,280
    (1,000 + 160 fit), none at 1,120; two objects on one node count together, on two nodes
    apart; an object larger than the cap has none chosen even where its reads would fit."""
    node = object()
    fits = WholeBlocks()
    fits.plan([_reads("a", 1000, _cache(1280, 160, node))])
    assert fits.chosen("a") == 1000 // (160 // PER_REGION)
    tight = WholeBlocks()
    tight.plan([_reads("a", 1000, _cache(1120, 160, node))])
    assert tight.chosen("a") == 0
    two = WholeBlocks()
    cache = _cache(1280, 160, node)
    two.plan([_reads("a", 600, cache), _reads("b", 600, cache)])
    assert two.chosen("a") == two.chosen("b") == 0
    apart = WholeBlocks()
    apart.plan([_reads("a", 600, cache), _reads("b", 600, _cache(1280, 160, object()))])
    assert apart.chosen("a") == apart.chosen("b") == 600 // 40
    part = WholeBlocks()
    few = _reads("a", 200, cache)
    part.plan([few._replace(length=5000)])
    assert part.chosen("a") == 0


def test_a_block_read_in_part_is_not_fetched_whole() -> None:
    """Reads covering half of each block: no block is chosen (fetched whole, each would cost
    twice the bytes read); the reads' needs are their own ranges."""
    starts = np.arange(0, 1000, 40, dtype=np.int64)
    whole = WholeBlocks()
    whole.plan([ObjectReads("a", 1000, 2, starts, starts + 20, _cache(4000, 160, object()))])
    assert whole.chosen("a") == 0
    assert whole.needs("a", 40, 60, 3) == [Need("a", 40, 60, 3)]


def test_a_reads_window_asks_each_chosen_block_once_a_plan() -> None:
    """A read across two blocks asks for both, whole; a later read inside them asks for
    nothing; a new plan asks again; the object's short last block ends at its end."""
    whole = WholeBlocks()
    cache = _cache(2000, 160, object())
    whole.plan([_reads("a", 1010, cache)])
    assert whole.needs("a", 30, 50, 1) == [Need("a", 0, 40, 1), Need("a", 40, 80, 1)]
    assert whole.needs("a", 44, 52, 2) == []
    assert whole.needs("a", 1004, 1010, 3) == [Need("a", 1000, 1010, 3)]
    whole.plan([_reads("a", 1010, cache)])
    assert whole.needs("a", 44, 52, 4) == [Need("a", 40, 80, 4)]
    assert whole.planned() == [("a", 44, 52)]


def test_the_reads_turned_into_blocks_are_handed_back_once() -> None:
    """:meth:`WholeBlocks.planned` lists each read whose needs are not its own range (to be
    counted as announced), once; a read of a block not chosen is not listed."""
    whole = WholeBlocks()
    starts = np.arange(0, 1000, 8, dtype=np.int64)
    ends = np.where(starts < 500, starts + 8, starts + 2)  # the upper half read in part
    whole.plan([ObjectReads("a", 1000, 2, starts, ends, _cache(4000, 160, object()))])
    whole.needs("a", 0, 8, 1)
    whole.needs("a", 8, 16, 1)
    whole.needs("a", 800, 802, 2)
    assert whole.planned() == [("a", 0, 8), ("a", 8, 16)]
    assert whole.planned() == []
