"""Claiming blocks in the node's ledger: room made by eviction, a few blocks a transaction.

A claim reserves a block's bytes under the cap for the process that fetches it (the owner pid
is recorded: a dead owner's claim is taken over). Room is made by evicting ready blocks in the
policy's order (:mod:`.evict`), never a block needed sooner than the one claimed. Each
transaction dirties at most :func:`~.footprint.txn_pages` pages (its pages all go to the WAL,
whose bytes the cap bounds): a claim of many blocks, or one that evicts many small ones, goes
over several transactions; the first may be one the caller already holds (a prefetch looks
up, notes next uses and claims in one transaction).
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from lading.remote.cache.footprint import current_budget
from lading.remote.cache.queries import CLAIM, LAST_ID, OVERLAPS, Claimed, batched
from lading.remote.ranges import NO_STEP, Block

if TYPE_CHECKING:
    from lading.remote.cache.ledger import Ledger

Pairs = Sequence[tuple[Block, int]]  # (block, object id)


def claim_blocks(
    ledger: Ledger,
    blocks: Pairs,
    now: int | None,
    prefetch: bool,
    keep_planned: bool = False,
    near: int = 0,
    conn: sqlite3.Connection | None = None,
) -> Claimed:
    """:meth:`Ledger.claim <lading.remote.cache.ledger.Ledger.claim>`; ``conn``: an
    open write transaction to make the first part of the claim in (what is left for more
    transactions comes back in ``rest``, for the caller to claim once it committed)."""
    out = Claimed([], [], [])
    at = 0
    while at < len(blocks):
        if conn is not None:
            at, full = _claim_some(ledger, conn, blocks, at, now, prefetch, keep_planned, near, out)
            if not full and at < len(blocks):
                return out._replace(rest=blocks[at:])
        else:
            with ledger.write() as own:
                at, full = _claim_some(
                    ledger, own, blocks, at, now, prefetch, keep_planned, near, out
                )
        if full:  # no room: the rest (needed later) waits, without a transaction each
            out.deferred.extend(block for block, _ in blocks[at:])
            break
    return out


def _claim_some(
    ledger: Ledger,
    conn: sqlite3.Connection,
    blocks: Pairs,
    at: int,
    now: int | None,
    prefetch: bool,
    keep_planned: bool,
    near: int,
    out: Claimed,
) -> tuple[int, bool]:
    """Claim ``blocks[at:]`` in ``conn``'s transaction into ``out`` until its page budget is
    spent: ``(the first block not handled, whether the cap was found full)``. Handles at
    least one block or evicts at least one victim (the caller's loop ends)."""
    clock = -1 if now is None else now
    pages, per_row = ledger.wal.own_pages, ledger.wal.row_pages  # a claim or an eviction: a row
    settings = dict(conn.execute("SELECT name, value FROM settings").fetchall())
    used, pending = int(settings["used"]), int(settings.get("pending", 0))
    cap, extra = current_budget(conn, used, pending)
    victims = ledger.policy(conn, clock)
    part = blocks[at : at + max(1, int(pages / per_row))]
    keys = [(obj, block.start, block.end) for block, obj in part]
    taken = {row[0] for row in batched(conn, OVERLAPS, keys)}
    dropped: list[int] = []  # victims, dropped in one go before the inserts
    claims: list[Block] = []
    rows: list[tuple[int, int, int, int, int, int | None, float]] = []
    pid, t = os.getpid(), time.time()
    spent, full, done = 0.0, False, at  # (a first row always goes: the loop moves on)
    for n, (block, _) in enumerate(part):
        size = block.size + extra
        if size > cap:
            out.deferred.append(block)
        elif n in taken:
            out.overlapping.append(block)
        else:
            bound = _bound(block.step, clock, prefetch, keep_planned, near)
            while used + size > cap and (not spent or spent + per_row <= pages):
                victim = next(victims, None)
                if victim is None or victim[2] <= bound:
                    break
                dropped.append(victim[0])
                used -= victim[1] + extra
                spent += per_row
            if used + size > cap and spent and spent + per_row > pages:
                break  # out of pages mid-eviction: this block starts the next transaction
            if used + size > cap:
                full = True
                out.deferred.append(block)
                done += 1
                break
            step = None if block.step >= NO_STEP else block.step
            rows.append((keys[n][0], block.start, block.end, block.size, pid, step, t))
            claims.append(block)
            used += size
            pending += block.size
            spent += per_row
        done += 1
        if spent + per_row > pages:
            break
    ledger.drop(conn, dropped)
    ledger.wal.spent(len(dropped) + len(rows))
    # ids given here (the write lock is held), not one INSERT a block for its rowid
    first = 1 + int(conn.execute(LAST_ID).fetchone()[0])
    conn.executemany(CLAIM, [(first + i, *row) for i, row in enumerate(rows)])
    out.claimed.extend((block, first + i) for i, block in enumerate(claims))
    conn.executemany(
        "UPDATE settings SET value = ? WHERE name = ?", [(used, "used"), (pending, "pending")]
    )
    return done, full


def _bound(step: int, clock: int, prefetch: bool, keep_planned: bool, near: int) -> int:
    """The next use a victim must be later than to make room for a block needed at ``step``
    (``clock``: now). A read evicts anything needed later than now; a prefetch anything needed
    later than its block. With the epoch's order known (``keep_planned``), a prefetch more than
    ``near`` steps ahead evicts only unplanned blocks (evicting a planned block early
    decides on what is known now, not at the read); within them it evicts as the read would
    (the furthest next use first: only the reads of the steps between can change that).
    ``near`` 0 keeps every planned block for its use (the next epoch's hits at a small cap,
    tests/stores/remote/test_remote_plan.py); but once the cache holds only planned blocks,
    nothing is fetched ahead and every read waits for its GETs, so LM loaders, whose next
    epoch rarely hits, set 16 (:data:`lading.lm.remote_reads.NEAR_STEPS`)."""
    if not prefetch:
        return clock
    if keep_planned and step - clock > near:
        return NO_STEP - 1
    return step


def pid_alive(pid: int | None) -> bool:
    """Whether process ``pid`` runs on this host (the cache is node-local). A zombie (exited,
    not yet reaped by its parent: a rank that left before its launcher looked) is dead."""
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[-1].split()[0] != b"Z"
    except (OSError, IndexError):  # no /proc (not Linux): kill(0) said it exists
        return True
