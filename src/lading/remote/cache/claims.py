"""Claiming the gaps of a snapshot's ranges in the node cache, and starting their GETs.

A claim is one write transaction: the ranges are looked up again (another process may have
claimed them since the caller looked), the gaps left are coalesced into blocks
(:func:`lading.remote.ranges.coalesce`, never across a block another process holds), each block
is given a place (:class:`~.places.Space`: the open region's end, or a region eviction frees)
and its row inserted with this process's owner token. Once the transaction is over, the blocks
eviction carried forward are written, and the GETs start; each block is filled in by the fill
thread when its GET returns (:mod:`.fill`). No lock of this process is held across a GET.
"""

from __future__ import annotations

import bisect
import contextlib
import sqlite3
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from lading.errors import NO_SPACE, OutOfSpaceError
from lading.remote.cache.fill import Fill
from lading.remote.cache.ledger import Piece
from lading.remote.cache.node import Node
from lading.remote.cache.places import Space, bound
from lading.remote.fetch import Fetcher, Future
from lading.remote.ranges import NO_STEP, Block, Need, coalesce

Key = tuple[int, int, int]  # object id, start, end


def _no_bytes() -> bytes:  # a fill's bytes until its GET's are given (Filler.put)
    return b""


class Part(NamedTuple):
    """Bytes ``[start, end)`` of a range, and where they come from."""

    start: int
    end: int
    piece: Piece | None  # None: a gap (nobody holds these bytes)


class Claimed(NamedTuple):
    """What a claim did: GETs started (by object key), blocks left out, bytes read around,
    and the needs that had a gap (``missing``) and of those the ones left out (``late``)."""

    started: dict[str, list[tuple[int, int, Future]]]  # key -> (start, end, future)
    deferred: list[Block]  # no room (now): a prefetch retries, a read reads around
    bypassed: int  # bytes of the blocks read around the cache (kept by nobody)
    missing: list[Need]
    late: list[Need]


class Claims:
    """Claims gaps of one snapshot's objects in ``node`` and fetches them with ``fetcher``
    (``etags``: the snapshot's, GETs pinned to them; ``policy``: eviction's; ``max_gap``,
    ``max_waste``: coalescing's limits; a block is at most a region)."""

    def __init__(
        self,
        node: Node,
        fetcher: Fetcher,
        etags: Mapping[str, str | None],
        policy: str,
        max_gap: int,
        max_waste: float,
    ) -> None:
        self.node, self.fetcher, self.etags, self.policy = node, fetcher, etags, policy
        self.max_gap, self.max_waste = max_gap, max_waste
        self.max_block = max(1, node.layout.region_bytes)

    def claim(
        self,
        needs: Sequence[Need],
        objs: dict[str, int],
        now: int | None,
        prefetch: bool,
        around: bool = False,
        near: int | None = None,
        note: Callable[[sqlite3.Connection, list[list[Piece]]], None] | None = None,
        once: bool = False,
    ) -> Claimed:
        """Claim and fetch the gaps ``needs`` leaves (``objs``: key -> object id).
        ``prefetch``: a block may evict only regions needed later than its own step
        (``near``: with the epoch's order known, only regions with no planned use, unless
        needed within ``near`` steps); a read, regions needed after now. ``around``: claim
        nothing, read every gap around the cache. ``note``: called in the transaction with
        the blocks found for each need (a window ahead records their next uses there: one
        transaction, one lookup). ``once``: the reader reads each range once an epoch
        (documents: a deferred block retried at its step evicts as its read, and regions are
        kept in transit, :class:`.Space`); a read learns it from the ledger's orders too."""
        ledger, owner = self.node.ledger, self.node.owner.token
        self.node.check_current()
        with ledger.write() as conn:
            if not prefetch and near is None and now is not None:  # told in another process?
                once = ledger.ordered(conn, objs.values(), now)
                near = 0 if once else None
            found = ledger.overlapping(conn, [(objs[n.key], n.start, n.end) for n in needs])
            if note is not None:
                note(conn, found)
            missing, gaps = _gaps(needs, found)
            space = Space(
                conn, self.node.data, self.policy, now, self.node.owner.alive, owner, once
            )
            if prefetch and gaps and not _room(space, gaps, now, near, once):
                return Claimed({}, [], 0, missing, missing)  # full: nothing to coalesce
            waste = 0.0 if near is not None else self.max_waste  # an order known: no gap bytes
            blocks = coalesce(gaps, self.max_gap, waste, self.max_block, ledger.barrier(conn, objs))
            placed, deferred = [], []
            for n, block in enumerate([] if around else blocks):
                place = None
                if block.size <= self.max_block:
                    limit = bound(block.step, now, prefetch, near, once)
                    place = space.place(block.size, limit, block.step)
                if place is None:
                    deferred += blocks[n:] if prefetch else [block]
                    if prefetch:
                        break
                    continue
                step = None if block.step >= NO_STEP else block.step
                space.claim((objs[block.key], block.start, block.end, *place, owner, step))
                placed.append((block, place))
            space.close()
        read_around = [] if prefetch else (blocks if around else deferred)
        try:
            for carried in space.carried:  # a region's window blocks, carried to its start
                self.node.data.write(carried.region, carried.at, carried.data)
            if space.carried:
                ledger.filled(
                    [(c.object, c.start, zlib.crc32(c.data), c.unpinned) for c in space.carried],
                    owner,
                )
            started = self._start(placed, read_around, objs)
        except BaseException as e:  # refused (the fetcher closed meanwhile, a full disk):
            # the claims go, or every reader of the node would wait on them for as long as
            # this process lives (a read that meets a full disk goes on, around the cache)
            with contextlib.suppress(Exception):  # (the ledger refusing this too: as it was)
                ledger.release(
                    [(objs[b.key], b.start) for b, _ in placed]
                    + [(c.object, c.start) for c in space.carried],
                    owner,
                )
            if (
                isinstance(e, OSError)
                and not isinstance(e, OutOfSpaceError)
                and e.errno in NO_SPACE
            ):
                raise OutOfSpaceError(
                    e.errno,
                    f"{self.node.data.path.parent}: the disk under this node cache is full "
                    f"({e.strerror}); free space there, or lower cache_bytes",
                ) from e
            raise
        late = inside(missing, deferred) if prefetch else []
        left = [] if read_around else deferred
        return Claimed(started, left, sum(b.size for b in read_around), missing, late)

    def _start(
        self, placed: list[tuple[Block, tuple[int, int]]], around: list[Block], objs: dict[str, int]
    ) -> dict[str, list[tuple[int, int, Future]]]:
        """Start the GETs of claimed blocks (filled in once fetched) and of blocks read around
        the cache (kept by nobody)."""
        fetch = [b for b, _ in placed] + around
        fills = [
            Fill(objs[b.key], b.start, b.end, region, at, _no_bytes) for b, (region, at) in placed
        ]
        futures = self.fetcher.submit_many(
            [(b.key, b.start, b.end, self.etags.get(b.key)) for b in fetch],
            [
                self._filler(fill, self.etags.get(b.key) is not None)
                for (b, _), fill in zip(placed, fills)
            ],
        )
        self.node.started(
            (fill.object, block.start, block.end, future)
            for (block, _), fill, future in zip(placed, fills, futures)
        )
        started: dict[str, list[tuple[int, int, Future]]] = {}
        for block, future in zip(fetch, futures):
            started.setdefault(block.key, []).append((block.start, block.end, future))
        return started

    def _filler(self, fill: Fill, pinned: bool) -> Callable[[Future], Any]:
        """The callback that hands ``fill``'s GET to the fill thread once settled (on the
        fetch loop's thread), with when its bytes came if no ``If-Match`` vouched for them
        (``pinned``: the object has an ETag to pin; one without is never checked)."""
        put = self.node.filler.put

        def settled(future: Future) -> None:
            checked = future.checked
            came = None if checked is not None or not pinned else time.time()
            put(fill._replace(bytes_of=future.result, unpinned=came, checked=checked))

        return settled


def _gaps(needs: Sequence[Need], found: list[list[Piece]]) -> tuple[list[Need], list[Need]]:
    """The needs with a gap, and every gap (a need of its bytes, at its step)."""
    missing, gaps = [], []
    for n, pieces in zip(needs, found):
        mine = [
            Need(n.key, p.start, p.end, n.step)
            for p in cut_up((0, n.start, n.end), pieces)
            if p.piece is None
        ]
        if mine:
            missing.append(n)
            gaps += mine
    return missing, gaps


def _room(space: Space, gaps: list[Need], now: int | None, near: int | None, once: bool) -> bool:
    """Whether a window's block could find a place at all: the smallest gap, at the soonest
    step (the most a block may evict). When the cache is full of planned blocks, a window
    finds none, and learning so costs one ranking, not the coalescing of every gap (measured:
    a third of a planned prefetch's CPU at a 10 % cap went to gaps that found no room)."""
    step = min(g.step for g in gaps)
    limit = bound(step, now, True, near, once)
    return space.room(min(g.end - g.start for g in gaps), limit, step)


def cut_up(k: Key, pieces: list[Piece]) -> list[Part]:
    """``[start, end)`` of ``k`` cut into the blocks that hold it and the gaps between."""
    _, start, end = k
    if end <= start:
        return []
    if not pieces:  # (most: a cold range, or one block holding it)
        return [Part(start, end, None)]
    if len(pieces) == 1 and pieces[0].start <= start and end <= pieces[0].end:
        return [Part(start, end, pieces[0])]
    out, at = [], start
    for piece in pieces:
        if piece.start > at:
            out.append(Part(at, min(piece.start, end), None))
        lo, hi = max(at, piece.start), min(end, piece.end)
        if hi > lo:
            out.append(Part(lo, hi, piece))
        at = max(at, hi)
    if at < end:
        out.append(Part(at, end, None))
    return out


def inside(needs: list[Need], blocks: list[Block]) -> list[Need]:
    """The ``needs`` that overlap one of ``blocks`` (left for a later call). Blocks of one
    object are disjoint (coalesced gaps): one binary search a need."""
    starts: dict[str, list[int]] = {}
    ends: dict[str, list[int]] = {}
    for block in sorted(blocks, key=lambda b: (b.key, b.start)):
        starts.setdefault(block.key, []).append(block.start)
        ends.setdefault(block.key, []).append(block.end)
    out = []
    for n in needs:
        at = bisect.bisect_left(starts.get(n.key, ()), n.end) - 1  # the last block before end
        if at >= 0 and ends[n.key][at] > n.start:
            out.append(n)
    return out
