"""What the node cache's files take on disk, and so how many bytes of blocks a cap holds.

The ledger's files are its database, its WAL and the WAL's ``-shm`` map. From
:data:`DISK_FLOOR` up, a cap bounds all three: the WAL gets an allowance (an eighth of the cap,
64 KiB to 8 MiB; checkpointed and truncated at half of it), ``-shm`` and the schema a fixed
share, and the blocks the rest, each block charged :data:`BLOCK_COST` besides its bytes for its
rows in the tables and indexes (measured: 1 KiB pages, 100-600-byte blocks). Below the floor an
empty ledger alone (~70 KB) would not fit: only the blocks' bytes are bounded there.
"""

from __future__ import annotations

import sqlite3

PAGE = 1024
BLOCK_COST = 160  # bytes a block costs besides its payload: its rows in blocks, 4 indexes, cells
DISK_FLOOR = 512 << 10  # below this cap only the blocks are bounded (an empty ledger: ~70 KB)
FIXED = 160 * 1024  # the -shm map (32 KiB), the schema and a page per table and index, spare


def wal_allowance(cap: int) -> int:
    """Bytes the WAL may hold beside the blocks: an eighth of the cap, 64 KiB to 8 MiB."""
    return min(8 << 20, max(64 << 10, cap // 8))


# WAL pages a transaction dirties (each one frame of PAGE + 24 bytes, however often the
# transaction changes it): a block's row is a leaf of ``blocks`` and of its 4 indexes, a use
# moves 3 index entries (the ledger learns the pages a row takes, from this start: measured
# 1-3); a fill adds the payload's pages and the row's leaf
TXN_PAGES = 6  # any write transaction (the settings row, index interiors; measured 5-7)
ROW_PAGES = 6  # a block claimed or dropped (its rows, a page split now and then, the freelist)
FRAME = PAGE + 24


def txn_pages(cap: int) -> int:
    """WAL pages one transaction may add: the WAL is checkpointed before a transaction once it
    holds half its allowance, so with this much per transaction it stays within it."""
    return max(8, (wal_allowance(cap) // 2) // FRAME)


def fill_pages(size: int) -> int:
    """WAL pages (high) of filling a block of ``size`` bytes: its payload's pages (overflow
    pages hold PAGE - 4 bytes; blocks are filled in id order, so small ones share the last
    leaf) and a page for its row (rows claimed together share leaves too)."""
    return -(-size // (PAGE - 4)) + 1


def block_cost(cap: int) -> int:
    """Bytes a block is charged besides its payload under ``cap`` (0 below the floor)."""
    return BLOCK_COST if cap >= DISK_FLOOR else 0


def budget(cap: int) -> int:
    """Bytes of blocks (payload and :func:`block_cost`) a node cache of ``cap`` bytes holds:
    the cap less the WAL's allowance and the fixed files, from :data:`DISK_FLOOR` up."""
    return cap - wal_allowance(cap) - FIXED if cap >= DISK_FLOOR else cap


def current_budget(conn: sqlite3.Connection, used: int, pending: int = 0) -> tuple[int, int]:
    """``(bytes of blocks the node may hold now, what a block costs besides its bytes)`` in
    the ledger ``conn`` with ``used`` bytes charged, ``pending`` of them claimed and not yet
    filled: from :data:`DISK_FLOOR` up, :func:`budget` scaled by the file's measured bytes per
    byte charged (partly filled pages: 1.3-2x; free pages are reused before the file grows),
    so the file stays within its share. A claimed block has no payload pages yet: its bytes
    count as pages to come (was: live pages over all bytes charged, which read 1.1 while half
    the bytes charged were still being fetched, and the file outgrew its share under load)."""
    cap = int(conn.execute("SELECT value FROM settings WHERE name = 'cap'").fetchone()[0])
    if cap < DISK_FLOOR:
        return cap, 0
    live = int(conn.execute("PRAGMA page_count").fetchone()[0])
    live -= int(conn.execute("PRAGMA freelist_count").fetchone()[0])
    ratio = max(1.1, (live * PAGE + pending) / used) if used > 256 * PAGE else 2.0
    return int(budget(cap) / ratio), block_cost(cap)


_MMAP_BYTES = 1 << 31  # SQLite's default ceiling for mmap_size (SQLITE_MAX_MMAP_SIZE)


def configure(conn: sqlite3.Connection, cap: int) -> None:
    """Set a new connection's pragmas so the ledger's files keep within ``cap`` on disk: 1 KiB
    pages (on a new file), the WAL truncated to its allowance, checkpoints by ``trim()`` from
    :data:`DISK_FLOOR` up (below it SQLite's own, every few pages), pages read by one map."""
    conn.execute(f"PRAGMA page_size = {PAGE}")  # takes on a new file only
    conn.execute("PRAGMA journal_mode = WAL")
    wal = wal_allowance(cap)
    conn.execute(f"PRAGMA journal_size_limit = {wal}")
    pages = 0 if cap >= DISK_FLOOR else max(16, wal // PAGE // 2)
    conn.execute(f"PRAGMA wal_autocheckpoint = {pages}")
    conn.execute("PRAGMA synchronous = NORMAL")  # a lost cache is refetched, not lost data
    conn.execute(f"PRAGMA mmap_size = {_MMAP_BYTES}")
