"""Where a claimed block goes: the open region's end, a free region, or one eviction frees.

Blocks are appended to the one open region. When it is full, a free region is opened; when
none is free, eviction frees a whole region, chosen by the policy from every full region's
blocks in one query a claim transaction:

- ``"next-use"`` (Belady's rule at region grain, on what the plans told the ledger): the
  blocks a region holds that are needed inside the window (the next :data:`WINDOW` steps,
  what is being fetched ahead) are carried forward if it goes; a region with no planned use
  and nothing inside the window goes first (the oldest), then the region of least value, each
  block's bytes over the steps until its use, the window's blocks counted (a region just
  filled by the window is worth the most, not the least). A region goes only for a block needed
  sooner than that use (a read: anything needed after now, with the epoch's order known
  nothing needed this epoch; a prefetch: after its own step), but for a reader of each range
  once an epoch (documents), while fewer than :data:`TRANSIT` of the regions are free or hold
  no use beyond the window, the least valuable region needed only beyond it goes too: the
  batch read and the window need room of their own.
- ``"fifo"``: the region filled longest ago, whatever the plans say (Mosaic's and litdata's
  caches keep whole shards by recency; this is that baseline, for comparison).

A region with a block still being fetched by a live process is never taken; a dead owner's
claims are dropped. Carried blocks are copied into memory, the region's generation raised
(a reader that copied from it meanwhile reads again) and its blocks re-claimed at its start
by this process: their bytes are written once the transaction is over, as a fetch's are.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from lading.remote.cache.ledger import FULL, INSERT_CLAIMS, OPEN
from lading.remote.cache.regions import DataFile
from lading.remote.ranges import NO_STEP

WINDOW = 16  # steps ahead whose blocks eviction carries forward (the look-ahead: 2 x 8 batches)
TRANSIT = 0.125  # of the regions (2 at least) in transit: the window's and the batch's blocks
POLICIES = ("fifo", "next-use")

RANK = (
    "SELECT r.id, r.sealed, min(CASE WHEN b.next_use >= ?2 THEN b.next_use END),"
    " total(CASE WHEN b.next_use > ?1 THEN (b.end - b.start) * 1.0 / (b.next_use - ?1) END),"
    " total(CASE WHEN b.owner IS NULL AND b.next_use >= ?1 AND b.next_use < ?2"
    " THEN b.end - b.start END), group_concat(DISTINCT b.owner)"
    " FROM regions AS r LEFT JOIN blocks AS b ON b.region = r.id WHERE r.state >= ?3"
    " GROUP BY r.id"
)
CARRIED = "owner IS NULL AND next_use >= ?2 AND next_use < ?3"


class Candidate(NamedTuple):
    """A full region as eviction sees it."""

    region: int
    sealed: float
    soonest: int  # the soonest planned use beyond the window (NO_STEP: none)
    value: float  # its blocks' bytes, each over the steps until its use (the window's too)
    carry: int  # bytes of the blocks needed inside the window
    owners: tuple[str, ...]  # owners of its blocks still being fetched


class Carried(NamedTuple):
    """A block carried forward: its new place and bytes (written after the transaction)."""

    object: int
    start: int
    region: int
    at: int
    data: bytes
    unpinned: float | None  # its row's: a block confirmed or not stays so where it goes


def policy_check(name: str) -> str:
    """``name`` if it is a policy.

    Raises:
        ValueError: an unknown name, listing the known ones.
    """
    if name not in POLICIES:
        raise ValueError(f"unknown eviction policy {name!r}; choose from {list(POLICIES)}")
    return name


class Space:
    """The regions as one claim transaction sees them (``now``: the claimer's step)."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        data: DataFile,
        policy: str,
        now: int | None,
        alive: Callable[[str], bool],
        owner: str,
        once: bool = False,
    ) -> None:
        self.conn, self.data, self.policy, self.alive, self.owner = conn, data, policy, alive, owner
        self.once = once  # the reader reads each range once an epoch: regions kept in transit
        self.now = -1 if now is None else now
        self.horizon = self.now + WINDOW if policy == "next-use" and now is not None else self.now
        self.size = data.layout.region_bytes
        found = conn.execute("SELECT id, used FROM regions WHERE state = ?", (OPEN,)).fetchone()
        self._open: list[int] | None = None if found is None else [found[0], found[1]]
        self._ranked: list[Candidate] | None = None
        self.carried: list[Carried] = []
        self._claims: list[tuple[Any, ...]] = []  # rows claimed, not yet inserted
        self._freed = 0  # regions evicted in this transaction (out of the ranking, in transit)

    def place(self, size: int, bound: int, step: int = -1) -> tuple[int, int] | None:
        """A place for ``size`` bytes (``<= region_bytes``): ``(region, at)``, or None when no
        region may be evicted for a block needed at ``step`` whose need ``bound`` names (see
        the module doc)."""
        if self._open is not None and self._open[1] + size <= self.size:
            return self._take(size)
        if self._open is not None:
            self.conn.execute(
                "UPDATE regions SET state = ?, sealed = ?, used = ? WHERE id = ?",
                (FULL, time.time(), self._open[1], self._open[0]),
            )
            self._open = None
        free = self.conn.execute("SELECT id FROM regions WHERE state = 0 LIMIT 1").fetchone()
        if free is not None:
            self._open = [free[0], 0]
        elif not self._evict(size, bound, step):
            return None
        self.conn.execute("UPDATE regions SET state = ? WHERE id = ?", (OPEN, self._open[0]))  # type: ignore[index]
        return self._take(size)

    def room(self, size: int, bound: int, step: int = -1) -> bool:
        """Whether :meth:`place` would find ``size`` bytes a place for ``bound``, asked before
        any :meth:`place` of the transaction with the smallest size it places; changes
        nothing but the ranking, made as :meth:`place` would make it: only when the open
        region cannot take ``size``, so the first block sealed it before any was put in it
        (a ranking made before this transaction's claims must not hold a region with them)."""
        if self._open is not None and self._open[1] + size <= self.size:
            return True
        if self.conn.execute("SELECT 1 FROM regions WHERE state = 0 LIMIT 1").fetchone():
            return True
        ranked = self._ranking()
        if any(self._may_evict(c, size, bound) for c in ranked):
            return True
        limit = max(self.horizon, step)
        return self._short(bound) and any(self._may_evict(c, size, limit) for c in ranked)

    def claim(self, row: tuple[Any, ...]) -> None:
        """A block placed: its ledger row ``(object, start, end, region, at, owner, next
        use)``, inserted with the others before eviction ranks the regions (it must see that
        a region holds a live owner's claim: a region sealed and evicted in one transaction
        once gave two blocks one place) or at :meth:`close` (one statement, not one a block)."""
        self._claims.append(row)

    def _insert(self) -> None:
        if self._claims:
            self.conn.executemany(INSERT_CLAIMS, self._claims)
            self._claims = []

    def close(self) -> None:
        """Insert the claims and record the open region's bytes used (at the transaction's
        end)."""
        self._insert()
        if self._open is not None:
            self.conn.execute("UPDATE regions SET used = ? WHERE id = ?", self._open[::-1])

    def _take(self, size: int) -> tuple[int, int]:
        assert self._open is not None
        at = self._open[1]
        self._open[1] += size
        return self._open[0], at

    def _ranking(self) -> list[Candidate]:
        """Every region that is not free, as eviction ranks them, once a transaction. The
        open region, if not sealed yet (:meth:`room` asked first), ranks as sealed now, as
        :meth:`place` seals it before it evicts."""
        if self._ranked is None:
            self._insert()
            rows = self.conn.execute(RANK, (self.now, self.horizon, OPEN)).fetchall()
            found = [_candidate(row) for row in rows]
            if self._open is not None:
                sealing, now = self._open[0], time.time()
                found = [c._replace(sealed=now) if c.region == sealing else c for c in found]
            if self.policy == "fifo":
                found.sort(key=lambda c: c.sealed)
            else:  # no use left first (oldest), then the least value, window blocks in it
                found.sort(key=lambda c: (c.soonest != NO_STEP or c.carry > 0, c.value, c.sealed))
            self._ranked = found
        return self._ranked

    def _evict(self, size: int, bound: int, step: int) -> bool:
        """Free the first region the policy gives up for a block needing ``size`` bytes and
        a victim's soonest use later than ``bound``; it becomes the open region. With too few
        regions in transit (:meth:`_short`), one needed only beyond the window and after the
        block's own ``step`` may go."""
        ranked = self._ranking()
        for limit in (bound, max(self.horizon, step)):
            for i, c in enumerate(ranked):
                if not self._may_evict(c, size, limit):
                    continue
                del ranked[i]
                self._free(c.region)
                self._freed += 1
                return True
            if not self._short(bound):  # asked only when the policy's own rule found none
                return False
        return False

    def _short(self, bound: int) -> bool:
        """Whether fewer than :data:`TRANSIT` of the regions are free or hold no planned use
        beyond the window, for a ``bound`` that keeps planned regions (a read or a window
        with the epoch's order known): the blocks in transit, the batch read and the window
        fetched ahead, need regions of their own. At a cap full of the next epoch's blocks
        (an epoch ends so) none is, and none would be until one is read through: measured at
        a 10 % cap of 1M passages, the window then found no room and epoch 2 took 1.75x
        epoch 1's time. Evicting the least valuable regions until there are (2 of 16) starts
        the cycle; evicting one for whatever block found no room (as reads and the window's
        retries once did) gave up 5 of 16 regions of the next epoch's blocks at a 0.5 % cap,
        0.60x Belady's hits."""
        if not self.once or self.policy != "next-use" or bound <= self.horizon:
            return False
        free = self.conn.execute("SELECT count(*) FROM regions WHERE state = 0").fetchone()[0]
        transit = free + self._freed + sum(c.soonest == NO_STEP for c in self._ranking())
        return transit < max(2, int(self.data.layout.regions * TRANSIT))

    def _may_evict(self, c: Candidate, size: int, bound: int) -> bool:
        """Whether ``c`` may go for a block of ``size`` bytes needed by ``bound``."""
        if self.policy == "next-use" and c.soonest <= bound:
            return False  # needed sooner than the block that wants the room
        return c.carry + size <= self.size and not any(self.alive(o) for o in c.owners)

    def _free(self, region: int) -> None:
        """Empty ``region`` (its generation raised), keeping its window's blocks at its start."""
        conn, window = self.conn, (region, self.now, self.horizon)
        keep = conn.execute(
            "SELECT object, start, end, at, next_use, unpinned FROM blocks WHERE region = ?1 AND"
            f" {CARRIED} ORDER BY at",
            window,
        ).fetchall()
        datas = [bytes(self.data.view(region, at, end - start)) for _, start, end, at, *_ in keep]
        conn.execute("DELETE FROM blocks WHERE region = ?", (region,))
        conn.execute("UPDATE regions SET gen = gen + 1, used = 0 WHERE id = ?", (region,))
        self._open = [region, 0]
        rows = []
        for (obj, start, end, _, step, unpinned), data in zip(keep, datas):
            _, at = self._take(end - start)
            rows.append((obj, start, end, region, at, self.owner, step))
            self.carried.append(Carried(obj, start, region, at, data, unpinned))
        conn.executemany(INSERT_CLAIMS, rows)


def _candidate(row: tuple[Any, ...]) -> Candidate:
    region, sealed, soon, value, carry, owners = row
    soonest = NO_STEP if soon is None else soon
    held = tuple(owners.split(",")) if owners else ()
    return Candidate(region, sealed, soonest, value, int(carry), held)


def bound(step: int, now: int | None, prefetch: bool, near: int | None, once: bool = False) -> int:
    """The soonest use a region must be needed after to be evicted for a block needed at
    ``step`` (``now``: the step being read). A read, and for a reader of each range once an
    epoch (``once``) a prefetch of the step being read (what the window deferred, tried again
    at its step), evicts anything needed after now, with the epoch's order known (``near``
    not None) anything not needed this epoch; a prefetch ahead anything needed after its
    block; with the order known, a prefetch more than ``near`` steps ahead evicts only regions
    with no planned use: evicting a planned block early decides on what is known now, not at
    the read (measured, a 16-batch window that did kept 0.6x the optimum's hits).
    :meth:`Space.place` may go further while too few regions are in transit."""
    clock = -1 if now is None else now
    if not prefetch or (step <= clock and once):  # a read, or its own prefetch: with
        # an order known, nothing needed this epoch (steps: lading.step)
        return clock if near is None else ((clock >> 32) + 1 << 32) - 1
    if near is not None and step - clock > near:
        return NO_STEP - 1
    return step
