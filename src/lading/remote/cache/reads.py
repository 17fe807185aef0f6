"""The node cache as one snapshot's reader sees it: byte ranges of its objects, at a step.

:class:`NodeCache` is a view of the node's cache (:func:`~.node.node_of`) for the objects of
one snapshot (a store's data files, a corpus's ``tokens.bin``, a bucket's parquet objects),
named apart from every other by ``namespace``. It has two calls, and neither holds a lock of
this process across a GET or a wait (decided in a ledger transaction, waited outside it):

- :meth:`read`: the bytes of ranges, at the step the read belongs to (an argument, else the
  building thread's, :func:`lading.step.current_step`). A range may span several blocks and
  gaps: the blocks are copied from the payload file (their region's generation checked after
  the copy), this process's GETs in flight are waited for, another process's claim is waited
  for until filled (taken over if its owner died, read around after ``wait_limit``), and the
  gaps are claimed and fetched now. A range that finds no room (a cap far too small for the
  processes sharing it, a block larger than a region) is read around the cache, not kept.
- :meth:`fetch_ahead`: the next batches' ranges (what a :class:`~.planner.Planner` sends a
  window ahead): cached ones get their next use, the gaps are claimed and fetched, what finds
  no room comes back for a later call.

Figures (:meth:`stats`), per range read: a *hit* when no GET was made for it (it was cached, or
fetched for another range or process), a *miss* when one was (by the window ahead on its
behalf, or by the read); *unplanned* when no window announced it first.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from lading.remote.cache.fill import Fill
from lading.remote.cache.ledger import Ledger, Piece
from lading.remote.cache.node import Node, release
from lading.remote.cache.places import Space, policy_check
from lading.remote.cache.regions import folder_bytes
from lading.remote.fetch import Fetcher, Future
from lading.remote.objects import RemoteReadError, describe
from lading.remote.ranges import DEFAULT_GAP, DEFAULT_WASTE, NO_STEP, Block, Need, coalesce
from lading.step import current_step
from lading.threads import register

Span = tuple[str, int, int]  # object key, start, end
Key = tuple[int, int, int]  # object id, start, end
ROUNDS = 8  # a range evicted or taken over between lookups this often: an error, named
_POLL_S = 0.002  # how often a read looks at a block another process is fetching


class Part(NamedTuple):
    """Bytes ``[start, end)`` of a range, and where they come from."""

    start: int
    end: int
    piece: Piece | None  # None: a gap (nobody holds these bytes)


class Claimed(NamedTuple):
    """What a claim transaction did: GETs started (by object key), blocks left out."""

    started: dict[str, list[tuple[int, int, Future]]]  # key -> (start, end, future)
    deferred: list[Block]  # no room (now): a prefetch retries, a read reads around


class NodeCache:
    """One snapshot's view of the node cache of ``node`` (see the module doc).

    Args:
        node: the cache folder in this process (:func:`~.node.node_of`).
        fetcher: issues the GETs of these objects.
        namespace: what makes object names unique in the folder (the URL and snapshot).
        etags: object key -> its ETag in this snapshot (GETs are pinned to it).
        policy: eviction policy, ``"next-use"`` or ``"fifo"`` (:mod:`.places`).
        max_gap, max_waste: coalescing limits (:func:`lading.remote.ranges.coalesce`).
    """

    def __init__(
        self,
        node: Node,
        fetcher: Fetcher,
        namespace: str,
        etags: Mapping[str, str | None] | None = None,
        *,
        policy: str = "next-use",
        max_gap: int = DEFAULT_GAP,
        max_waste: float = DEFAULT_WASTE,
    ) -> None:
        self.node, self.fetcher = node, fetcher
        self.namespace, self.etags = namespace.rstrip("/"), dict(etags or {})
        self.policy = policy_check(policy)
        self.max_gap, self.max_waste = max_gap, max_waste
        self.max_block = max(1, node.layout.region_bytes)
        # waiting longer than this on another process's GET: read the range ourselves
        self.wait_limit = max(5.0, fetcher.timeout / 4)
        self._ids: dict[str, int] = {}
        self._names: dict[int, str] = {}
        self.index_bytes: int | None = None  # the folder's budget besides the payload, if set
        self.forked()
        register(self, "fetch")

    def forked(self) -> None:
        """This process's figures start at zero (a forked child's are its own)."""
        self._lock = threading.Lock()  # guards the counters below; never held across I/O
        self.counts: Counter[str] = Counter()
        self.by_epoch: dict[int, list[int]] = {}  # step >> 32 -> [hits, misses]
        self._announced: Counter[Key] = Counter()  # ranges a window announced, not yet read
        self._fetched: Counter[Key] = Counter()  # ranges a window fetched for, not yet read
        self._reported: Counter[str] = Counter()  # figures the node was given

    @property
    def ledger(self) -> Ledger:
        return self.node.ledger

    @property
    def cap(self) -> int:
        """The payload file's bytes: the node's cap on cached blocks."""
        return self.node.layout.size

    def obj(self, key: str) -> int:
        """The ledger's id of object ``key`` of this snapshot."""
        found = self._ids.get(key)
        if found is None:
            found = self._ids[key] = self.ledger.object_id(f"{self.namespace}/{key}")
            self._names[found] = key
        return found

    # -- reading -----------------------------------------------------------------------------

    def read(
        self, spans: Sequence[Span], step: int | None = None, planned: bool = False
    ) -> list[bytes]:
        """Bytes of each ``(key, start, end)``, in order; each ``bytes`` the caller's own.
        ``planned``: the reader told its epoch's order (a :class:`~.planner.Planner` has a
        schedule): a range fetched now, which the window did not bring, takes the room of
        no block needed later this epoch (it is read around the cache instead: its own next
        use is the next epoch's, Belady's rule would not keep it).

        Raises:
            RemoteReadError: a GET failed for good (naming the object and range), or a range
                stayed unreadable through repeated evictions.
        """
        now = current_step() if step is None else step
        where: dict[Key, list[int]] = {}
        for i, (key, start, end) in enumerate(spans):
            where.setdefault((self.obj(key), start, end), []).append(i)
        got: dict[Key, bytes] = {k: b"" for k in where if k[2] <= k[1]}
        fetched: set[Key] = set()
        todo = [k for k in where if k not in got]
        started = time.perf_counter()
        for attempt in range(ROUNDS):
            if not todo:
                break
            todo = self._round(todo, got, fetched, now, attempt >= 2, planned)
        if todo:
            obj, start, end = todo[0]
            raise RemoteReadError(
                f"{describe(self.fetcher.client.url, self._names[obj], start, end)}: evicted "
                f"or taken over {ROUNDS} times before it could be read; is cache_bytes far too "
                "small for the processes sharing it?"
            )
        self._count(where, got, fetched, now, time.perf_counter() - started)
        out = [b""] * len(spans)
        for k, places in where.items():
            for i in places:
                out[i] = got[k]
        return out

    def _round(
        self,
        todo: list[Key],
        got: dict[Key, bytes],
        fetched: set[Key],
        now: int | None,
        around: bool,
        planned: bool,
    ) -> list[Key]:
        """One look: copy what is cached, claim and fetch the gaps, wait for the rest; the
        ranges still unread (evicted or taken over meanwhile) come back for another."""
        with self.ledger.read() as conn:
            found = self.ledger.overlapping(conn, todo)
        plans = {k: _parts(k, pieces) for k, pieces in zip(todo, found)}
        gaps = [
            Need(self._names[k[0]], p.start, p.end, NO_STEP if now is None else now)
            for k, parts in plans.items()
            for p in parts
            if p.piece is None
        ]
        near = 0 if planned else None  # (a read: near only says an order is known)
        claimed = self._claim(gaps, now, False, around, near) if gaps else None
        parts_of: dict[Key, list[bytes | None]] = {}
        regions: dict[int, int] = {}  # region -> the generation the copies saw
        for k, parts in plans.items():
            parts_of[k] = [self._copy(k, p, regions) for p in parts]
        again = self._checked(plans, parts_of, regions)
        for k, parts in plans.items():
            if k in again:
                continue
            for n, part in enumerate(parts):
                if parts_of[k][n] is None:
                    data = self._wait(k, part, claimed, fetched)
                    if data is None:
                        again.add(k)
                        break
                    parts_of[k][n] = data
            else:
                got[k] = b"".join(parts_of[k])  # type: ignore[arg-type]  # every part is in
        return [k for k in todo if k not in got]

    def _copy(self, k: Key, part: Part, regions: dict[int, int]) -> bytes | None:
        """A ready block's bytes of ``part`` copied out of the payload file, else None."""
        piece = part.piece
        if piece is None or piece.owner is not None:
            return None
        regions.setdefault(piece.region, piece.gen)
        at = piece.at + part.start - piece.start
        return bytes(self.node.data.view(piece.region, at, part.end - part.start))

    def _checked(
        self,
        plans: dict[Key, list[Part]],
        parts_of: dict[Key, list[bytes | None]],
        regions: dict[int, int],
    ) -> set[Key]:
        """The ranges with a copy from a region reused since it was looked up (read again)."""
        if not regions:
            return set()
        with self.ledger.read() as conn:
            now = self.ledger.generations(conn, regions)
        stale = {r for r, gen in regions.items() if now.get(r) != gen}
        return {
            k
            for k, parts in plans.items()
            if any(
                p.piece is not None and p.piece.region in stale and parts_of[k][n] is not None
                for n, p in enumerate(parts)
            )
        }

    def _wait(self, k: Key, part: Part, claimed: Claimed | None, fetched: set[Key]) -> bytes | None:
        """The bytes of a part not in the payload file: from a GET of this process (started
        now or before), or once another process filled it; None: look again."""
        key = self._names[k[0]]
        if part.piece is None:  # a gap: claimed (or read around) by this round
            assert claimed is not None
            fetched.add(k)
            for start, end, future in claimed.started.get(key, []):
                if start <= part.start and part.end <= end:
                    return _cut(future.result(), start, part.start, part.end)
            return None  # claimed by another process meanwhile
        piece = part.piece
        with self.node.lock:
            flight = self.node.inflight.get((k[0], piece.start))
        if flight is not None:
            return _cut(flight.future.result(), piece.start, part.start, part.end)
        return self._wait_other(k, key, part, piece)  # (this process's: filled, or carried)

    def _wait_other(self, k: Key, key: str, part: Part, piece: Piece) -> bytes | None:
        """Wait while a live owner fills ``piece`` (another process, or a thread of this one
        writing a block it carried forward); a dead one's claim is given up; past
        ``wait_limit``, the part is read around (a second GET beats a stalled batch)."""
        deadline = time.monotonic() + self.wait_limit
        waited = time.perf_counter()
        try:
            while time.monotonic() < deadline:
                with self.ledger.read() as conn:
                    row = conn.execute(
                        "SELECT owner FROM blocks WHERE object = ? AND start = ?",
                        (k[0], piece.start),
                    ).fetchone()
                if row is None or row[0] is None:
                    return None  # filled or gone: look again
                if not self.node.owner.alive(row[0]):
                    self.ledger.release([(k[0], piece.start)], row[0])  # its owner died
                    return None
                time.sleep(_POLL_S)
            data = self.fetcher.read([(key, part.start, part.end, self.etags.get(key))])[0]
            with self._lock:
                self.counts["bytes_bypassed"] += len(data)
            return data
        finally:
            with self._lock:
                self.counts["wait_us"] += int(1e6 * (time.perf_counter() - waited))

    # -- claiming ----------------------------------------------------------------------------

    def _claim(
        self,
        needs: Sequence[Need],
        now: int | None,
        prefetch: bool,
        around: bool = False,
        near: int | None = None,
    ) -> Claimed:
        """Claim and fetch the gaps ``needs`` leaves (looked up again in one write
        transaction: another process may have claimed them meanwhile). ``prefetch``: a block
        may evict only regions needed later than its own step (``near``: with the epoch's
        order known, only regions with no planned use, unless needed within ``near`` steps);
        a read, regions needed after now. ``around``: claim nothing, read every gap around
        the cache."""
        objs = {n.key: self.obj(n.key) for n in needs}
        owner = self.node.owner.token
        with self.ledger.write() as conn:
            found = self.ledger.overlapping(conn, [(objs[n.key], n.start, n.end) for n in needs])
            gaps = [
                Need(n.key, p.start, p.end, n.step)
                for n, pieces in zip(needs, found)
                for p in _parts((0, n.start, n.end), pieces)
                if p.piece is None
            ]
            waste = 0.0 if near is not None else self.max_waste  # an order known: no gap bytes
            blocks = coalesce(gaps, self.max_gap, waste, self.max_block, _barrier(conn, objs))
            space = Space(conn, self.node.data, self.policy, now, self.node.owner.alive, owner)
            placed, deferred = [], []
            for n, block in enumerate([] if around else blocks):
                place = None
                if block.size <= self.max_block:
                    place = space.place(block.size, _bound(block.step, now, prefetch, near))
                if place is None:
                    deferred += blocks[n:] if prefetch else [block]
                    if prefetch:
                        break
                    continue
                step = None if block.step >= NO_STEP else block.step
                # in now, not at the end: a later eviction in this transaction must see the
                # region holds a claim of a live owner (seen: a region sealed and evicted in
                # one transaction gave two blocks one place)
                row = (objs[block.key], block.start, block.end, *place, owner, step)
                Ledger.insert(conn, [row])
                placed.append((block, place))
            space.close()
        for carried in space.carried:  # a region's window blocks, carried to its start
            self.node.data.write(carried.region, carried.at, carried.data)
        if space.carried:
            self.ledger.filled([(c.object, c.start) for c in space.carried], owner)
        return self._start(
            placed, [] if prefetch else (blocks if around else deferred), objs, deferred
        )

    def _start(
        self,
        placed: list[tuple[Block, tuple[int, int]]],
        around: list[Block],
        objs: dict[str, int],
        deferred: list[Block],
    ) -> Claimed:
        """Start the GETs of claimed blocks (filled in once fetched) and of blocks read around
        the cache (kept by nobody)."""
        fetch = [b for b, _ in placed] + around
        fills = [Fill(objs[b.key], b.start, region, at, lambda: b"") for b, (region, at) in placed]
        futures = self.fetcher.submit_many(
            [(b.key, b.start, b.end, self.etags.get(b.key)) for b in fetch],
            [self._filler(fill) for fill in fills],
        )
        for (block, _), fill, future in zip(placed, fills, futures):
            self.node.started(fill.object, block.start, block.end, future)
        if around:
            with self._lock:
                self.counts["bytes_bypassed"] += sum(b.size for b in around)
        started: dict[str, list[tuple[int, int, Future]]] = {}
        for block, future in zip(fetch, futures):
            started.setdefault(block.key, []).append((block.start, block.end, future))
        return Claimed(started, [] if around else deferred)

    def _filler(self, fill: Fill) -> Any:
        put = self.node.filler.put
        return lambda future: put(fill._replace(bytes_of=future.result))

    # -- ahead of the reads ------------------------------------------------------------------

    def fetch_ahead(self, needs: Sequence[Need], now: int, near: int | None) -> list[Need]:
        """Start fetching ``needs`` (ranges and the step each is read at; ``now``: the step
        being read): the cached ones get that step as their next use, the gaps are claimed
        and fetched (``near``: see :meth:`_claim`). The needs that found no room come back."""
        if not needs:
            return []
        objs = {n.key: self.obj(n.key) for n in needs}
        keys = [(objs[n.key], n.start, n.end) for n in needs]
        with self.ledger.write() as conn:
            found = self.ledger.overlapping(conn, keys)
            uses = [
                (now, n.step, k[0], piece.start)
                for n, k, pieces in zip(needs, keys, found)
                for piece in pieces
            ]
            self.ledger.note_uses(conn, uses)
        missing = [
            n
            for n, k, pieces in zip(needs, keys, found)
            if any(p.piece is None for p in _parts(k, pieces))
        ]
        claimed = self._claim(missing, now, prefetch=True, near=near) if missing else None
        late = set(_inside(missing, claimed.deferred)) if claimed else set()
        with self._lock:
            self._announced.update(keys)
            self._fetched.update((objs[n.key], n.start, n.end) for n in missing if n not in late)
            self.counts["hits_ahead"] += len(needs) - len(missing)
        return [n for n in missing if n in late]

    # -- figures ---------------------------------------------------------------------------

    def _count(
        self,
        where: dict[Key, list[int]],
        got: dict[Key, bytes],
        fetched: set[Key],
        now: int | None,
        waited: float,
    ) -> None:
        epoch = None if now is None or now >= NO_STEP else now >> 32
        with self._lock:
            c = self.counts
            for k, places in where.items():
                if k[2] <= k[1]:
                    continue  # an empty range: nothing to read, nothing to count
                for _ in places:
                    miss = k in fetched or self._fetched[k] > 0
                    if self._fetched[k] > 0:
                        self._fetched[k] -= 1
                    if self._announced[k] > 0:
                        self._announced[k] -= 1
                    else:
                        c["unplanned"] += 1
                    c["misses" if miss else "hits"] += 1
                    c["bytes_used"] += len(got[k])
                    if epoch is not None:
                        self.by_epoch.setdefault(epoch, [0, 0])[miss] += 1
            c["reads"] += 1
            if len(self._fetched) > 65536:  # ranges fetched for but never read: let them go
                self._fetched = Counter({k: v for k, v in self._fetched.items() if v > 0})
                self._announced = Counter({k: v for k, v in self._announced.items() if v > 0})
            f = self.fetcher
            now_figures = Counter(
                {**c, "gets": f.gets, "bytes_fetched": f.bytes_fetched, "retried": f.retried}
            )
            delta = now_figures - self._reported
            self._reported = now_figures
        with self.node.lock:
            self.node.figures.update(delta)
        self.node.count()

    def stats(self) -> dict[str, Any]:
        """This process's figures for these objects: ``gets``, ``bytes_fetched``, ``retried``
        (this fetcher's), ``hits``, ``misses`` and ``unplanned`` (ranges read), ``bytes_used``,
        ``bytes_bypassed`` (read around the cache), ``wait_s``; the node's ``bytes_cached``
        and ``cap``; the folder's ``index_bytes`` (its budget besides the payload) and what
        it holds on disk, ``folder_payload`` (<= ``cap``) and ``folder_index``."""
        with self._lock:
            mine: dict[str, Any] = {k: self.counts.get(k, 0) for k in _FIGURES}
            mine["wait_s"] = self.counts.get("wait_us", 0) / 1e6
            mine["by_epoch"] = {e: tuple(c) for e, c in self.by_epoch.items()}
        f = self.fetcher
        mine.update(gets=f.gets, bytes_fetched=f.bytes_fetched, retried=f.retried)
        node = self.ledger.node()
        mine.update(bytes_cached=node["bytes_cached"], blocks=node["blocks"], cap=self.cap)
        payload, rest = folder_bytes(self.node.directory)
        mine.update(index_bytes=self.index_bytes, folder_payload=payload, folder_index=rest)
        return mine

    def node_stats(self) -> dict[str, Any]:
        """This process's figures (:meth:`stats`) and, under ``"node"``, the node's: every
        process's summed since the folder was made (a process tells the node at most once a
        second and when it closes), its bytes cached and cap."""
        self.node.count(force=True)
        node = self.ledger.node()
        mine = self.stats()
        return {**mine, "process": dict(mine), "node": {**node, "cap": self.cap}}

    def drain(self, timeout: float = 60.0) -> None:
        """Wait until this process's GETs in flight are filled in (tests, benchmarks)."""
        deadline = time.monotonic() + timeout
        while self.node.inflight and time.monotonic() < deadline:
            time.sleep(0.005)

    def close(self) -> None:
        """Stop this snapshot's GETs (every one in flight settles with an error saying so),
        count, and let the node go if no other view holds it (:func:`~.node.release`)."""
        if self.fetcher.closed:
            return
        self.fetcher.close()
        self.node.count(force=True)
        release(self.node)


_FIGURES = ("hits", "misses", "unplanned", "bytes_used", "bytes_bypassed", "hits_ahead")


def _parts(k: Key | tuple[int, int, int], pieces: list[Piece]) -> list[Part]:
    """``[start, end)`` of ``k`` cut into the blocks that hold it and the gaps between."""
    _, start, end = k
    out, at = [], start
    for piece in pieces:
        if piece.start > at:
            out.append(Part(at, min(piece.start, end), None))
        lo, hi = max(at, piece.start), min(end, piece.end)
        if hi > lo:
            out.append(Part(lo, hi, piece))
        at = max(at, hi)
    if at < end:
        out.append(Part(at, end, None))
    return out


def _cut(data: bytes, base: int, start: int, end: int) -> bytes:
    """Bytes ``[start, end)`` of a block fetched from ``base``."""
    if end - base > len(data):  # the fetcher checks lengths: this is a bug, not a short read
        raise RemoteReadError(f"block from {base} has {len(data)} bytes, not up to {end}")
    return data[start - base : end - base]


def _bound(step: int, now: int | None, prefetch: bool, near: int | None) -> int:
    """The soonest use a region must be needed after to be evicted for a block needed at
    ``step`` (``now``: the step being read). A read evicts anything needed after now; a
    prefetch anything needed after its block; with the epoch's order known (``near`` not
    None), a prefetch more than ``near`` steps ahead evicts only regions with no planned use:
    evicting a planned block early decides on what is known now, not at the read (measured,
    a 16-batch window that did kept 0.6x the optimum's hits)."""
    clock = -1 if now is None else now
    if not prefetch:  # with an order known, nothing needed this epoch (steps: lading.step)
        return clock if near is None else ((clock >> 32) + 1 << 32) - 1
    if near is not None and step - clock > near:
        return NO_STEP - 1
    return step


def _barrier(conn: sqlite3.Connection, objs: dict[str, int]) -> Any:
    """Whether a block lies in a gap ``[end, start)`` between two gaps (coalescing may not
    merge across it). Blocks are disjoint and the gaps hold none, so one in between starts
    there: one look along the primary key."""

    def occupied(key: str, end: int, start: int) -> bool:
        row = conn.execute(
            "SELECT 1 FROM blocks WHERE object = ? AND start >= ? AND start < ? LIMIT 1",
            (objs[key], end, start),
        ).fetchone()
        return row is not None

    return occupied


def _inside(needs: list[Need], blocks: list[Block]) -> list[Need]:
    """The ``needs`` that overlap one of ``blocks`` (left for a later call)."""
    by_key: dict[str, list[Block]] = {}
    for block in blocks:
        by_key.setdefault(block.key, []).append(block)
    return [
        n for n in needs if any(b.start < n.end and n.start < b.end for b in by_key.get(n.key, []))
    ]
