"""The node cache as one store sees it: plan the ranges the next batches need, read ranges.

Every process on a node (ranks, DataLoader workers) opens the same cache directory; the
ledger (:mod:`lading.stores.remote.ledger`) makes a block fetched once per node: a process
claims the ranges nobody holds or fetches, fetches them, and fills them in; a process that
needs a range another one is fetching waits for it (and takes it over if that process died).

- :meth:`NodeCache.prefetch` is told the ranges of the next batches and the step (batch
  number) each is needed at. Ranges already cached get that step as their next use (what
  eviction by next use reads); the others are coalesced (:mod:`lading.stores.remote.ranges`),
  claimed within the cap and fetched in the background. What finds no room now (the cap is
  full of blocks needed sooner) is retried at the next call.
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
import functools
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lading.stores.remote.fetch import Fetcher, Future
from lading.stores.remote.fill import Filler
from lading.stores.remote.ledger import Claimed, Ledger, pid_alive
from lading.stores.remote.objects import RemoteReadError, describe
from lading.stores.remote.plan import Plan
from lading.stores.remote.ranges import (
    DEFAULT_BLOCK,
    DEFAULT_GAP,
    DEFAULT_WASTE,
    NO_STEP,
    Need,
    coalesce,
    needs_in,
)

Span = tuple[str, int, int]  # object key, start, end
_Started = dict[str, list[tuple[int, int, "Future"]]]  # key -> (start, end, future), by start
_Key = tuple[int, int, int]  # object id, start, end
_POLL_S = 0.002  # how often a process checks a block another one is fetching
AHEAD_SHARE = 0.125  # with the epoch's order known: window bytes ahead at most this of the cap
_ROUNDS = 8  # a range that keeps being evicted or taken over between lookups: give up after


class NodeCache:
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
        # waiting longer than this on another process's GET: fetch the range ourselves (a
        # second GET beats a batch stalled behind a slow or retried one)
        self.wait_limit = max(5.0, fetcher.timeout / 4)
        self._pid = -1
        self._filler = Filler(self.ledger, self._filled, self.close)
        self._reset()

    def _reset(self) -> None:
        """Per-process state: new in a forked child (the parent's GETs are not its own)."""
        self._pid = os.getpid()
        self._inflight: dict[int, Future] = {}
        self._plan: dict[_Key, list[int]] = {}  # planned, unread accesses: their steps
        self._deferred: list[Need] = []
        self.order: Plan | None = None  # the epoch's whole order (eviction only), if told
        self._later: list[Need] = []  # announced needs beyond the window (an order is known)
        self._advanced = 0  # steps before this had their blocks' next uses moved past them
        self._filler.reset()
        self._names: dict[int, str] = {}
        self.hits = self.misses = self.bytes_used = self.bypassed = self.unplanned = 0
        self.wait_s = 0.0

    def _here(self) -> None:
        if self._pid != os.getpid():
            self._reset()

    def _obj(self, key: str) -> int:
        obj = self.ledger.object_id(f"{self.namespace}/{key}")
        self._names[obj] = key
        return obj

    # -- planning ------------------------------------------------------------------------------

    def prefetch(self, needs: Sequence[Need], now: int) -> None:
        """Plan ``needs`` (ranges and the step each is needed at); ``now`` is the current step.

        Returns at once: the GETs run in the background.
        """
        self._here()
        self.advance(now)
        self._plan_needs([n for n in needs if n.end > n.start], now)

    def _pump(self, now: int | None) -> None:
        """Fetch the next needs left beyond the window (a read moved it on)."""
        self._plan_needs([], min(n.step for n in self._later) if now is None else now + 1)

    def _plan_needs(self, needs: list[Need], now: int) -> None:
        """Count ``needs`` (new accesses), note the next use of the cached ones, and claim and
        start fetching the others (with those deferred before) while the window holds at
        most AHEAD_SHARE of the cap: a prefetched block waits in the cache for its read, and
        a window larger than the cap evicts its own blocks before they are read (measured:
        2.56x the bytes used fetched at 2% of 100k documents). The rest wait in ``_later``,
        fetched as reads move on."""
        budget = int(self.ledger.cap * AHEAD_SHARE)
        later, self._later = _window([n for n in self._later if n.step >= now], budget)
        keep = [n for n in self._deferred if n.step >= now]
        self._deferred = []
        uses: list[tuple[int, int]] = []
        missing: list[tuple[Need, int]] = []
        # 0: deferred (counted before), 1: left beyond the window while missing (counted now:
        # a GET meanwhile, for another access, makes this one a hit), 2: new
        todo = [(n, 0) for n in keep] + [(n, 1) for n in later] + [(n, 2) for n in needs]
        objs = {key: self._obj(key) for key in {n.key for n, _ in todo}}
        keys = [(objs[n.key], n.start, n.end) for n, _ in todo]
        with self.ledger.read() as conn:
            founds = self.ledger.find_many(conn, keys)
        wait: list[Need] = []
        window = 0  # bytes of the missing ones taken so far
        for (need, kind), found, (obj, _, _) in zip(todo, founds, keys):
            if kind == 2:
                self._plan.setdefault((obj, need.start, need.end), []).append(need.step)
            if found is not None:
                uses.append((found.block, need.step))
                self.hits += kind > 0
            elif kind == 2 and need.step > now and window > budget:
                wait.append(need)  # beyond the window: counted when it is fetched
            else:
                missing.append((need, obj))
                window += need.end - need.start
                self.misses += kind > 0
        if uses:
            self.ledger.plan_uses(uses, now)
        self._later += wait
        self._fetch(missing, now, prefetch=True)
        if len(self._plan) > 4 * len(needs) + 4096:  # accesses planned but never read
            self._plan = {k: steps for k, steps in self._plan.items() if steps[-1] >= now}

    def plan(self, order: Plan) -> None:
        """Take ``order`` (the epoch's planned reads from its first step on) as what eviction
        reads: every cached block of its objects gets its first planned use from then on as
        its next use (None: not planned, the first to go), keeping a sooner use another
        process recorded. Fetches nothing."""
        self._here()
        self.order = order
        self._advanced = order.first_step
        objs = {self._obj(key): key for key in order.objects()}
        if not objs:
            return
        marks = ",".join("?" * len(objs))
        with self.ledger.read() as conn:
            rows = conn.execute(
                f"SELECT id, object, start, end FROM blocks WHERE object IN ({marks})", list(objs)
            ).fetchall()
        uses = [
            (block, order.next_use(objs[obj], start, end, order.first_step))
            for block, obj, start, end in rows
        ]
        self.ledger.set_uses(uses, order.first_step)

    def advance(self, now: int) -> None:
        """Move the next use of the blocks the plan read before step ``now`` past it (the
        reads may have happened in other processes: DataLoader workers read, the process
        that iterates plans). Called by :meth:`prefetch`; a no-op without a plan."""
        order = self.order
        if order is None or now <= self._advanced:
            return
        upto = min(now, order.last_step)
        spans = order.ranges(self._advanced, upto)
        self._advanced = max(self._advanced, upto)
        if not spans:
            return
        keys = [(self._obj(key), start, end) for key, start, end in spans]
        with self.ledger.read() as conn:
            founds = self.ledger.find_many(conn, keys)
        uses = {}
        for (key, start, end), found in zip(spans, founds):
            if found is not None and found.ready:
                uses[found.block] = order.next_use(key, start, end, now)
        self.ledger.set_uses(list(uses.items()), now)

    def _fetch(
        self, missing: list[tuple[Need, int]], now: int | None, prefetch: bool, around: bool = False
    ) -> _Started:
        """Coalesce, claim and start fetching ``missing``: the blocks this process fetches
        (claimed, or if not ``prefetch`` also read around the cache) by key. ``around``: claim
        nothing, read every block around the cache."""
        if not missing:
            return {}
        objs = {need.key: obj for need, obj in missing}
        with self.ledger.read() as conn:
            blocks = coalesce(
                [n for n, _ in missing],
                self.max_gap,
                # with the epoch's order known, gap bytes would only take cache room from
                # blocks kept for their next use (measured: 0.77x the optimum's hits with a
                # 25% waste budget, 0.89-0.94x without); touching ranges still merge
                0.0 if self.order is not None else self.max_waste,
                self.max_block,
                barrier=lambda key, end, start: self.ledger.occupied(conn, objs[key], end, start),
            )
        order = self.order
        if not prefetch and order is not None and order.covers(now):
            assert now is not None  # read now: a block is kept for its next use
            blocks = [
                b._replace(step=order.next_use(b.key, b.start, b.end, now + 1) or NO_STEP)
                for b in blocks
            ]
        if around:
            result = Claimed([], blocks, [])
        else:
            planned = self.order is not None
            result = self.ledger.claim([(b, objs[b.key]) for b in blocks], now, prefetch, planned)
        started: _Started = {}
        self._filler.start()
        around_cache = [] if prefetch else result.deferred  # no room: read around the cache
        self.bypassed += sum(b.size for b in around_cache)
        fetch = [b for b, _ in result.claimed] + around_cache
        futures = self.fetcher.submit_many(
            [(b.key, b.start, b.end, self.etags.get(b.key)) for b in fetch]
        )
        for (_, block_id), future in zip(result.claimed, futures):
            self._inflight[block_id] = future
            future.add_done_callback(functools.partial(self._filler.put, block_id))
        for block, future in zip(fetch, futures):
            started.setdefault(block.key, []).append((block.start, block.end, future))
        if prefetch:
            later = result.deferred + result.overlapping
            self._deferred.extend(needs_in([n for n, _ in missing], later))
        for group in started.values():
            group.sort(key=lambda b: b[0])
        return started

    def _filled(self, blocks: list[int]) -> None:
        """Blocks the writer filled (or gave up): no longer this process's GETs in flight."""
        for block in blocks:
            self._inflight.pop(block, None)

    # -- reading ---------------------------------------------------------------------------------

    def read(self, spans: Sequence[Span], now: int | None = None) -> list[bytes]:
        """Bytes of each ``(key, start, end)``, in order; each ``bytes`` the caller's own.

        Raises:
            RemoteReadError: a GET failed for good (naming the object and range), or a range
                stayed unreadable through repeated evictions.
        """
        self._here()
        out: list[bytes | None] = [None] * len(spans)
        todo: dict[_Key, list[int]] = {}
        for i, (key, start, end) in enumerate(spans):
            if end <= start:
                out[i] = b""
                continue
            todo.setdefault((self._obj(key), start, end), []).append(i)
        touched: list[tuple[int, _Key]] = []
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

    def _count(self, k: _Key, found: bool) -> None:
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
        self, touched: list[tuple[int, _Key]], now: int | None
    ) -> list[tuple[int, int | None]]:
        """Each block read and the next step this process planned to read it at (or None):
        from the epoch's order where it covers ``now``, else from the prefetched window."""
        order = self.order if self.order is not None and self.order.covers(now) else None
        nexts: dict[int, int | None] = {}
        for block, k in touched:
            if order is not None:
                assert now is not None
                step = order.next_use(self._names[k[0]], k[1], k[2], now + 1)
            else:
                steps = self._plan.get(k)
                step = min(steps) if steps else None
            known = nexts.get(block)
            nexts[block] = step if known is None else known if step is None else min(known, step)
        return list(nexts.items())

    def _round(
        self,
        todo: dict[_Key, list[int]],
        out: list[bytes | None],
        touched: list[tuple[int, _Key]],
        now: int | None,
        attempt: int,
    ) -> dict[_Key, list[int]]:
        """One pass: read what is cached, fetch what nobody has, wait for the rest; what is
        still unread (evicted or taken over meanwhile) is returned for another pass. From the
        third pass on, missing ranges are read around the cache (a range that overlaps a
        cached block without lying inside it could not be cached)."""
        own: list[tuple[_Key, int, int]] = []  # key, block id, block start
        other: list[tuple[_Key, int, int, int | None]] = []
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
        again: dict[_Key, list[int]] = {}
        for need, obj in missing:
            k = (obj, need.start, need.end)
            holder = _covering(started.get(need.key, []), need)
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
        }

    def drain(self, timeout: float = 60.0) -> None:
        """Wait until this process's GETs in flight are filled in (tests, benchmarks)."""
        deadline = time.monotonic() + timeout
        while self._inflight and time.monotonic() < deadline:
            time.sleep(0.005)


def _covering(blocks: list[tuple[int, int, Future]], need: Need) -> tuple[int, Future] | None:
    """``(start, future)`` of the block among ``blocks`` (sorted by start) holding ``need``."""
    at = bisect.bisect_right(blocks, need.start, key=lambda b: b[0]) - 1
    if at < 0 or blocks[at][1] < need.end:
        return None
    return blocks[at][0], blocks[at][2]


def _cut(future: Future, base: int, start: int, end: int) -> bytes:
    """Bytes ``[start, end)`` of a block fetched from ``base`` (raises what the GET raised)."""
    data: bytes = future.result()
    if end - base > len(data):  # the fetcher checks lengths: this is a bug, not a short read
        raise RemoteReadError(f"block from {base} has {len(data)} bytes, not up to {end}")
    return data[start - base : end - base]


def _window(needs: list[Need], budget: int) -> tuple[list[Need], list[Need]]:
    """``needs`` split into the soonest (every need of the first step, then more while their
    bytes stay within ``budget``) and the rest."""
    needs = sorted(needs, key=lambda n: n.step)
    total = 0
    for at, need in enumerate(needs):
        total += need.end - need.start
        if total > budget and need.step > needs[0].step:
            return needs[:at], needs[at:]
    return needs, []
