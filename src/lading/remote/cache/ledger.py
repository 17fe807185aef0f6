"""The node cache's ledger: SQLite rows of which block lives where, who fetches it, when it is
next needed. No payload: the bytes are in the regions' file (:mod:`.regions`).

Tables: ``blocks`` (one row a cached or claimed block: its object and byte range, its region and
place there, its owner while it is being fetched (``NULL``: ready), its next planned use, the
CRC32 of its bytes, and ``unpinned``: when its bytes came from a GET sent without ``If-Match``,
until a check of its object sent after then passes (``NULL``: confirmed the snapshot's; see
:mod:`lading.remote.fetch`)), ``regions`` (generation, bytes used, state: free, open for
appends, full), ``objects`` (names), ``settings`` (the cap and layout the folder was made
with), ``counters`` (the node's figures since the folder was last idle) and ``orders`` (an
object whose reader told the steps ``[first, last)`` of an epoch's order and reads each range
once an epoch: documents). Every process of the node opens the same file: claims are made in
one write transaction (SQLite's lock), so a block is fetched once a node.

Blocks are keyed by their place ``(region, at)``, looked up by ``(object, start)`` through a
unique index: a claim's blocks take neighbouring places and a fill marks them, so their rows
share B-tree pages, where keyed by object and start (random offsets) each row of a claim, of a
fill and of an evicted region dirtied a page of its own, and each dirty page is a WAL frame a
commit writes (1M passages, a 10 % cap, no plan: 10.8 KB written to the ledger a 364-byte
document, now 5.1 KB; the fill thread's CPU -15 %). A place holds one block, by construction.

Each thread has its own connection; every transaction holds :data:`lading.threads.SQLITE`
shared, so no fork copies a thread inside SQLite. The ledger keeps every connection it made,
of all its threads: :meth:`Ledger.close` (the node's last view closing) closes its caller's
and those of threads that ended, a new connection those of threads that ended (none was
closed before: 2 descriptors more each time a store was opened and closed), and a forked
child closes its parent's at once (:meth:`Ledger.forked`).

Closing any descriptor of a file drops every fcntl lock this process holds on it (POSIX), its
SQLite connections' too: another process closing its last connection then took itself for the
node's last, removed the WAL and shared memory under this one's, and this process's next
connection read "disk I/O error" (a healthy ledger set aside as damaged). So the file is
opened outside SQLite only under :func:`unconnected`, while this process has no connection
open on it (:data:`_OPEN` counts them, every connection made through :func:`connect`).

Over 400 lines, as one idea: one class, every transaction on these tables, so that which rows
a transaction touches is read in one place (the claims' choice of what to evict is
:mod:`.places`, the owners' liveness :mod:`.owners`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import sqlite3
import threading
import time
import zlib
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

from lading.errors import LadingError, OutOfSpaceError
from lading.remote.cache.folder import LEDGER_FILE
from lading.remote.cache.regions import Layout
from lading.threads import SQLITE

FORMAT = 6  # 6: blocks keyed by place; 5: unpinned fills marked; 4: a CRC32 a block; 3: none;
# 2: blocks as BLOBs (a ledger of another format is set aside: a 4's blocks may hold unpinned
# bytes no row marks)
WAL_PAGES = 256  # a checkpoint once the WAL holds this many pages (4 KiB: 1 MiB)
_BATCH = 200  # ranges a batched query (4 parameters each, far below SQLite's 32,766)
FREE, OPEN, FULL = 0, 1, 2  # a region's state

SCHEMA = """
CREATE TABLE IF NOT EXISTS settings (name TEXT PRIMARY KEY, value);
CREATE TABLE IF NOT EXISTS objects (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS regions (id INTEGER PRIMARY KEY, gen INTEGER NOT NULL,
    used INTEGER NOT NULL, state INTEGER NOT NULL, sealed REAL NOT NULL);
CREATE TABLE IF NOT EXISTS blocks (object INTEGER NOT NULL, start INTEGER NOT NULL,
    end INTEGER NOT NULL, region INTEGER NOT NULL, at INTEGER NOT NULL, owner TEXT,
    next_use INTEGER, crc INTEGER, unpinned REAL, PRIMARY KEY (region, at)) WITHOUT ROWID;
CREATE UNIQUE INDEX IF NOT EXISTS blocks_key ON blocks (object, start);
CREATE INDEX IF NOT EXISTS blocks_unpinned ON blocks (object, unpinned)
    WHERE unpinned IS NOT NULL;
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value REAL NOT NULL);
CREATE TABLE IF NOT EXISTS orders (object INTEGER PRIMARY KEY, first INTEGER NOT NULL,
    last INTEGER NOT NULL);
"""
TABLES = frozenset(re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)", SCHEMA))

# a claim: a block's row before its bytes are in (no CRC32 yet)
INSERT_CLAIMS = (
    "INSERT INTO blocks (object, start, end, region, at, owner, next_use) VALUES "
    "(?, ?, ?, ?, ?, ?, ?)"
)

# the blocks overlapping each (i, object, start, end): from the last block starting at or
# before start (it may reach into the range) to the last one starting before end
OVERLAPPING = (
    "SELECT q.column1, b.start, b.end, b.region, b.at, b.owner, r.gen, b.crc, b.unpinned FROM"
    " (VALUES"
    " {values})"
    " AS q JOIN blocks AS b ON b.object = q.column2 AND b.start >= coalesce((SELECT"
    " max(start) FROM blocks WHERE object = q.column2 AND start <= q.column3), q.column3)"
    " AND b.start < q.column4 AND b.end > q.column3 JOIN regions AS r ON r.id = b.region"
)


class Piece(NamedTuple):
    """A block overlapping a looked-up range: its bytes ``[start, end)`` of the object, its
    place (``region``, ``at``), its owner while unfilled (None: ready), its region's
    generation when looked up, the CRC32 of its bytes (None while unfilled), and when its
    bytes came from an unpinned GET (None: confirmed; see the module doc)."""

    start: int
    end: int
    region: int
    at: int
    owner: str | None
    gen: int
    crc: int | None = None
    unpinned: float | None = None


class CacheFolderResetError(LadingError, RuntimeError):
    """The cache folder's ledger or payload file is not the one this process opened: another
    process set a damaged ledger aside, or a user removed the payload file, while this one used
    it. Going on would read one folder's rows against the other's bytes (zeros, or another
    document's bytes), so the process stops using it."""


def folder_reset(directory: Path) -> CacheFolderResetError:
    """The error of a cache folder reset under this process, naming it and the fix."""
    return CacheFolderResetError(
        f"{directory}: this node cache was reset while this process used it (another process "
        "set its damaged ledger aside, or its payload file was removed); open the store or "
        "corpus again"
    )


def same_file(path: Path, inode: int) -> bool:
    """Whether ``path`` is still the file of ``inode``."""
    try:
        return os.stat(path).st_ino == inode
    except OSError:
        return False


# This process's open SQLite connections by ledger file (its real path); the lock guards the
# counts and is held over a read of the file outside SQLite (:func:`unconnected`). Taken only
# under SQLITE shared (no fork lands while it is held).
_FILES = threading.Lock()
_OPEN: Counter[str] = Counter()


def connect(path: Path, **options: Any) -> sqlite3.Connection:
    """``sqlite3.connect(path, **options)``, counted open on ``path`` until :func:`closed`."""
    key = os.path.realpath(path)
    with _FILES:
        _OPEN[key] += 1
    try:
        return sqlite3.connect(path, **options)
    except BaseException:
        _uncount(key)
        raise


def closed(path: Path, conn: sqlite3.Connection) -> None:
    """Close ``conn``, a connection :func:`connect` made on ``path``."""
    try:
        conn.close()
    finally:
        _uncount(os.path.realpath(path))


def _uncount(key: str) -> None:
    with _FILES:
        _OPEN[key] -= 1
        if _OPEN[key] <= 0:
            del _OPEN[key]


@contextmanager
def unconnected(path: Path) -> Iterator[bool]:
    """``with unconnected(path) as alone:`` whether this process has no connection open on
    ``path`` (a forked child counts its parent's, carried); while the body runs none is made,
    so a body that opens and closes the file outside SQLite when ``alone`` drops no
    connection's locks (the module doc). The body is brief: every new connection waits."""
    with _FILES:
        yield _OPEN[os.path.realpath(path)] == 0


class CacheSettingsError(LadingError, ValueError):
    """A cache folder made with other settings than those asked for (a cap, a layout)."""


class Ledger:
    """One process's handle on the ledger of cache folder ``directory`` (see the module doc).

    Args:
        directory: the cache folder (made by the caller).
        layout: the regions of the payload file (a folder made before keeps its own; a
            ``strict`` caller that asked for another is refused, naming both and the fix).
        strict: the cap was asked for (not a default): another folder's cap is an error.
    """

    def __init__(self, directory: Path, layout: Layout, strict: bool = True) -> None:
        self.path = directory / LEDGER_FILE
        self._local = threading.local()
        self._lock = threading.Lock()  # guards _conns; never held across I/O
        self._conns: list[tuple[threading.Thread, sqlite3.Connection]] = []  # every thread's
        self.inode: int | None = None  # the file this process opened (known once made)
        try:
            with self.write() as conn:
                for statement in SCHEMA.split(";")[:-1]:  # (executescript would commit first)
                    conn.execute(statement)
                found = dict(conn.execute("SELECT name, value FROM settings").fetchall())
                if not found:
                    _init(conn, layout)
                    found = dict(conn.execute("SELECT name, value FROM settings").fetchall())
            if found.get("format") != FORMAT:
                raise sqlite3.DatabaseError(f"ledger format {found.get('format')!r}, not {FORMAT}")
            made = Layout(int(found["regions"]), int(found["region_bytes"]))
            if strict and made != layout:
                self.refuse(directory, made, layout)
        except BaseException:
            self.close()
            raise
        self.layout = made
        self.created = float(found.get("created", 0.0))
        self.inode = os.stat(self.path).st_ino  # a new connection opens this file, or none

    @staticmethod
    def refuse(directory: Path, made: Layout, asked: Layout, here: bool = False) -> None:
        """Raise the error of a folder made with another cap than ``asked``, saying who uses
        it now (``here``: this process has it open), so the fix offered is one that works: a
        build or an ``inspect`` made the folder at the default cap and ended, and the training
        run after it was told to "delete this one when no process uses it"."""
        from lading.remote.cache.owners import Owner

        head = (
            f"{directory}: this node cache was made with cache_bytes={made.size:,} "
            f"({made.regions} regions of {made.region_bytes:,} bytes), not the {asked.size:,} "
            "asked for now"
        )
        if here or Owner(directory).others_alive():
            who = "this process" if here else "another process"
            raise CacheSettingsError(
                f"{head}, and {who} uses it at that cap; every process sharing a cache folder "
                f"uses one cap: pass cache_bytes={made.size} (or none: the folder's), or use "
                "another cache folder"
            )
        raise CacheSettingsError(
            f"{head}; no process uses it now (whatever made it, a build or an inspect at the "
            f"default cap, has ended): remove it (rm -r {directory}) to make it at the new "
            f"cap, pass cache_bytes={made.size}, or use another cache folder"
        )

    # -- connections and transactions -------------------------------------------------------

    def connection(self) -> sqlite3.Connection:
        """This thread's connection (a forked child's threads make their own), kept in the
        ledger's list too; a new one closes those of ended threads (a loader's read-ahead
        thread is one a pass: a connection each, else kept until :meth:`close`). Made with
        ``check_same_thread=False`` so that :meth:`close` and this may close another thread's:
        one that ended cannot close its own, and one still running must not keep the file
        open past the node; only its own thread uses it until then."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            if self.inode is not None and not same_file(self.path, self.inode):  # set aside: the
                raise folder_reset(self.path.parent)  # new file's rows name other bytes
            conn = connect(self.path, timeout=120.0, isolation_level=None, check_same_thread=False)
            with self._lock:
                ended = [c for t, c in self._conns if not t.is_alive()]
                self._conns = [(t, c) for t, c in self._conns if t.is_alive()]
                self._conns.append((threading.current_thread(), conn))
            self._local.conn = conn
            for old in ended:
                closed(self.path, old)
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")  # a lost cache is refetched
            conn.execute(f"PRAGMA wal_autocheckpoint = {WAL_PAGES}")  # the WAL: ~1 MiB at most
            conn.execute(f"PRAGMA journal_size_limit = {WAL_PAGES * 4096}")  # and at rest
        return conn

    def close(self) -> None:
        """Close this thread's connection and those of threads that ended (the node closing;
        a thread that uses the ledger later makes a new one). A live thread's is left to it:
        closed from here while its transaction ran, the process crashed (CPython's close
        clears the handle the other thread's step reads next: a review's fill thread waiting
        on another process's write lock, SIGSEGV); it is dropped with the ledger, on the
        thread that held it last."""
        here = threading.current_thread()
        with self._lock:
            ours = [(t, c) for t, c in self._conns if t is here or not t.is_alive()]
            self._conns = [(t, c) for t, c in self._conns if t is not here and t.is_alive()]
            self._local = threading.local()
        with SQLITE.shared():
            for _, conn in ours:
                closed(self.path, conn)

    def forked(self) -> None:
        """In a forked child (one thread; none was inside SQLite at the fork,
        :data:`lading.threads.SQLITE`): the parent's connections are closed here. Kept open,
        SQLite's per-process lock records said this process held the file, so the child's
        own connections took no lock of their own: once the parent's closed, another
        process's last close removed the WAL under the child, whose writes were lost (a
        review's repro). Closed here, the child's copies release nothing of the parent's
        (its locks are its own, not inherited by the child)."""
        conns, self._conns = self._conns, []
        self._local = threading.local()
        self._lock = threading.Lock()
        for _, conn in conns:
            with contextlib.suppress(sqlite3.Error):
                closed(self.path, conn)

    def trim(self) -> None:
        """Truncate the WAL once it holds twice its checkpoint size and no reader needs it
        (SQLite's own checkpoints are passive: with readers always about, the WAL grew to
        3.5 MB under load, every row update writing its 4 KiB pages). Tried by the fill
        thread after each transaction; gives up at once when busy."""
        try:
            size = self.path.with_name(self.path.name + "-wal").stat().st_size
        except OSError:
            return
        if size > 2 * WAL_PAGES * 4096:
            with SQLITE.shared():
                conn = self.connection()
                conn.execute("PRAGMA busy_timeout = 20")
                try:
                    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                finally:
                    conn.execute("PRAGMA busy_timeout = 120000")

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """``with ledger.read() as conn:`` one snapshot of the ledger."""
        with self._transaction("BEGIN") as conn:
            yield conn

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """``with ledger.write() as conn:`` one write transaction (the node's writers wait)."""
        with self._transaction("BEGIN IMMEDIATE") as conn:
            yield conn

    @contextmanager
    def _transaction(self, begin: str) -> Iterator[sqlite3.Connection]:
        with SQLITE.shared(), self._full():
            conn = self.connection()
            conn.execute(begin)
            try:
                yield conn
            except BaseException:
                if conn.in_transaction:  # SQLite ended it itself on some errors (a full disk)
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    @contextmanager
    def _full(self) -> Iterator[None]:
        """SQLite's "database or disk is full" as one line naming the folder and the fix
        (it was a bare ``sqlite3.OperationalError``, and at open the ledger was set aside as
        damaged)."""
        try:
            yield
        except sqlite3.OperationalError as e:
            if "full" not in str(e):
                raise
            folder = self.path.parent
            raise OutOfSpaceError(
                errno.ENOSPC,
                f"{folder}: the disk under this node cache is full (SQLite: {e}); free space "
                "there, or point cache= (or $LADING_CACHE) at a disk with room, or lower "
                "cache_bytes and index_bytes",
            ) from None

    # -- lookups ---------------------------------------------------------------------------

    def object_id(self, name: str) -> int:
        """The id of object ``name`` (``<url>@<snapshot>/<file>``), made on first use."""
        with self.write() as conn:
            conn.execute("INSERT OR IGNORE INTO objects (name) VALUES (?)", (name,))
            return int(conn.execute("SELECT id FROM objects WHERE name = ?", (name,)).fetchone()[0])

    @staticmethod
    def overlapping(
        conn: sqlite3.Connection, ranges: Sequence[tuple[int, int, int]]
    ) -> list[list[Piece]]:
        """The blocks overlapping each ``(object, start, end)``, by start, in a few queries."""
        out: list[list[Piece]] = [[] for _ in ranges]
        for lo in range(0, len(ranges), _BATCH):
            part = ranges[lo : lo + _BATCH]
            values = ",".join(["(?, ?, ?, ?)"] * len(part))
            args = [x for i, r in enumerate(part, lo) for x in (i, *r)]
            for i, *piece in conn.execute(OVERLAPPING.format(values=values), args):
                out[i].append(Piece(*piece))
        for pieces in out:
            pieces.sort()
        return out

    @staticmethod
    def blocks_of(conn: sqlite3.Connection, objects: Sequence[int]) -> list[tuple[int, int, int]]:
        """``(object, start, end)`` of every block of ``objects``, in statements of
        :data:`_BATCH` objects (a plan over more parquet files or shards than SQLite takes
        parameters raised "too many SQL variables")."""
        out: list[tuple[int, int, int]] = []
        for lo in range(0, len(objects), _BATCH):
            part = objects[lo : lo + _BATCH]
            marks = ",".join("?" * len(part))
            sql = f"SELECT object, start, end FROM blocks WHERE object IN ({marks})"
            out += conn.execute(sql, part).fetchall()
        return out

    @staticmethod
    def generations(conn: sqlite3.Connection, regions: Iterable[int]) -> dict[int, int]:
        """Each region's generation now."""
        wanted = sorted(set(regions))
        marks = ",".join("?" * len(wanted))
        rows = conn.execute(f"SELECT id, gen FROM regions WHERE id IN ({marks})", wanted)
        return dict(rows.fetchall())

    @staticmethod
    def barrier(conn: sqlite3.Connection, objs: dict[str, int]) -> Callable[[str, int, int], bool]:
        """Whether a block lies in a gap ``[end, start)`` between two gaps of object ``key``
        (coalescing may not merge across it; ``objs``: key -> object id). Blocks are
        disjoint and the gaps hold none, so one in between starts there: one look along the
        primary key."""

        def occupied(key: str, end: int, start: int) -> bool:
            row = conn.execute(
                "SELECT 1 FROM blocks WHERE object = ? AND start >= ? AND start < ? LIMIT 1",
                (objs[key], end, start),
            ).fetchone()
            return row is not None

        return occupied

    # -- what the node's processes write ---------------------------------------------------

    @staticmethod
    def insert(conn: sqlite3.Connection, rows: Sequence[tuple[Any, ...]]) -> None:
        """Claims: ``(object, start, end, region, at, owner, next_use)`` rows."""
        conn.executemany(INSERT_CLAIMS, rows)

    def filled(
        self,
        done: Sequence[tuple[int, int, int, float | None]],
        owner: str,
        regions: Collection[int] = (),
    ) -> dict[int, int]:
        """Blocks ``(object, start, crc, unpinned)`` this owner fetched (or carried) and
        wrote: ready, with the CRC32 of their bytes and when they came unpinned (None:
        confirmed) (a claim taken over meanwhile is not this owner's any more, and stays
        as it is). The generations of ``regions`` (those the blocks are in) when every block
        was still this owner's claim, read in the same transaction (a region holding a live
        owner's claim is not reused: the blocks are in those generations), else none."""
        with self.write() as conn:
            changes = conn.total_changes
            conn.executemany(
                "UPDATE blocks SET owner = NULL, crc = ?, unpinned = ? WHERE object = ? AND "
                "start = ? AND owner = ?",
                [(crc, unpinned, obj, start, owner) for obj, start, crc, unpinned in done],
            )
            if not regions or conn.total_changes - changes != len(done):
                return {}
            marks = ",".join("?" * len(regions))
            found = conn.execute(f"SELECT id, gen FROM regions WHERE id IN ({marks})", [*regions])
            return dict(found.fetchall())

    def fill(
        self,
        done: Sequence[tuple[int, int, int, int, bytes, float | None]],
        owner: str,
        write: Callable[[int, int, bytes], None],
        checks: Sequence[tuple[int, float]] = (),
    ) -> tuple[list[tuple[int, int, int, int]], list[tuple[int, int]], dict[int, int]]:
        """The fill thread's blocks ``(object, start, region, at, bytes, unpinned)``, fetched
        for this owner's claims: each still claimed by it at that place is written
        (``write(region, at, bytes)``) and made ready with the CRC32 of its bytes and when
        they came unpinned (None: by a pinned request), in one write transaction, with the
        ``checks`` ``(object, sent)`` the pinned ones passed (:meth:`confirm`). A
        claim dropped meanwhile (its object found replaced, the payload file cut: every block
        forgotten) is not written: its region may hold another block now, which a write
        after the transaction would overwrite (this process, trusting what it filled, read
        that block as the late one's bytes). The bytes are written under the transaction,
        not after it, for that reason: no claim transaction can reuse the region meanwhile.

        Returns:
            the blocks written ``(object, start, crc, region)``, the keys whose write failed
            (a full disk: their claims are the caller's to give back), and the generations of
            the regions written (what :meth:`filled` returns).
        """
        written: list[tuple[int, int, int, int]] = []
        failed: list[tuple[int, int]] = []
        with self.write() as conn:
            held: set[tuple[int, int, int, int, int]] = set()
            for at in range(0, len(done), _BATCH):
                part = done[at : at + _BATCH]
                values = ",".join("(?, ?)" for _ in part)
                held.update(
                    conn.execute(
                        "SELECT b.object, b.start, b.end, b.region, b.at FROM blocks AS b JOIN "
                        f"(VALUES {values}) AS v ON b.object = v.column1 AND b.start = "
                        "v.column2 WHERE b.owner = ?",
                        [x for obj, start, *_ in part for x in (obj, start)] + [owner],
                    ).fetchall()
                )
            unpinned: list[float | None] = []
            for obj, start, region, at, data, came in done:
                if (obj, start, start + len(data), region, at) not in held:
                    continue  # the claim is gone (or another, at the same start and place)
                try:
                    write(region, at, data)
                except OSError:
                    failed.append((obj, start))
                    continue
                written.append((obj, start, zlib.crc32(data), region))
                unpinned.append(came)
            conn.executemany(
                "UPDATE blocks SET owner = NULL, crc = ?, unpinned = ? WHERE object = ? AND "
                "start = ?",
                [(crc, came, obj, start) for (obj, start, crc, _), came in zip(written, unpinned)],
            )
            self.confirm(conn, checks)
            regions = {region for *_, region in written}
            marks = ",".join("?" * len(regions))
            found = conn.execute(f"SELECT id, gen FROM regions WHERE id IN ({marks})", [*regions])
            return written, failed, dict(found.fetchall())

    @staticmethod
    def confirm(conn: sqlite3.Connection, checks: Iterable[tuple[int, float]]) -> None:
        """Checks ``(object, sent)`` that passed: a pinned request of the object sent at
        ``sent`` (``time.time()``) found the snapshot's version, so the blocks whose bytes
        came unpinned before then are the snapshot's (confirmed; one look along the
        ``blocks_unpinned`` index each: none when nothing is unconfirmed)."""
        latest: dict[int, float] = {}
        for obj, sent in checks:
            latest[obj] = max(sent, latest.get(obj, sent))
        if latest:
            conn.executemany(
                "UPDATE blocks SET unpinned = NULL WHERE object = ? AND unpinned IS NOT NULL"
                " AND unpinned < ?",
                list(latest.items()),
            )

    def confirmed(self, checks: Sequence[tuple[int, float]]) -> None:
        """:meth:`confirm` in a write transaction of its own (a reader's checks)."""
        if checks:
            with self.write() as conn:
                self.confirm(conn, checks)

    def forget_damaged(self, pieces: Sequence[tuple[int, Piece]]) -> int:
        """Drop the rows of ready blocks ``(object, piece)`` whose bytes did not match their
        CRC32 and that are still in the place and region generation they were read at (a
        region reused since explains the mismatch): fetched again. How many were dropped."""
        with self.write() as conn:
            dropped = conn.total_changes
            conn.executemany(
                "DELETE FROM blocks WHERE object = ? AND start = ? AND region = ? AND at = ? "
                "AND owner IS NULL AND (SELECT gen FROM regions WHERE id = ?) = ?",
                [(obj, p.start, p.region, p.at, p.region, p.gen) for obj, p in pieces],
            )
            return conn.total_changes - dropped

    def forget_objects(self, objects: Collection[int]) -> None:
        """Drop every row of ``objects`` (ready blocks and claims): found replaced in the
        bucket, their cached bytes may be another version's (a claim's fill then updates no
        row; a reader waiting on it looks again)."""
        with self.write() as conn:
            conn.executemany("DELETE FROM blocks WHERE object = ?", [(o,) for o in objects])

    def release(self, keys: Sequence[tuple[int, int]], owner: str | None) -> None:
        """Give claims up (a failed GET, a process leaving, a dead owner's claim): their room
        is free again."""
        if keys:
            with self.write() as conn:
                conn.executemany(
                    "DELETE FROM blocks WHERE object = ? AND start = ? AND owner IS ?",
                    [(*key, owner) for key in keys],
                )

    @staticmethod
    def note_uses(conn: sqlite3.Connection, rows: Sequence[tuple[int, int, int, int]]) -> None:
        """``(now, step, object, start)``: the block is next used at ``step`` at the latest
        (a sooner use recorded and not yet past stays)."""
        conn.executemany(
            "UPDATE blocks SET next_use = CASE WHEN next_use IS NULL OR next_use < ?1 THEN ?2"
            " ELSE min(next_use, ?2) END WHERE object = ?3 AND start = ?4",
            rows,
        )

    @staticmethod
    def set_uses(
        conn: sqlite3.Connection, rows: Sequence[tuple[int, int | None, int, int]]
    ) -> None:
        """``(now, step or None, object, start)``: the block's next use becomes ``step`` (a
        planner's order), but a sooner one not yet past stays (another process's plan)."""
        conn.executemany(
            "UPDATE blocks SET next_use = CASE WHEN next_use >= ?1 AND (?2 IS NULL OR"
            " next_use < ?2) THEN next_use ELSE ?2 END WHERE object = ?3 AND start = ?4",
            rows,
        )

    @staticmethod
    def order(conn: sqlite3.Connection, objects: Iterable[int], first: int, last: int) -> None:
        """Record that the reader of ``objects`` told its order over steps ``[first, last)``
        (the last plan of an object is kept)."""
        conn.executemany(
            "INSERT OR REPLACE INTO orders VALUES (?, ?, ?)", [(o, first, last) for o in objects]
        )

    @staticmethod
    def ordered(conn: sqlite3.Connection, objects: Iterable[int], step: int) -> bool:
        """Whether a reader of one of ``objects`` told an order covering ``step``: a read at
        it in another process (a DataLoader worker's store holds no plan) reads as planned."""
        found = list(dict.fromkeys(objects))[:_BATCH]
        marks = ",".join("?" * len(found))
        return bool(found) and bool(
            conn.execute(
                f"SELECT 1 FROM orders WHERE object IN ({marks}) AND first <= ? AND ? < last"
                " LIMIT 1",
                [*found, step, step],
            ).fetchone()
        )

    def count(self, deltas: dict[str, float]) -> None:
        """Add this process's figures since its last call to the node's."""
        if deltas:
            with self.write() as conn:
                conn.executemany(
                    "INSERT INTO counters VALUES (?1, ?2) ON CONFLICT (name) DO UPDATE SET"
                    " value = value + ?2",
                    list(deltas.items()),
                )

    def forget_blocks(self) -> None:
        """Drop every block and free every region, its generation raised: the payload file
        was made again (gone, or cut), so the bytes the rows name are not there."""
        with self.write() as conn:
            conn.execute("DELETE FROM blocks")
            conn.execute("UPDATE regions SET gen = gen + 1, used = 0, state = ?", (FREE,))

    def restart_counters(self) -> None:
        """Drop the node's counters: no process that counted them lives (a newcomer read the
        retries of processes long gone as its own node's); ``since`` is now."""
        with self.write() as conn:
            conn.execute("DELETE FROM counters")
            conn.execute(
                "INSERT INTO settings VALUES ('counted_since', ?1) ON CONFLICT (name) DO UPDATE"
                " SET value = ?1",
                (time.time(),),
            )

    def node(self) -> dict[str, Any]:
        """The node's counters (of the processes since the folder was last idle), since when
        (``since``, a Unix time), bytes held and blocks."""
        with self.read() as conn:
            found: dict[str, Any] = dict(conn.execute("SELECT name, value FROM counters"))
            since = conn.execute(
                "SELECT value FROM settings WHERE name IN ('counted_since', 'created')"
                " ORDER BY name = 'counted_since' DESC"
            ).fetchone()
            found["since"] = float(since[0]) if since else 0.0
            held, blocks = conn.execute(
                "SELECT total(end - start), count(*) FROM blocks"
            ).fetchone()
        return {**found, "bytes_cached": int(held), "blocks": int(blocks)}


def _init(conn: sqlite3.Connection, layout: Layout) -> None:
    settings = {
        "format": FORMAT,
        "regions": layout.regions,
        "region_bytes": layout.region_bytes,
        "created": time.time(),
    }
    conn.executemany("INSERT INTO settings VALUES (?, ?)", list(settings.items()))
    conn.executemany(
        "INSERT INTO regions VALUES (?, 0, 0, ?, 0)", [(r, FREE) for r in range(layout.regions)]
    )
