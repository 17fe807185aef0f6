"""Which cached blocks go when the node cache needs room: a name -> policy table.

- ``"next-use"`` (default; Belady's rule on what the plan knows): first the blocks with no
  planned use ahead (no use in the look-ahead window, or only uses already past), the least
  used and then the least recently used of them first; then the block whose next planned use
  is furthest away. A block is only given up for one needed *sooner* than its own next use,
  so a prefetch never pushes out what the next batches read.
- ``"lru"``: least recently used first, whatever the plan says (what Mosaic streaming's
  ``cache_limit`` does with whole shards; it thrashes when every item is read once an epoch,
  streaming #658). Kept for comparison (``bench_remote.py``).

A policy yields ``(block id, size, next use)`` candidates in eviction order from the ledger's
tables, ``next use`` being :data:`~lading.remote.ranges.NO_STEP` where none is known;
blocks still being fetched (``ready = 0``) are never candidates.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator

from lading.remote.ranges import NO_STEP

Candidate = tuple[int, int, int]  # block id, size in bytes, next planned use (NO_STEP: none)
Policy = Callable[[sqlite3.Connection, int], Iterator[Candidate]]
_CHUNK = 64  # candidates read per query: the caller deletes as it goes, so re-query


def _query(conn: sqlite3.Connection, sql: str, *args: int) -> Iterator[tuple[int, int, int]]:
    seen: set[int] = set()  # a candidate the caller kept (it was needed sooner) is not redone
    while True:
        rows = conn.execute(sql, (*args, len(seen) + _CHUNK)).fetchall()
        fresh = [r for r in rows if r[0] not in seen]
        if not fresh:
            return
        for row in fresh:
            seen.add(row[0])
            yield row


def next_use(conn: sqlite3.Connection, now: int) -> Iterator[Candidate]:
    """Unplanned blocks (fewest uses, then oldest use first), then the furthest next use."""
    for block, size, _ in _query(
        conn,
        "SELECT id, size, 0 FROM blocks WHERE ready = 1 AND (next_use IS NULL OR next_use < ?)"
        " ORDER BY uses, last_use LIMIT ?",
        now,
    ):
        yield block, size, NO_STEP
    yield from _query(
        conn,
        "SELECT id, size, next_use FROM blocks WHERE ready = 1 AND next_use >= ?"
        " ORDER BY next_use DESC LIMIT ?",
        now,
    )


def lru(conn: sqlite3.Connection, now: int) -> Iterator[Candidate]:
    """Least recently used first; the plan is not consulted (its next use reads as none)."""
    for block, size, _ in _query(
        conn, "SELECT id, size, 0 FROM blocks WHERE ready = 1 ORDER BY last_use LIMIT ?"
    ):
        yield block, size, NO_STEP


POLICIES: dict[str, Policy] = {"lru": lru, "next-use": next_use}


def policy(name: str) -> Policy:
    """The policy called ``name``.

    Raises:
        ValueError: an unknown name, listing the known ones.
    """
    if name not in POLICIES:
        raise ValueError(f"unknown eviction policy {name!r}; choose from {sorted(POLICIES)}")
    return POLICIES[name]
