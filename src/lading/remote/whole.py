"""Blocks fetched whole: one GET a stretch of an object that a plan reads nearly all of, where
the node cache holds every such stretch until its last read.

An epoch of LM windows reads every token of ``tokens.bin`` once, in an order that jumps all
over the file (a shuffle of windows, of documents): read as planned, that is a GET a window
(9,701 for 9,765 windows of 20M tokens, where litdata reads 8 chunks at a cache holding the
corpus: 0.08x its tokens/s, benchmarks/RESULTS.md). But a plan knows every read of its epoch
before the first: where its reads cover a block of the object (at least ``1 / (1 + waste)``
of its bytes) and the cache can hold all such blocks at once, fetching each block whole, once,
costs the same bytes (every byte of it is read this epoch) in one GET where the windows took
hundreds. The schedule of reads is unchanged: a block stays cached while a read overlapping
it is still ahead (eviction by next use), and each read is served from it.

:class:`WholeBlocks` decides this once a plan (:meth:`~WholeBlocks.plan`) and then turns a
window's needs into pieces to fetch (:meth:`~WholeBlocks.needs`): a chosen block whole, the
first time one of its reads is announced, else the range as it was. Blocks are a quarter of a
region (:data:`PER_REGION`), and blocks are chosen only on a node whose cap holds every object
the plan reads beside one region (kept for everything else: other readers' ranges, a read that
came before its block); on another node none is (reads go as planned, one range a window),
even where the reads cover a part that would fit (a loader over a few of a large corpus's
documents). The chosen blocks fit in the cap by this rule, so a loader may fetch them all
ahead at once (:data:`lading.lm.remote_reads.WHOLE_SHARE`). Reads themselves do not change:
the same bytes, from the cache.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from lading.remote.ranges import DEFAULT_WASTE, Need

PER_REGION = 4  # blocks fetched whole a region: a region's bytes / 4, aligned to the items


class ObjectReads(NamedTuple):
    """What a plan reads of one object: ``[starts, ends)`` in bytes (any order, may overlap),
    of an object of ``length`` bytes whose items are ``align`` bytes (a block's bounds are
    multiples of it), cached by ``cache`` (a :class:`~lading.remote.cache.NodeCache`)."""

    key: str
    length: int
    align: int
    starts: npt.NDArray[np.int64]
    ends: npt.NDArray[np.int64]
    cache: Any


class WholeBlocks:
    """The blocks of each object a plan fetches whole (see the module doc); one a loader's
    reads, used by the thread that plans and announces."""

    def __init__(self, waste: float = DEFAULT_WASTE) -> None:
        self.waste = waste
        # key -> block bytes, which blocks are chosen, the object's length
        self._chosen: dict[str, tuple[int, npt.NDArray[np.bool_], int]] = {}
        self._asked: set[tuple[str, int]] = set()  # blocks handed to a prefetch this plan
        self._planned: list[tuple[str, int, int]] = []  # reads asked as blocks, not yet told

    def plan(self, reads: Sequence[ObjectReads]) -> None:
        """Choose the blocks of a new plan's ``reads`` (the last plan's choice forgotten): on a
        node whose cap holds every object read beside one region, the blocks the reads cover;
        on another, none (nor is coverage computed: an argsort of the plan's reads, 0.4 s for
        the 2M windows of a 4B-token epoch)."""
        self._chosen, self._asked, self._planned = {}, set(), []
        by_node: dict[int, list[ObjectReads]] = {}
        for r in reads:
            by_node.setdefault(id(r.cache.node), []).append(r)
        for found in by_node.values():
            if not fits([r.length for r in found], found[0].cache):
                continue
            cache = found[0].cache
            for r in found:
                size = _block_bytes(cache.max_block, r.align)
                if size and len(r.starts):
                    mask = covered(r.starts, r.ends, r.length, size, self.waste)
                    self._chosen[r.key] = (size, mask, r.length)

    def chosen(self, key: str) -> int:
        """How many blocks of ``key`` the plan fetches whole (0: reads go as planned)."""
        found = self._chosen.get(key)
        return 0 if found is None else int(found[1].sum())

    def needs(self, key: str, start: int, end: int, step: int) -> list[Need]:
        """What to fetch for a read of bytes ``[start, end)`` of ``key`` at ``step``: the
        whole blocks it lies in that were chosen and not yet handed over this plan, and its
        own pieces in the others."""
        found = self._chosen.get(key)
        if found is None:
            return [Need(key, start, end, step)]
        size, mask, length = found
        out = []
        for block in range(start // size, (max(end, start + 1) - 1) // size + 1):
            lo, hi = block * size, (block + 1) * size
            if block < len(mask) and mask[block]:
                if (key, block) not in self._asked:
                    self._asked.add((key, block))
                    out.append(Need(key, lo, min(hi, length), step))
            else:
                out.append(Need(key, max(start, lo), min(end, hi), step))
        if out != [Need(key, start, end, step)]:
            self._planned.append((key, start, end))
        return out

    def planned(self) -> list[tuple[str, int, int]]:
        """The reads :meth:`needs` turned into blocks since the last call (``(key, start,
        end)``), to be counted as announced (:meth:`~lading.remote.cache.NodeCache.announced`):
        a read's figures key on its own range, not on the block fetched for it."""
        out, self._planned = self._planned, []
        return out


def fits(lengths: Sequence[int], cache: Any) -> bool:
    """Whether ``cache``'s node holds objects of ``lengths`` bytes beside one region (where
    blocks may be chosen: :meth:`WholeBlocks.plan`)."""
    return sum(lengths) + cache.max_block <= cache.cap


def covered(
    starts: npt.NDArray[np.int64],
    ends: npt.NDArray[np.int64],
    length: int,
    size: int,
    waste: float,
) -> npt.NDArray[np.bool_]:
    """For an object of ``length`` bytes cut in blocks of ``size``: whether reads ``[starts,
    ends)`` cover at least ``1 / (1 + waste)`` of each block's bytes (so that fetching it
    whole fetches at most ``1 + waste`` times the bytes read)."""
    order = np.argsort(starts, kind="stable")
    a, b = starts[order], np.minimum(ends[order], length)
    reach = np.maximum.accumulate(b)  # the union of the reads, as disjoint runs
    opens = np.concatenate([[True], a[1:] > reach[:-1]])
    run_a = a[opens]
    run_b = np.maximum.reduceat(b, np.flatnonzero(opens))
    before = np.concatenate([[0], np.cumsum(run_b - run_a)])  # bytes covered before each run
    edges = np.minimum(np.arange(0, length + size, size, dtype=np.int64), length)
    at = np.searchsorted(run_a, edges, side="right") - 1
    inside = np.clip(edges - run_a[np.maximum(at, 0)], 0, (run_b - run_a)[np.maximum(at, 0)])
    upto = np.where(at < 0, 0, before[np.maximum(at, 0)] + inside)  # covered bytes < edge
    blocks = len(edges) - 1
    have, full = np.diff(upto)[:blocks], np.diff(edges)[:blocks]
    return np.asarray(have * (1 + waste) >= full) & (full > 0)


def _block_bytes(region: int, align: int) -> int:
    """A whole block's bytes: a :data:`PER_REGION` th of a region, a multiple of ``align``."""
    return (region // PER_REGION) // align * align
