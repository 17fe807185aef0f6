"""The ledger's SQL: batched lookups (which block holds a range, which overlap one), transactions.

A batch of ranges is one query (``VALUES`` joined to ``blocks``), not one a range: the blocks
of a 64-document batch are found in ~0.3 ms. A small ready block comes with its bytes.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

from lading.remote.ranges import Block


class Found(NamedTuple):
    """The block that holds a range: its id, where it starts, whether its bytes are in, who
    fetches it, and (a ready block of at most ``INLINE`` bytes) its bytes."""

    block: int
    start: int
    ready: bool
    owner: int | None
    data: bytes | None = None


INLINE = 64 * 1024  # a block up to this size comes with its lookup (one query for a batch)
_BATCH = 500  # ranges per batched query (4 parameters each, far below SQLite's 32,766)
FIND = (
    "SELECT q.column1, b.id, b.start, b.ready, b.owner, CASE WHEN b.ready AND b.size <= {inline}"
    " THEN (SELECT bytes FROM payload WHERE id = b.id) END FROM (VALUES {values}) AS q"
    " JOIN blocks AS b ON b.id = (SELECT id FROM blocks WHERE object = q.column2"
    " AND start <= q.column3 ORDER BY start DESC LIMIT 1) AND b.end >= q.column4"
)
OVERLAPS = (
    "SELECT q.column1 FROM (VALUES {values}) AS q WHERE EXISTS (SELECT 1 FROM blocks WHERE"
    " object = q.column2 AND start >= q.column3 AND start < q.column4) OR (SELECT end FROM"
    " blocks WHERE object = q.column2 AND start <= q.column3 ORDER BY start DESC LIMIT 1)"
    " > q.column3"
)


def batched(
    conn: sqlite3.Connection, sql: str, keys: Sequence[tuple[int, int, int]]
) -> Iterable[tuple[Any, ...]]:
    """Rows of ``sql`` over ``(i, object, start, end)`` for every key, ``_BATCH`` at a time."""
    for lo in range(0, len(keys), _BATCH):
        part = keys[lo : lo + _BATCH]
        values = ",".join(["(?, ?, ?, ?)"] * len(part))
        args = [x for i, key in enumerate(part, lo) for x in (i, *key)]
        yield from conn.execute(sql.format(values=values, inline=INLINE), args)


# a claim's blocks get ids LAST_ID + 1, ... in one statement (not one INSERT a block for its
# rowid: ~60 statements a batch of 64 cold documents); AUTOINCREMENT's sequence follows
LAST_ID = (
    "SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'blocks'), 0),"
    " coalesce((SELECT max(id) FROM blocks), 0))"
)
CLAIM = (
    "INSERT INTO blocks (id, object, start, end, size, ready, owner, next_use, last_use, uses)"
    " VALUES (?, ?, ?, ?, ?, 0, ?, ?, ?, 0)"
)


def read_slice(conn: sqlite3.Connection, found: Found, start: int, end: int) -> bytes:
    """Bytes ``[start, end)`` of the object, from a ready block that holds them.

    Python 3.11+ reads just those bytes (``blobopen``); 3.10's ``substr`` has SQLite load
    the whole block first (blocks are at most ``max_block``, 8 MiB by default).
    """
    if found.data is not None:
        return found.data[start - found.start : end - found.start]
    if hasattr(conn, "blobopen"):
        with conn.blobopen("payload", "bytes", found.block, readonly=True) as blob:
            blob.seek(start - found.start)
            data: bytes = blob.read(end - start)
            return data
    row = conn.execute(
        "SELECT substr(bytes, ?, ?) FROM payload WHERE id = ?",
        (start - found.start + 1, end - start, found.block),
    ).fetchone()
    return bytes(row[0])


class Claimed(NamedTuple):
    """What :meth:`Ledger.claim` did: blocks claimed (with ids), left for later, overlapping,
    and (a claim begun in the caller's transaction) ``(block, object id)`` still to claim."""

    claimed: list[tuple[Block, int]]
    deferred: list[Block]
    overlapping: list[Block]
    rest: Sequence[tuple[Block, int]] = ()


class Transaction:
    """``with`` one SQLite transaction on ``conn`` (``begin``: its BEGIN statement, or what
    starts it), committed at a clean exit, rolled back at an exception; ``first`` runs inside
    it before the caller's statements, ``end(committed)`` once it ended (either way)."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        begin: str | Callable[[sqlite3.Connection], None],
        end: Callable[[bool], None] | None = None,
        first: Callable[[sqlite3.Connection], None] | None = None,
    ) -> None:
        self.conn, self.begin, self.end, self.first = conn, begin, end, first

    def __enter__(self) -> sqlite3.Connection:
        if isinstance(self.begin, str):
            self.conn.execute(self.begin)
        else:
            self.begin(self.conn)
        if self.first is not None:
            try:
                self.first(self.conn)
            except BaseException:
                self._finish(False)
                raise
        return self.conn

    def __exit__(self, kind: object, *rest: object) -> None:
        self._finish(kind is None)

    def _finish(self, commit: bool) -> None:
        try:
            self.conn.execute("COMMIT" if commit else "ROLLBACK")
        finally:
            if self.end is not None:
                self.end(commit)


SCHEMA_VERSION = 2  # 2: 1 KiB pages (a new ledger file only)
SCHEMA = """
CREATE TABLE IF NOT EXISTS objects (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS blocks (
    id INTEGER PRIMARY KEY AUTOINCREMENT, object INTEGER NOT NULL, start INTEGER NOT NULL,
    end INTEGER NOT NULL, size INTEGER NOT NULL, ready INTEGER NOT NULL, owner INTEGER,
    next_use INTEGER, last_use REAL NOT NULL, uses INTEGER NOT NULL DEFAULT 0);
CREATE UNIQUE INDEX IF NOT EXISTS blocks_at ON blocks (object, start);
CREATE INDEX IF NOT EXISTS blocks_next ON blocks (next_use);
CREATE INDEX IF NOT EXISTS blocks_cold ON blocks (uses, last_use);
CREATE INDEX IF NOT EXISTS blocks_lru ON blocks (last_use);
CREATE TABLE IF NOT EXISTS payload (id INTEGER PRIMARY KEY, bytes BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS settings (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO settings VALUES ('used', 0);
"""
