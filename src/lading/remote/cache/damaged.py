"""A damaged node-cache ledger: found when it is opened, set aside, and a new one started.

The node cache is disposable (every byte in it is a copy of an object in the bucket), so a
ledger that is not an SQLite database, is truncated or has garbage pages must not fail every
later run on the node: the opener moves it (and its ``-wal``/``-shm``; the payload file whose
places it kept is removed) aside to ``ledger.sqlite.damaged`` (one slot: an older one is replaced,
so a node never piles them up), warns once naming both files, and starts an empty cache.

What is checked on open, cheaply: the 100-byte header (magic string, page size), the file's
length against the page count the header gives (a truncated file is short of it), and, for a
ledger up to :data:`FULL_CHECK_BYTES`, SQLite's ``quick_check`` of every page (~0.1 s for
64 MiB here). A larger ledger gets a query reading each table and index instead (their root
pages, and every row of the blocks' key index): garbage deep in another tree shows when its
rows are read.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import warnings
from collections.abc import Callable
from pathlib import Path

from lading.disk import build_lock
from lading.remote.cache.folder import DATA_FILE

FULL_CHECK_BYTES = 64 << 20
_MAGIC = b"SQLite format 3\x00"
_PROBES = (  # a query reading each table and index (which one, in its comment)
    "SELECT count(value) FROM settings",  # the table
    "SELECT max(name) FROM settings",  # its primary key's index
    "SELECT max(region), max(at) FROM blocks",  # blocks_key, every row (a covering scan)
    "SELECT max(next_use) FROM blocks",  # the table (its primary key's tree)
    "SELECT max(object) FROM blocks INDEXED BY blocks_unpinned WHERE unpinned IS NOT NULL",
    "SELECT max(id) FROM objects",  # the table
    "SELECT max(name) FROM objects",  # its names' index
    "SELECT max(id), max(gen) FROM regions",  # the table
    "SELECT max(value) FROM counters",  # the table
    "SELECT max(name) FROM counters",  # its primary key's index
    "SELECT max(object) FROM orders",  # the table
)


class DamagedCacheWarning(UserWarning):
    """The node cache was damaged: a ledger set aside (the cache starts empty), or cached
    blocks whose bytes no longer match their CRC32 (fetched again)."""


def check_header(path: Path) -> None:
    """Raise ``sqlite3.DatabaseError`` when ``path`` is not an SQLite file or is truncated
    (shorter than the pages its header counts). A missing or empty file is fine (new).

    Reads the file outside SQLite: call it only where this process has no connection on it
    (:func:`.ledger.unconnected`), as closing the read's descriptor drops every fcntl lock
    this process holds on the file, SQLite's included."""
    try:
        with open(path, "rb") as f:
            head = f.read(100)
            size = os.fstat(f.fileno()).st_size
    except FileNotFoundError:
        return
    if size == 0:
        return
    if len(head) < 100 or head[:16] != _MAGIC:
        raise sqlite3.DatabaseError("file is not a database (no SQLite header)")
    page = int.from_bytes(head[16:18], "big")
    page = 65536 if page == 1 else page
    pages = int.from_bytes(head[28:32], "big")
    if page < 512 or page & (page - 1):
        raise sqlite3.DatabaseError(f"file is not a database (page size {page})")
    if pages and size < pages * page:
        raise sqlite3.DatabaseError(
            f"database disk image is truncated ({size} bytes, its header counts {pages} "
            f"pages of {page})"
        )


def check_contents(conn: sqlite3.Connection, path: Path) -> None:
    """Raise ``sqlite3.DatabaseError`` when the open ledger's pages are damaged (see the
    module doc for how much is read)."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return
    if size <= FULL_CHECK_BYTES:
        found = conn.execute("PRAGMA quick_check").fetchall()
        if found != [("ok",)]:
            raise sqlite3.DatabaseError(f"database disk image is malformed ({found[0][0]})")
        return
    for sql in _PROBES:
        conn.execute(sql).fetchall()


class OtherFormatError(sqlite3.DatabaseError):
    """A sound ledger of another lading's format: set aside as a damaged one is, but said
    as what it is (an upgrade, not damage)."""


def set_aside(path: Path, error: BaseException, probe: Callable[[Path], None]) -> Path:
    """Move the damaged ledger ``path`` (and its WAL files) to ``<path>.damaged`` and warn.

    Under the cache's lock, and only if ``probe(path)`` still raises ``sqlite3.DatabaseError``:
    of two processes that found it so at once, the second finds the first's fresh ledger and
    keeps it.
    """
    aside = path.with_name(path.name + ".damaged")
    with build_lock(path):
        try:
            probe(path)
            return aside  # another process set it aside meanwhile; this one is fine
        except sqlite3.DatabaseError:
            pass
        for suffix in ("", "-wal", "-shm"):
            source = path.with_name(path.name + suffix)
            with contextlib.suppress(FileNotFoundError):
                os.replace(source, aside.with_name(aside.name + suffix))
        with contextlib.suppress(FileNotFoundError):  # its places went with it (and a copy
            path.with_name(DATA_FILE).unlink()  # of a cap's bytes would double the folder)
    what = "was written by another lading" if isinstance(error, OtherFormatError) else "is damaged"
    warnings.warn(
        f"{path}: the node cache's ledger {what} ({str(error)[:120]}); it was moved to "
        f"{aside} (delete it at will) and this node's cache starts empty: every block is "
        "fetched again from the store",
        DamagedCacheWarning,
        stacklevel=3,
    )
    return aside
