"""What the node cache is told ahead: the next batches' ranges (fetched a window ahead) and
the epoch's whole order (kept by), for :class:`~lading.remote.cache.NodeCache`.

- :meth:`Planning.prefetch` is told the ranges of the next batches and the step (batch
  number) each is needed at. Ranges already cached get that step as their next use (what
  eviction by next use reads); the others are coalesced (:mod:`lading.remote.ranges`),
  claimed within the cap and fetched in the background, while the window ahead holds at most
  :data:`AHEAD_SHARE` of the cap; the rest is fetched as reads move on. What finds no room now
  (the cap is full of blocks needed sooner) is retried at the next call.
- :meth:`Planning.plan` takes the epoch's whole order (:class:`~.order.Plan`):
  eviction then keeps the blocks needed soonest, all epoch long.
"""

from __future__ import annotations

import bisect
import functools
import operator
import os
import sqlite3
import threading
from collections.abc import Callable, Sequence
from typing import Concatenate, ParamSpec, TypeVar

from lading.remote.cache.fill import Filler
from lading.remote.cache.ledger import Claimed, Ledger
from lading.remote.cache.uses import PLAN, SET
from lading.remote.fetch import Fetcher, Future
from lading.remote.ranges import NO_STEP, Need, coalesce, needs_in
from lading.remote.schedule import Plan

Started = dict[str, list[tuple[int, int, Future]]]  # key -> (start, end, future), by start
Key = tuple[int, int, int]  # object id, start, end
AHEAD_SHARE = 0.125  # window bytes ahead at most this of the cap
_STEP = operator.attrgetter("step")
P = ParamSpec("P")
R = TypeVar("R")
Self = TypeVar("Self", bound="Planning")


def serialized(method: Callable[Concatenate[Self, P], R]) -> Callable[Concatenate[Self, P], R]:
    """``method`` run by one thread of the process at a time: the cache's own state (GETs in
    flight, the plan, the window) is one process's, shared by its threads (a loader's
    read-ahead thread and the caller's reads). The lock is the process's own: a forked child
    gets a new one (a lock held in the parent at the fork would never be released)."""

    @functools.wraps(method)
    def locked(self: Self, *args: P.args, **kwargs: P.kwargs) -> R:
        if self._lock_pid != os.getpid():
            self._lock_pid, self._lock = os.getpid(), threading.RLock()
        with self._lock:
            return method(self, *args, **kwargs)

    return locked


class Planning:
    """The planning half of a node cache (the reading half is the subclass's)."""

    ledger: Ledger
    fetcher: Fetcher
    etags: dict[str, str | None]
    max_gap: int
    max_waste: float
    max_block: int
    near_steps: int  # a prefetch this many steps ahead may give up planned blocks (Ledger.claim)
    order: Plan | None
    hits: int
    misses: int
    by_epoch: dict[int, list[int]]
    bypassed: int
    _filler: Filler
    _inflight: dict[int, Future | None]  # None: its GET is being submitted
    _inflight_lock: threading.Lock
    _plan: dict[Key, list[int]]
    _deferred: list[Need]
    _later: list[Need]
    _advanced: int
    _names: dict[int, str]
    _lock: threading.RLock
    _lock_pid = -1  # the process _lock belongs to

    def _here(self) -> None:
        raise NotImplementedError

    def _obj(self, key: str) -> int:
        raise NotImplementedError

    @serialized
    def prefetch(self, needs: Sequence[Need], now: int) -> None:
        """Plan ``needs`` (ranges and the step each is needed at); ``now`` is the current step.

        Returns at once: the GETs run in the background.
        """
        self._here()
        self.advance(now)
        self._plan_needs([n for n in needs if n.end > n.start], now)

    def _pump(self, now: int | None) -> None:
        """Fetch the next needs left beyond the window (a read moved it on)."""
        self._plan_needs([], self._later[0].step if now is None else now + 1)  # (sorted)

    def _plan_needs(self, needs: list[Need], now: int) -> None:
        """Count ``needs`` (new accesses), note the next use of the cached ones, and claim and
        start fetching the others (with those deferred before) while the window holds at
        most AHEAD_SHARE of the cap: a prefetched block waits in the cache for its read, and
        a window larger than the cap evicts its own blocks before they are read (measured:
        2.56x the bytes used fetched at 2% of 100k documents). The rest wait in ``_later``,
        fetched as reads move on."""
        budget = int(self.ledger.cap * AHEAD_SHARE)
        later, self._later = _window(self._later, budget, now)
        # deferred (no room then): the soonest again, a window's worth (a claim stops at the
        # first that finds no room; retrying them all at every read cost ~0.1 ms a document
        # with an epoch's order at a cap of 0.5% of the corpus)
        keep, self._deferred = _window(self._deferred, budget, now)
        uses: list[tuple[int | None, ...]] = []  # (now, step, step, block): uses.PLAN's
        missing: list[tuple[Need, int]] = []
        # 0: deferred (counted before), 1: left beyond the window while missing (counted now:
        # a GET meanwhile, for another access, makes this one a hit), 2: new
        todo = [(n, 0) for n in keep] + [(n, 1) for n in later] + [(n, 2) for n in needs]
        if not todo:  # a window moved on with nothing to fetch: no read transaction
            return
        objs = {key: self._obj(key) for key in {n.key for n, _ in todo}}
        keys = [(objs[n.key], n.start, n.end) for n, _ in todo]
        # one write transaction: look up, note next uses, claim (was a read, a write for the
        # uses, a read for the coalescing and a write for the claim)
        with self.ledger.write() as conn:
            founds = self.ledger.find_many(conn, keys)
            wait: list[Need] = []
            window = 0  # bytes of the missing ones taken so far
            for (need, kind), found, (obj, _, _) in zip(todo, founds, keys):
                if kind == 2:
                    self._plan.setdefault((obj, need.start, need.end), []).append(need.step)
                if found is not None:
                    uses.append((now, need.step, need.step, found.block))
                    self.hits += kind > 0
                    if kind:
                        self.by_epoch.setdefault(need.step >> 32, [0, 0])[0] += 1
                elif kind == 2 and need.step > now and window > budget:
                    wait.append(need)  # beyond the window: counted when it is fetched
                else:
                    missing.append((need, obj))
                    window += need.end - need.start
                    self.misses += kind > 0
                    if kind:
                        self.by_epoch.setdefault(need.step >> 32, [0, 0])[1] += 1
            rest = self.ledger.update(PLAN, uses, conn)
            # claims see every next use noted first (else they go after the uses, on their own)
            claimed = None if rest else self._claim(conn, missing, now, prefetch=True)
        if rest:
            self.ledger.update(PLAN, rest)
        if wait:  # kept sorted by step: a read's pump then looks at the window alone
            self._later += wait
            self._later.sort(key=_STEP)  # two sorted runs: linear
        self._start(missing, now, True, claimed)
        if len(self._plan) > 4 * len(needs) + 4096:  # accesses planned but never read
            self._plan = {k: steps for k, steps in self._plan.items() if steps[-1] >= now}

    @serialized
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
        steps = order.next_use_many([(objs[o], a, b) for _, o, a, b in rows], order.first_step)
        uses = [(row[0], step) for row, step in zip(rows, steps)]
        self.ledger.update(SET, [(order.first_step, s, s, s, b) for b, s in uses])

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
        ready = [(span, found.block) for span, found in zip(spans, founds) if found and found.ready]
        steps = order.next_use_many([span for span, _ in ready], now)
        uses = {block: step for (_, block), step in zip(ready, steps)}
        self.ledger.update(SET, [(now, s, s, s, b) for b, s in uses.items()])

    def _fetch(
        self, missing: list[tuple[Need, int]], now: int | None, prefetch: bool, around: bool = False
    ) -> Started:
        """Coalesce, claim and start fetching ``missing``: the blocks this process fetches
        (claimed, or if not ``prefetch`` also read around the cache) by key. ``around``: claim
        nothing, read every block around the cache."""
        if not missing:
            return {}
        with self.ledger.read() if around else self.ledger.write() as conn:
            claimed = self._claim(conn, missing, now, prefetch, around)
        return self._start(missing, now, prefetch, claimed)

    def _claim(
        self,
        conn: sqlite3.Connection,
        missing: list[tuple[Need, int]],
        now: int | None,
        prefetch: bool,
        around: bool = False,
    ) -> Claimed:
        """Coalesce ``missing`` and claim the blocks (the first part) in ``conn``'s open write
        transaction: a gap holding a block is not merged across, seen under the write lock."""
        objs = {need.key: obj for need, obj in missing}
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
            steps = order.next_use_many([(b.key, b.start, b.end) for b in blocks], now + 1)
            blocks = [b._replace(step=step or NO_STEP) for b, step in zip(blocks, steps)]
        if around:
            return Claimed([], blocks, [])
        planned = self.order is not None
        pairs = [(b, objs[b.key]) for b in blocks]
        return self.ledger.claim(pairs, now, prefetch, planned, self.near_steps, conn)

    def _start(
        self,
        missing: list[tuple[Need, int]],
        now: int | None,
        prefetch: bool,
        result: Claimed | None,
    ) -> Started:
        """Claim what ``result`` left (or all of ``missing`` when None) and start the GETs:
        the blocks this process fetches by key, sorted by start."""
        if result is None:
            if not missing:
                return {}
            with self.ledger.write() as conn:
                result = self._claim(conn, missing, now, prefetch)
        while result.rest:  # the rest of a claim, a transaction's worth at a time
            planned = self.order is not None
            more = self.ledger.claim(result.rest, now, prefetch, planned, self.near_steps)
            result = Claimed(
                result.claimed + more.claimed,
                result.deferred + more.deferred,
                result.overlapping + more.overlapping,
            )
        started: Started = {}
        self._filler.start()
        around_cache = [] if prefetch else result.deferred  # no room: read around the cache
        self.bypassed += sum(b.size for b in around_cache)
        fetch = [b for b, _ in result.claimed] + around_cache
        put = self._filler.put
        for _, block_id in result.claimed:  # in flight before its GET can finish (_filled)
            self._inflight[block_id] = None
        futures = self.fetcher.submit_many(
            [(b.key, b.start, b.end, self.etags.get(b.key)) for b in fetch],
            [functools.partial(put, block_id) for _, block_id in result.claimed],
        )  # the claimed blocks come first in ``fetch``: each is filled in once fetched
        with self._inflight_lock:  # a block the writer filled meanwhile stays out (was: put
            for (_, block_id), future in zip(result.claimed, futures):  # back, in flight
                if block_id in self._inflight:  # for good: drain() waited its 60 s out)
                    self._inflight[block_id] = future
        for block, future in zip(fetch, futures):
            started.setdefault(block.key, []).append((block.start, block.end, future))
        if prefetch:
            later = result.deferred + result.overlapping
            self._deferred.extend(needs_in([n for n, _ in missing], later))
            self._deferred.sort(key=_STEP)  # sorted runs: linear
        for group in started.values():
            group.sort(key=lambda b: b[0])
        return started


def _window(needs: list[Need], budget: int, now: int) -> tuple[list[Need], list[Need]]:
    """``needs`` (sorted by step) from step ``now`` on, split into the soonest (every need
    of the first step, then more while their bytes stay within ``budget``) and the rest.
    Looks at the window only (was: filter and sort all of them at every read: an epoch's
    order held ~12,800 needs here, ~0.1 ms a cold document)."""
    lo = bisect.bisect_left(needs, now, key=_STEP)
    total = 0
    for at in range(lo, len(needs)):
        need = needs[at]
        total += need.end - need.start
        if total > budget and need.step > needs[lo].step:
            return needs[lo:at], needs[at:]
    return needs[lo:], []
