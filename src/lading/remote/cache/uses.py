"""The reads' uses of cached blocks, held a moment and written with the next transaction.

A read counts a use of every block it read and sets the block's next planned use (what
eviction by next use and LRU read). One write transaction a read for this cost ~10 us a cold
document (BEGIN IMMEDIATE, the WAL's commit); so :class:`PendingUses` holds them and the
ledger writes them first in the process's next write transaction (a claim, a fill), in order
with the process's other writes, or on their own once the oldest is :data:`TOUCH_S` old or
when more are held than may ride along (a quarter of a transaction's pages: its pages all go
to the WAL, whose bytes the cap bounds; more go a transaction's worth at a time). Another
process sees a use at most that much later; this one's claims see it at once.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Sequence

TOUCH_S = 0.25  # a read's uses wait at most this long for a write transaction to go with
_MOST = 4096  # uses held at the most

# uses += 1 and last_use = now; next_use becomes the reader's next planned read where the one
# recorded was this read or earlier (None: unknown); another process's sooner use stays
TOUCH = (
    "UPDATE blocks SET uses = uses + 1, last_use = ?, next_use = CASE"
    " WHEN ? IS NULL THEN next_use WHEN next_use IS NULL OR next_use <= ? THEN ?"
    " ELSE min(next_use, coalesce(?, next_use)) END WHERE id = ?"
)

# a prefetch: block b is next used at step s, the earlier of that and the next use recorded,
# unless that one is already past (< now); rows (now, s, s, b)
PLAN = (
    "UPDATE blocks SET next_use = CASE WHEN next_use IS NULL OR next_use < ?"
    " THEN ? ELSE min(next_use, ?) END WHERE id = ?"
)
# an epoch's order: block b's next use becomes s (None: no planned use), keeping a sooner one
# not yet past (>= now: another process's plan); rows (now, s, s, s, b)
SET = (
    "UPDATE blocks SET next_use = CASE WHEN next_use >= ? AND (? IS NULL OR"
    " next_use < ?) THEN next_use ELSE ? END WHERE id = ?"
)

Row = tuple[float, int | None, int | None, int | None, int | None, int]


class PendingUses:
    """This process's uses not yet written (a forked child starts with none)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: list[Row] = []
        self._pid, self._since = os.getpid(), 0.0

    def add(self, uses: Sequence[tuple[int, int | None]], now: int | None) -> bool:
        """Hold a use of each ``(block, next)`` read at step ``now``; whether they are due
        (the oldest held :data:`TOUCH_S`, or many held)."""
        t = time.time()
        with self._lock:
            self._mine()
            if not self._rows:
                self._since = time.monotonic()
            self._rows += [(t, now, now, step, step, block) for block, step in uses]
            return len(self._rows) >= _MOST or time.monotonic() - self._since > TOUCH_S

    def __len__(self) -> int:
        return len(self._rows) if self._pid == os.getpid() else 0

    def write(self, conn: sqlite3.Connection, most: int | None = None) -> int:
        """Write what is held (the oldest ``most`` of it), in ``conn``'s open write
        transaction (a transaction's pages all go to the WAL, whose bytes the cap bounds);
        how many were written."""
        with self._lock:
            self._mine()
            if most is None or len(self._rows) <= most:
                rows, self._rows = self._rows, []
            else:
                rows, self._rows = self._rows[:most], self._rows[most:]
        if rows:
            conn.executemany(TOUCH, rows)
        return len(rows)

    def _mine(self) -> None:
        if self._pid != os.getpid():  # a forked child: the parent's uses are not its own
            self._rows, self._pid = [], os.getpid()
