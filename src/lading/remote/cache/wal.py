"""The ledger's WAL kept within its allowance: checkpoints before writes, transactions sized.

Every page a write transaction dirties goes to the WAL as one frame at its commit, and only a
checkpoint gives the WAL's bytes back, so the WAL's size on disk is bounded by two rules:

- **Checkpoint before a transaction**, under the write lock, once the WAL holds half its
  allowance (:meth:`WalGuard.begin`); a writer that finds another connection checkpointing
  waits for it rather than writing past it.
- **No transaction dirties more than the other half** (:func:`.footprint.txn_pages`): claims,
  evictions, uses and fills go a transaction's worth at a time, sized by the pages a row was
  measured to take (:meth:`WalGuard.end` learns it from the WAL's growth).

Measured before (sampled every 0.2 ms while reads and prefetches ran, cap 0.8 MB, allowance
100 KB): the WAL at 0.29-0.94 MB, the files at 0.87-1.5 MB; after: the WAL at most 98 KB.
The process's threads (reads, the fill thread) take turns on one lock here, not on SQLite's
busy handler, which sleeps 1, 2, 5, 10 ... ms a try.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from pathlib import Path

from lading.remote.cache.footprint import (
    DISK_FLOOR,
    FRAME,
    ROW_PAGES,
    TXN_PAGES,
    txn_pages,
    wal_allowance,
)

_POLL_S = 0.001  # a writer waiting for another connection's checkpoint looks again after
_MOST_PAGES = 24.0  # pages a row takes at most (another process's frames can add to a look)
_CHECKPOINT_WAIT_S = 30.0  # ... this long at most (a reader that holds a snapshot so long)


class WalGuard:
    """The WAL of the ledger at ``path`` under a cache of ``cap`` bytes (one per process)."""

    def __init__(self, path: Path, cap: int) -> None:
        self.wal = path.with_name(path.name + "-wal")
        self.cap = cap
        self.bounded = cap >= DISK_FLOOR  # the WAL within its allowance (below: SQLite's own)
        self.half = wal_allowance(cap) // 2  # a checkpoint before a transaction from here
        self.row_pages = float(ROW_PAGES)  # WAL pages a row written takes (learnt: end())
        self._lock, self._pid = threading.Lock(), os.getpid()
        self._local = threading.local()  # this thread's transaction: WAL bytes at its start, rows

    def _writing(self) -> threading.Lock:
        if self._pid != os.getpid():  # a forked child: the parent's holder is not here
            self._lock, self._pid = threading.Lock(), os.getpid()
        return self._lock

    def size(self) -> int:
        """The WAL's bytes on disk now."""
        try:
            return self.wal.stat().st_size
        except OSError:
            return 0

    def begin(self, conn: sqlite3.Connection) -> None:
        """BEGIN IMMEDIATE on ``conn``, the WAL checkpointed first when it holds half its
        allowance: looked at under the write lock, so no other writer adds to it between the
        look and this transaction (was: a check after each commit, outside the lock: two
        transactions could land before either checkpointed). A checkpoint another connection
        runs meanwhile is waited for, not written past: it holds SQLite's checkpoint lock while
        it waits for the write lock, so a writer that went on would keep it waiting and the WAL
        would grow (seen: 0.94 MB against 100 KB, the fill thread's checkpoint starved)."""
        lock = self._writing()
        lock.acquire()
        try:
            conn.execute("BEGIN IMMEDIATE")
            wal = self.size() if self.bounded else 0
            deadline = time.monotonic() + _CHECKPOINT_WAIT_S
            while self.bounded and wal > self.half and time.monotonic() < deadline:
                conn.execute("ROLLBACK")  # (past the deadline: a reader held a snapshot so long)
                if conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]:  # busy
                    time.sleep(_POLL_S)
                conn.execute("BEGIN IMMEDIATE")
                wal = self.size()
            self._local.wal, self._local.rows = wal, 0
        except BaseException:
            lock.release()
            raise

    def end(self, committed: bool) -> None:
        """Release the process's write lock; learn the WAL pages a row took (from the WAL's
        growth less :data:`.footprint.TXN_PAGES`, high where another writer added to it
        meanwhile), down by a twentieth a transaction at most, so a transaction of many rows
        keeps within :func:`txn_pages` (a transaction's pages per row, without the fixed
        part, read 7-9 for transactions of one or two rows: they got smaller and smaller)."""
        try:
            rows = self.rows_spent()
            if committed and rows and self.bounded:
                grown = ((self.size() - self._local.wal) / FRAME - TXN_PAGES) / rows
                if grown > 0:
                    self.row_pages = min(_MOST_PAGES, max(1.0, grown, self.row_pages * 0.95))
        finally:
            self._writing().release()

    def trim(self, conn: sqlite3.Connection, threshold: int | None = None) -> None:
        """Checkpoint and truncate the WAL when it holds more than ``threshold`` bytes (half
        its allowance when None), from :data:`DISK_FLOOR` up (below, SQLite's own checkpoints
        every few pages); a checkpoint that finds readers or another checkpoint in the way
        gives up (the next writer's :meth:`begin` sees to the bound)."""
        if self.bounded and self.size() > (self.half if threshold is None else threshold):
            with self._writing():  # not while this process's other thread writes
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def spent(self, rows: int) -> None:
        """Count ``rows`` rows written or deleted (a claim, a drop, a use) in this thread's
        write transaction: its WAL growth per row sizes the next transactions."""
        self._local.rows = getattr(self._local, "rows", 0) + rows

    def rows_spent(self) -> int:
        """Rows counted (:meth:`spent`) in this thread's write transaction so far."""
        return int(getattr(self._local, "rows", 0))

    @property
    def ride(self) -> int:
        """Pending uses that go along with a write transaction: a quarter of its pages."""
        return max(1, int((txn_pages(self.cap) - TXN_PAGES) / 4 / self.row_pages))

    @property
    def own_pages(self) -> int:
        """Pages a write transaction's rows may dirty besides the uses that ride along (and
        the pages any transaction dirties: :data:`.footprint.TXN_PAGES`)."""
        rest = txn_pages(self.cap) - TXN_PAGES - int(self.ride * self.row_pages)
        return max(2 * ROW_PAGES, rest)

    def row_budget(self, riders: bool = True) -> int:
        """Rows (claims, evictions, uses) a write transaction may hold (``riders``: besides
        the uses that ride along)."""
        pages = self.own_pages if riders else txn_pages(self.cap) - TXN_PAGES
        return max(1, int(pages / self.row_pages))
