"""The node cache as one store sees it: plan the ranges the next batches need, read ranges.

Every process on a node (ranks, DataLoader workers) opens the same cache directory; the
ledger (:mod:`lading.remote.cache.ledger`) makes a block fetched once per node: a process
claims the ranges nobody holds or fetches, fetches them, and fills them in; a process that
needs a range another one is fetching waits for it (and takes it over if that process died).

- :meth:`NodeCache.prefetch` and :meth:`NodeCache.plan` (:mod:`.planning`):
  the next batches' ranges, fetched a window ahead, and the epoch's whole order, kept by.
- :meth:`NodeCache.read` returns the bytes of ranges: from the cache, from this process's
  GETs in flight, from another process's, or fetched now. A range that cannot be cached (a
  cap of 0, a range larger than the cap, a cap full of blocks needed sooner) is read into
  memory and not kept: the cap holds.

Counting (:meth:`NodeCache.stats`): an access is a *hit* when it caused no GET, counted when
it is planned (a prefetched range is a miss at its plan, not a hit at its read) or, for a
range read without a plan, when it is read.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lading.remote.cache.claims import pid_alive
from lading.remote.cache.fill import Filler
from lading.remote.cache.ledger import Ledger
from lading.remote.cache.planning import Key, Planning, serialized
from lading.remote.cache.stats import node_totals, publish
from lading.remote.fetch import Fetcher, Future
from lading.remote.objects import RemoteReadError, describe
from lading.remote.ranges import (
    DEFAULT_BLOCK,
    DEFAULT_GAP,
    DEFAULT_WASTE,
    NO_STEP,
    Need,
)
from lading.remote.schedule import Plan

Span = tuple[str, int, int]  # object key, start, end
_POLL_S = 0.002  # how often a process checks a block another one is fetching
_ROUNDS = 8  # a range that keeps being evicted or taken over between lookups: give up after


class NodeCache(Planning):
    """Ranges of one store's objects through the node cache in ``directory``.

    Args:
        directory: the node's cache directory (node-local disk).
        cap: the node's byte cap for cached blocks (0: cache nothing).
        fetcher: issues the GETs (its client reads the store's URL).
        namespace: what makes object names unique in a cache shared by several stores and
            snapshots (the store's URL and snapshot).
        etags: object key -> its ETag in this snapshot (pins what GETs may return).
        policy: eviction policy (``"next-use"`` or ``"lru"``).
        max_gap, max_waste, max_block: coalescing limits (see :func:`coalesce`); a block is
            also kept under an eighth of the cap, so one GET never flushes the cache.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        cap: int,
        fetcher: Fetcher,
        namespace: str,
        etags: Mapping[str, str | None] | None = None,
        *,
        policy: str = "next-use",
        max_gap: int = DEFAULT_GAP,
        max_waste: float = DEFAULT_WASTE,
        max_block: int = DEFAULT_BLOCK,
    ) -> None:
        self.directory = Path(directory)
        self.ledger = Ledger(self.directory, cap, policy)
        self.fetcher = fetcher
        self.namespace = namespace.rstrip("/")
        self.etags = dict(etags or {})
        self.max_gap, self.max_waste = max_gap, max_waste
        self.max_block = max(1, min(max_block, cap // 8))
        # with the epoch's order known, a prefetch this many steps ahead or fewer may give up
        # planned blocks (Ledger.claim); 0 keeps them for the next epoch's hits
        self.near_steps = 0
        # waiting longer than this on another process's GET: fetch the range ourselves (a
        # second GET beats a batch stalled behind a slow or retried one)
        self.wait_limit = max(5.0, fetcher.timeout / 4)
        self._pid = -1
        self._lock_pid, self._lock = os.getpid(), threading.RLock()  # see planning.serialized
        self._filler = Filler(self.ledger, self._filled, self.close)
        self._reset()

    def _reset(self) -> None:
        """Per-process state: new in a forked child (the parent's GETs are not its own)."""
        self._pid = os.getpid()
        self._inflight: dict[int, Future | None] = {}  # None: its GET is being submitted
        self._inflight_lock = threading.Lock()
        self._plan: dict[Key, list[int]] = {}  # planned, unread accesses: their steps
        self._deferred: list[Need] = []
        self.order: Plan | None = None  # the epoch's whole order (eviction only), if told
        self._later: list[Need] = []  # announced needs beyond the window (an order is known)
        self._advanced = 0  # steps before this had their blocks' next uses moved past them
        self._filler.reset()
        self._names: dict[int, str] = {}
        self._ids: dict[str, int] = {}  # object key -> its id in the ledger
        self.hits = self.misses = self.bytes_used = self.bypassed = self.unplanned = 0
        self.by_epoch: dict[int, list[int]] = {}  # step >> 32 -> [hits, misses] of its accesses
        self.wait_s = 0.0
        self._published = 0.0

    def _here(self) -> None:
        if self._pid != os.getpid():
            self._reset()

    def _obj(self, key: str) -> int:
        obj = self._ids.get(key)
        if obj is None:
            obj = self._ids[key] = self.ledger.object_id(f"{self.namespace}/{key}")
            self._names[obj] = key
        return obj

    def _filled(self, blocks: list[int]) -> None:
        """Blocks the writer filled (or gave up): no longer this process's GETs in flight."""
        with self._inflight_lock:
            for block in blocks:
                self._inflight.pop(block, None)
        self._publish()  # at most once a second (on the writer thread)

    # -- reading ---------------------------------------------------------------------------------

    @serialized
    def read(self, spans: Sequence[Span], now: int | None = None) -> list[bytes]:
        """Bytes of each ``(key, start, end)``, in order; each ``bytes`` the caller's own.

        Raises:
            RemoteReadError: a GET failed for good (naming the object and range), or a range
                stayed unreadable through repeated evictions.
        """
        self._here()
        out: list[bytes | None] = [None] * len(spans)
        todo: dict[Key, list[int]] = {}
        for i, (key, start, end) in enumerate(spans):
            if end <= start:
                out[i] = b""
                continue
            todo.setdefault((self._obj(key), start, end), []).append(i)
        touched: list[tuple[int, Key]] = []
        for attempt in range(_ROUNDS):
            if not todo:
                break
            todo = self._round(todo, out, touched, now, attempt)
        if todo:
            obj, start, end = next(iter(todo))
            raise RemoteReadError(
                f"{describe(self.fetcher.client.url, self._names[obj], start, end)}: evicted or "
                f"taken over {_ROUNDS} times before it could be read; is cache_bytes far too "
                "small for the processes sharing it?"
            )
        if touched:
            self.ledger.touch(self._next_uses(touched, now), now)
        order = self.order
        if order is not None and now is not None and order.covers(now):
            self._advanced = max(self._advanced, now + 1)  # what this read touched is moved
        if self._later:  # the window moves on with the reads
            self._pump(now)
        self.bytes_used += sum(len(b) for b in out if b is not None)
        return [b if b is not None else b"" for b in out]

    def _count(self, k: Key, found: bool) -> None:
        """Count an access: a planned one was counted at its plan (its step is consumed);
        else a hit when some block already holds the range or is being fetched."""
        steps = self._plan.get(k)
        if steps:
            steps.sort()
            del steps[0]
            if not steps:
                del self._plan[k]
            return
        self.unplanned += 1
        self.hits += found
        self.misses += not found

    def _next_uses(
        self, touched: list[tuple[int, Key]], now: int | None
    ) -> list[tuple[int, int | None]]:
        """Each block read and the next step this process planned to read it at (or None):
        from the epoch's order where it covers ``now``, else from the prefetched window."""
        order = self.order if self.order is not None and self.order.covers(now) else None
        if order is not None:
            assert now is not None
            names = self._names
            steps = order.next_use_many([(names[k[0]], k[1], k[2]) for _, k in touched], now + 1)
        else:
            steps = [min(found) if (found := self._plan.get(k)) else None for _, k in touched]
        nexts: dict[int, int | None] = {}
        for (block, _), step in zip(touched, steps):
            known = nexts.get(block)
            nexts[block] = step if known is None else known if step is None else min(known, step)
        return list(nexts.items())

    def _round(
        self,
        todo: dict[Key, list[int]],
        out: list[bytes | None],
        touched: list[tuple[int, Key]],
        now: int | None,
        attempt: int,
    ) -> dict[Key, list[int]]:
        """One pass: read what is cached, fetch what nobody has, wait for the rest; what is
        still unread (evicted or taken over meanwhile) is returned for another pass. From the
        third pass on, missing ranges are read around the cache (a range that overlaps a
        cached block without lying inside it could not be cached)."""
        own: list[tuple[Key, int, int]] = []  # key, block id, block start
        other: list[tuple[Key, int, int, int | None]] = []
        missing: list[tuple[Need, int]] = []
        with self.ledger.read() as conn:
            keys = list(todo)
            for k, found in zip(keys, self.ledger.find_many(conn, keys)):
                obj, start, end = k
                if attempt == 0:
                    self._count(k, found is not None)
                if found is None:
                    step = NO_STEP if now is None else now
                    missing.append((Need(self._names[obj], start, end, step), obj))
                elif found.ready:
                    self._put(out, todo[k], self.ledger.slice(conn, found, start, end))
                    touched.append((found.block, k))
                elif found.block in self._inflight:
                    own.append((k, found.block, found.start))
                else:
                    other.append((k, found.block, found.start, found.owner))
        started = self._fetch(missing, now, prefetch=False, around=attempt >= 2)
        waited = time.perf_counter()
        again: dict[Key, list[int]] = {}
        starts = {key: [b[0] for b in group] for key, group in started.items()}
        for need, obj in missing:
            k = (obj, need.start, need.end)
            holder = _covering(started.get(need.key, []), starts.get(need.key, []), need)
            if holder is None:  # claimed meanwhile by another process: look again
                again[k] = todo[k]
                continue
            self._put(out, todo[k], _cut(holder[1], holder[0], need.start, need.end))
        for k, block, base in own:
            future = self._inflight.get(block)
            if future is None:  # filled meanwhile: read it from the ledger next pass
                again[k] = todo[k]
                continue
            self._put(out, todo[k], _cut(future, base, k[1], k[2]))
            touched.append((block, k))
        slow = []
        for k, block, _, _ in other:
            if not self._wait_for(block):
                slow.append(k)  # still being fetched by a live process: read it ourselves
            again[k] = todo[k]
        if slow:
            requests = [(self._names[o], a, b, self.etags.get(self._names[o])) for o, a, b in slow]
            for k, data in zip(slow, self.fetcher.read(requests)):
                self.bypassed += len(data)
                self._put(out, again.pop(k), data)
        self.wait_s += time.perf_counter() - waited
        return again

    @staticmethod
    def _put(out: list[bytes | None], where: list[int], data: bytes) -> None:
        for i in where:
            out[i] = data

    def _wait_for(self, block: int) -> bool:
        """Wait until another process's block is filled or gone (True), taking over the claim
        of a dead owner; False after ``wait_limit`` seconds with the owner still fetching."""
        deadline = time.monotonic() + self.wait_limit
        while time.monotonic() < deadline:
            state = self.ledger.state(block)
            if state is None or state[0]:
                return True
            if not pid_alive(state[1]):
                self.ledger.take_over(block, state[1] or -1)
                return True
            time.sleep(_POLL_S)
        return False

    def close(self) -> None:
        """Stop this process's GETs and give its claims not yet filled back to the node (a
        process that leaves mid-fetch would otherwise make the others wait on its claims)."""
        if self._pid != os.getpid():
            return
        self.fetcher.close()
        with contextlib.suppress(Exception):
            self._publish(force=True)
        pending = list(self._inflight)
        self._inflight.clear()
        with contextlib.suppress(Exception):
            self.ledger.release(pending)

    # -- counting --------------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """This process's ``gets``, ``bytes_fetched``, ``bytes_used``, ``hits``, ``misses``,
        ``unplanned`` (reads no prefetch announced), ``wait_s`` (waiting for GETs in reads) and
        ``bytes_bypassed`` (read around a full cache); the node's ``bytes_cached`` (held or
        being fetched), ``blocks`` and ``cap``."""
        self._here()
        cached, cap, blocks = self.ledger.usage()
        return {
            "gets": self.fetcher.gets,
            "bytes_fetched": self.fetcher.bytes_fetched,
            "bytes_used": self.bytes_used,
            "bytes_cached": cached,
            "cap": cap,
            "hits": self.hits,
            "misses": self.misses,
            "blocks": blocks,
            "unplanned": self.unplanned,
            "wait_s": self.wait_s,
            "bytes_bypassed": self.bypassed,
            "retried": self.fetcher.retried,
            "by_epoch": {e: tuple(c) for e, c in self.by_epoch.items()},
        }

    def node_stats(self) -> dict[str, Any]:
        """The node's figures: every process's counters summed (:mod:`.stats`)
        and the ledger's ``bytes_cached``, ``blocks``, ``cap``; this process's under
        ``"process"``."""
        own = self.stats()
        self._publish(force=True)
        return {**own, **node_totals(self.directory), "process": own}

    def _publish(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self._published >= 1.0:
            self._published = now
            counters = {  # no SQLite here: this may run on the writer thread, outside its lock
                "gets": self.fetcher.gets, "bytes_fetched": self.fetcher.bytes_fetched,
                "bytes_used": self.bytes_used, "hits": self.hits, "misses": self.misses,
                "unplanned": self.unplanned, "wait_s": self.wait_s,
                "bytes_bypassed": self.bypassed, "retried": self.fetcher.retried,
            }  # fmt: skip
            publish(self.directory, f"{os.getpid()}-{id(self):x}", counters)

    def drain(self, timeout: float = 60.0) -> None:
        """Wait until this process's GETs in flight are filled in (tests, benchmarks)."""
        deadline = time.monotonic() + timeout
        while self._inflight and time.monotonic() < deadline:
            time.sleep(0.005)


def _covering(
    blocks: list[tuple[int, int, Future]], starts: list[int], need: Need
) -> tuple[int, Future] | None:
    """``(start, future)`` of the block among ``blocks`` (sorted by start; ``starts``: their
    starts) holding ``need``."""
    at = bisect.bisect_right(starts, need.start) - 1
    if at < 0 or blocks[at][1] < need.end:
        return None
    return blocks[at][0], blocks[at][2]


def _cut(future: Future, base: int, start: int, end: int) -> bytes:
    """Bytes ``[start, end)`` of a block fetched from ``base`` (raises what the GET raised)."""
    data: bytes = future.result()
    if end - base > len(data):  # the fetcher checks lengths: this is a bug, not a short read
        raise RemoteReadError(f"block from {base} has {len(data)} bytes, not up to {end}")
    return data[start - base : end - base]
