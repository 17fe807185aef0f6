"""The node cache's shared state: one SQLite file that every process on the node opens.

Why SQLite and not a file per block: a block is often one passage (~350 bytes) and a file
takes at least one 4 KiB filesystem block, so a byte cap on files would hold a twelfth of
what it says, or the disk would hold twelve times the cap. SQLite packs small blobs densely,
its transactions make "claim this range, evict those" atomic across processes (WAL: readers
never wait for the writer), and with ``mmap_size`` its pages are read through one shared map
of the page cache. A process killed mid-fetch leaves a claim whose owner is dead; the next
process that wants that range takes it over.

Tables: ``objects`` (name -> id: one row per object of a store snapshot), ``blocks`` (a
fetched range: object, start, end, size, ready, owner pid, next planned use, last use time,
uses), ``payload`` (block id -> bytes, kept apart so the eviction scans stay small) and
``settings`` (cap, bytes claimed). Blocks of an object never overlap (the planner never merges
across a cached block), so the block holding a range is the last one starting at or before it.

The byte cap is hard: ``used`` (bytes of every block, fetched or claimed, each charged
:data:`BLOCK_COST` more for its rows in the tables and indexes) never exceeds the block budget,
checked in the same transaction that claims. From :data:`DISK_FLOOR` up, the budget is the cap
less what the files need besides the blocks (the WAL's allowance, the ``-shm`` map, the
schema), so every byte of the ledger's files on disk stays within the cap: the WAL is
checkpointed before any write transaction once it holds half its allowance and no transaction
adds more than the other half (:mod:`.wal`), pages are 1 KiB (a WAL frame is a whole page:
4 KiB pages logged ~6 KiB for each 350-byte passage), and the block budget is scaled by the
file's measured bytes per byte charged, bytes claimed but not yet filled counted as pages to
come (freed pages are reused, never given back: vacuuming moved so many pages that the WAL
grew 6x). Measured before: the WAL at 32.9 MiB beside 6.7 MiB of blocks, the files 4.3-8x
the cap at small caps.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from lading.remote.cache import damaged
from lading.remote.cache.claims import claim_blocks, pid_alive
from lading.remote.cache.evict import policy as eviction_policy
from lading.remote.cache.footprint import (
    block_cost,
    configure,
    fill_pages,
)
from lading.remote.cache.queries import (
    FIND,
    SCHEMA,
    SCHEMA_VERSION,
    Claimed,
    Found,
    Transaction,
    batched,
    read_slice,
)
from lading.remote.cache.uses import PendingUses
from lading.remote.cache.wal import WalGuard
from lading.remote.ranges import Block

LEDGER_FILE = "ledger.sqlite"


class Ledger:
    """One process's handle on the node's ledger in ``directory`` (a connection per thread).

    Args:
        directory: the cache directory (created).
        cap: the byte cap of the node's cache; the latest opener's value is the node's.
        policy: the eviction policy's name (:mod:`lading.remote.cache.evict`).
    """

    def __init__(self, directory: str | os.PathLike[str], cap: int, policy: str = "next-use"):
        if cap < 0:
            raise ValueError(f"cache_bytes={cap}: need >= 0 (0 caches nothing)")
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / LEDGER_FILE
        self.cap = cap
        self.policy_name = policy
        self.policy = eviction_policy(policy)
        self.wal = WalGuard(self.path, cap)  # the WAL's bound (:mod:`.wal`)
        self._local = threading.local()
        self._objects: dict[str, int] = {}
        self._uses = PendingUses()  # the reads' uses, written with the next transaction
        try:
            self._open_checked()
        except sqlite3.DatabaseError as e:  # the cache is disposable: start a new one
            old, self._local.conn = getattr(self._local, "conn", None), None
            if old is not None:
                old.close()
            damaged.set_aside(self.path, e)
            self._open_checked()

    def _open_checked(self) -> None:
        """Open the ledger (made if absent), checked for damage (:mod:`.damaged`)."""
        damaged.check_header(self.path)
        with self.write() as conn:
            conn.execute("INSERT OR REPLACE INTO settings VALUES ('cap', ?)", (self.cap,))
            self._reclaim_dead(conn)
            conn.execute(  # bytes claimed, not yet filled (:func:`.footprint.current_budget`)
                "INSERT OR REPLACE INTO settings SELECT 'pending', total(size) FROM blocks"
                " WHERE ready = 0"
            )
        damaged.check_contents(self.connection(), self.path)

    def connection(self) -> sqlite3.Connection:
        """This thread's connection (opened after a fork too: a connection is not shared)."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None or getattr(self._local, "pid", None) != os.getpid():
            conn = sqlite3.connect(self.path, timeout=120.0, isolation_level=None)
            configure(conn, self.cap)
            if conn.execute("PRAGMA user_version").fetchone()[0] != SCHEMA_VERSION:
                conn.execute("BEGIN IMMEDIATE")
                conn.executescript(SCHEMA)  # commits
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            self._local.conn, self._local.pid = conn, os.getpid()
        return conn

    def write(self) -> Transaction:
        """``with ledger.write() as conn:`` one write transaction (others wait for it), which
        may dirty ``self.wal.own_pages`` pages; the WAL is checkpointed before it when it
        holds half its allowance (:mod:`.wal`), the reads' pending uses go in first
        (:meth:`touch`; more than may ride along go first, a transaction's worth at a time)."""
        conn, wal = self.connection(), self.wal
        while len(self._uses) > wal.ride:
            with Transaction(conn, wal.begin, wal.end, self._riders(wal.row_budget(False))):
                pass
        return Transaction(conn, wal.begin, wal.end, self._riders(wal.ride))

    def _riders(self, rows: int) -> Callable[[sqlite3.Connection], None]:
        return lambda conn: self.wal.spent(self._uses.write(conn, rows))

    def read(self) -> Transaction:
        """``with ledger.read() as conn:`` one snapshot: a block deleted meanwhile stays
        readable until the transaction ends (WAL)."""
        return Transaction(self.connection(), "BEGIN")

    def object_id(self, name: str) -> int:
        """The id of object ``name`` (``<store>/<snapshot>/<file>``), made on first use."""
        found = self._objects.get(name)
        if found is None:
            with self.write() as conn:
                conn.execute("INSERT OR IGNORE INTO objects (name) VALUES (?)", (name,))
                row = conn.execute("SELECT id FROM objects WHERE name = ?", (name,)).fetchone()
            found = self._objects[name] = int(row[0])
        return found

    @staticmethod
    def find_many(
        conn: sqlite3.Connection, keys: Sequence[tuple[int, int, int]]
    ) -> list[Found | None]:
        """:meth:`find` for each ``(object, start, end)``, in a few queries."""
        out: list[Found | None] = [None] * len(keys)
        for i, block, start, ready, owner, data in batched(conn, FIND, keys):
            out[i] = Found(block, start, bool(ready), owner, data)
        return out

    slice = staticmethod(read_slice)  # bytes of a range from a ready block that holds it

    @staticmethod
    def occupied(conn: sqlite3.Connection, obj: int, end: int, start: int) -> bool:
        """Whether a block of ``obj`` starts inside the gap ``[end, start)``."""
        row = conn.execute(
            "SELECT 1 FROM blocks WHERE object = ? AND start >= ? AND start < ? LIMIT 1",
            (obj, end, start),
        ).fetchone()
        return row is not None

    def claim(
        self,
        blocks: Sequence[tuple[Block, int]],
        now: int | None,
        prefetch: bool,
        keep_planned: bool = False,
        near: int = 0,
        conn: sqlite3.Connection | None = None,
    ) -> Claimed:
        """Claim ``(block, object id)`` pairs, in order, for this process to fetch
        (:mod:`.claims`; ``conn``: an open write transaction the first part goes in).

        Room is made by evicting ready blocks in the policy's order, but only blocks whose next
        planned use is later than the claiming block's ``step`` (``prefetch``) or than ``now``
        (a read that needs the bytes now; ``now=None``: any block). The first block that finds
        no room (or is larger than the cap) and every later one are deferred; a block that
        overlaps one another process claimed meanwhile is returned in ``overlapping``, for the
        caller to look up again. ``keep_planned``: a prefetch evicts only blocks with no
        planned use (the whole epoch's order is known: evicting a planned block before the
        read that needs the room would decide on what is known now, not then; measured, a
        16-batch window that evicted planned blocks early kept 0.6x the optimum's hits), but
        a block needed ``near`` steps ahead or fewer makes room as its read would.
        """
        return claim_blocks(self, blocks, now, prefetch, keep_planned, near, conn)

    def trim(self, threshold: int | None = None) -> None:
        """Checkpoint the WAL from ``threshold`` bytes (:meth:`.wal.WalGuard.trim`)."""
        self.wal.trim(self.connection(), threshold)

    def fill(self, done: Iterable[tuple[int, bytes]]) -> None:
        """Store fetched bytes and mark their blocks ready (a block evicted or taken over
        meanwhile is skipped), a transaction's pages at a time; then checkpoint the WAL from
        half its allowance (on the writer thread, so the reads find it so less often; from a
        quarter, the fill thread took 0.042 ms of CPU a cold document, not 0.031)."""
        done = list(done)
        at = 0
        while at < len(done):
            part, pages = [done[at]], fill_pages(len(done[at][1]))
            for block, data in done[at + 1 :]:
                pages += fill_pages(len(data))
                if pages > self.wal.own_pages:
                    break
                part.append((block, data))
            at += len(part)
            with self.write() as conn:
                self._fill_some(conn, part)
        if done:
            self.trim()

    def _fill_some(self, conn: sqlite3.Connection, done: list[tuple[int, bytes]]) -> None:
        ids = [block for block, _ in done]
        marks = ",".join("?" * len(ids))
        (filling,) = conn.execute(
            f"SELECT total(size) FROM blocks WHERE id IN ({marks}) AND ready = 0", ids
        ).fetchone()
        # two statements for the whole batch, not two a block; the payload goes in only
        # where its claim is still there and unfilled (evicted or taken over: skipped)
        conn.executemany(
            "INSERT OR REPLACE INTO payload SELECT ?, ? WHERE EXISTS (SELECT 1 FROM blocks"
            " WHERE id = ? AND ready = 0)",
            [(block, data, block) for block, data in done],
        )
        conn.executemany(
            "UPDATE blocks SET ready = 1, owner = NULL WHERE id = ? AND ready = 0",
            [(block,) for block in ids],
        )
        conn.execute(
            "UPDATE settings SET value = max(0, value - ?) WHERE name = 'pending'", (filling,)
        )

    def release(self, blocks: Iterable[int]) -> None:
        """Give up claims (a fetch that failed): their space is free again."""
        with self.write() as conn:
            self.drop(conn, list(blocks))

    def drop(self, conn: sqlite3.Connection, blocks: list[int]) -> None:
        """Delete ``blocks`` (and their bytes) in ``conn``'s write transaction, their bytes
        charged no more."""
        if not blocks:
            return
        marks = ",".join("?" * len(blocks))
        freed, count, unfilled = conn.execute(
            f"SELECT total(size), count(*), total(size) FILTER (WHERE ready = 0) FROM blocks"
            f" WHERE id IN ({marks})",
            blocks,
        ).fetchone()
        conn.execute(f"DELETE FROM blocks WHERE id IN ({marks})", blocks)
        conn.execute(f"DELETE FROM payload WHERE id IN ({marks})", blocks)
        freed = int(freed) + count * block_cost(self.cap)
        conn.executemany(
            "UPDATE settings SET value = max(0, value - ?) WHERE name = ?",
            [(freed, "used"), (unfilled or 0, "pending")],
        )

    def touch(self, uses: Sequence[tuple[int, int | None]], now: int | None) -> None:
        """Count a use of each ``(block, next)`` read at step ``now``: its next use becomes
        ``next`` (this reader's next planned read of it, None: none known) where the one
        recorded was this read or earlier; another process's sooner use stays. Written with
        this process's next write transaction, or on its own soon (:mod:`.uses`)."""
        if uses and self._uses.add(uses, now):
            self.flush()

    def flush(self) -> None:
        """Write the uses :meth:`touch` holds (any write transaction does it first)."""
        if self._uses:
            with self.write():
                pass

    def update(
        self,
        sql: str,
        rows: Sequence[tuple[int | None, ...]],
        conn: sqlite3.Connection | None = None,
    ) -> Sequence[tuple[int | None, ...]]:
        """``executemany(sql, rows)`` (one row a block: :data:`.uses.PLAN`, :data:`.uses.SET`),
        a transaction's pages at a time; given ``conn`` (an open write transaction), only what
        fits in it, returning the rest (else nothing)."""
        wal = self.wal
        if conn is not None:
            fit = max(1, wal.row_budget() - wal.rows_spent())
            conn.executemany(sql, rows[:fit])
            wal.spent(len(rows[:fit]))
            return rows[fit:]  # for the caller, once its transaction ended
        while rows:
            with self.write() as own:
                part, rows = rows[: wal.row_budget()], rows[wal.row_budget() :]
                own.executemany(sql, part)
                wal.spent(len(part))
        return ()

    def state(self, block: int) -> tuple[bool, int | None] | None:
        """``(ready, owner pid)`` of a block, or None when it is gone."""
        with self.read() as conn:
            row = conn.execute("SELECT ready, owner FROM blocks WHERE id = ?", (block,)).fetchone()
        return None if row is None else (bool(row[0]), row[1])

    def take_over(self, block: int, owner: int) -> None:
        """Drop a claim whose owner died before filling it."""
        with self.write() as conn:
            row = conn.execute("SELECT owner FROM blocks WHERE id = ? AND ready = 0", (block,))
            if (found := row.fetchone()) is not None and found[0] == owner:
                self.drop(conn, [block])

    def _reclaim_dead(self, conn: sqlite3.Connection) -> None:
        rows = conn.execute("SELECT id, owner FROM blocks WHERE ready = 0").fetchall()
        self.drop(conn, [block for block, owner in rows if not pid_alive(owner)])

    @staticmethod
    def _used(conn: sqlite3.Connection) -> int:
        return int(conn.execute("SELECT value FROM settings WHERE name = 'used'").fetchone()[0])

    def usage(self) -> tuple[int, int, int]:
        """``(bytes of blocks held or claimed, the cap, blocks)`` for the whole node."""
        with self.read() as conn:
            used = self._used(conn)
            cap = int(conn.execute("SELECT value FROM settings WHERE name = 'cap'").fetchone()[0])
            count = int(conn.execute("SELECT count(*) FROM blocks").fetchone()[0])
        return used, cap, count
