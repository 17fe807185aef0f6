"""What one loader tells the node cache ahead: its epoch's order, and a window to fetch.

A loader knows its order before it reads (``(seed, epoch)`` fix it), and tells it through the
announce route (:mod:`lading.loading.announce`) from the process and thread that iterates.
Its :class:`Planner` (one a loader and cache, owned by the loader's reads; used by one thread
at a time) turns that into the cache's two inputs:

- :meth:`Planner.plan`: the epoch's whole order (a :class:`~lading.remote.schedule.Schedule`);
  every cached block it reads gets its first planned use as its next use, which eviction by
  next use reads (the node's other processes see it: it is in the ledger);
- :meth:`Planner.prefetch`: the next batches' ranges, fetched a window ahead (but a range larger
  than a region, read around the cache at its read, never claimed ahead: on sessions at a
  0.39 MiB cap every call claimed one and found no room, 184 of 874 calls): the window holds
  at most :data:`AHEAD_SHARE` of the cap (a window larger than the cap evicts its own blocks
  before they are read: measured, 2.56x the bytes used fetched at 2 % of 100k documents); the
  rest waits and is fetched as steps pass; what finds no room now (every region holds blocks
  planned sooner) is tried again at most a few steps' bytes a call, the room that reads free
  (each call trying all of it again cost ~0.5 ms of CPU a document at a 10 % cap, measured),
  and with the epoch's order known only at a call where room may have come: this loader's
  clock, or the window eviction keeps (:data:`~.places.WINDOW` steps ahead), passed a
  planned read (next uses move on at those steps), or :data:`_RETRY_EVERY` steps passed (a
  GET settled, another process's reads); the other calls would find none (measured on
  sessions at a 25 % cap: 648 of 874 calls found no room, 1.9 of 9.9 us of CPU a session);
- as steps pass (:meth:`Planner.advance`, before each prefetch that claims, else every
  :data:`ADVANCE_EVERY` steps), the blocks read before the current step get their next
  planned use after it (meanwhile a passed use reads as none to another process's claim, at
  most that many steps): reads themselves write nothing (a
  DataLoader worker reads at its batch's step, the planner in the main process moves on).
  A reader of each range once an epoch moves on at each step only the blocks read again
  within the epoch and less than :data:`HOLD_STEPS` ahead (the window records the later
  ones' uses when it announces their reads); those read next in a later epoch, when the
  clock crosses into it. Until then their passed use reads as none to eviction, so the
  window ahead may take their regions: moving every one on at each step kept its retries
  from finding room (client CPU a cold document 0.81-0.90x with them left, same epoch-2 hits:
  benchmarks/RESULTS.md, "Remote: the data plane").
"""

from __future__ import annotations

import bisect
import contextlib
import operator
from collections.abc import Iterator

from lading.errors import OutOfSpaceError
from lading.remote.cache.claims import Claimed
from lading.remote.cache.places import WINDOW
from lading.remote.cache.reads import NodeCache
from lading.remote.cancel import closed_reason
from lading.remote.fetch import Future
from lading.remote.ranges import Need
from lading.remote.schedule import Schedule, Span
from lading.step import STEPS_PER_EPOCH

AHEAD_SHARE = 0.125  # the window's bytes ahead at most this share of the cap
_RETRY_STEPS = 4  # what found no room is tried again this many steps' bytes a call
_RETRY_EVERY = WINDOW  # steps: with an order known, tried again at least this often
_STEP = operator.attrgetter("step")
HOLD_STEPS = 2 * WINDOW  # a once-reader moves a block on within an epoch only this near
# with nothing to claim, next uses move on every this many steps (a claim moves them first):
# every step, a ledger lookup and UPDATE was 0.37 of 1.36 s of CPU an epoch of whole blocks
ADVANCE_EVERY = 8


class Planner:
    """One loader's plan of ``cache`` (see the module doc).

    Args:
        cache: the node cache of the objects the loader reads.
        near: with an order known, a prefetch this many steps ahead or fewer may evict planned
            blocks (as its read would); 0 keeps every planned block for its use (the next
            epoch's hits at a small cap), which LM loaders, whose next epoch rarely hits,
            raise (:data:`lading.lm.remote_reads.NEAR_STEPS`).
        share: the window's bytes ahead at most this share of the cap (default
            :data:`AHEAD_SHARE`); a reader of whole blocks that many batches share (the LM
            locality shuffle) raises it to hold the blocks it reads and the next ones.
        once: the reader reads each range once an epoch (documents): a plan is recorded in
            the ledger (:meth:`.Ledger.order`), so that a read at a planned step in another
            process (a DataLoader worker, whose store holds no plan) reads as planned.
    """

    def __init__(
        self, cache: NodeCache, near: int = 0, share: float = AHEAD_SHARE, once: bool = False
    ) -> None:
        self.cache, self.near, self.share, self.once = cache, near, share, once
        self.forked()
        cache.planners.add(self)  # (its fork rule: the cache's, below)

    def forked(self) -> None:
        """What this process was told, forgotten; at its making, and in a forked child (a
        DataLoader worker under ``fork``), where the plan and the window are the parent's and
        its loader goes on telling them: the child reads in the order the ledger recorded
        (:meth:`.Ledger.order`). Kept, each worker fetched its parent's window again from its
        copy at every read (:meth:`follow`: 8 batches' ranges claimed in one transaction a
        batch, 6-110 ms of a worker's CPU in ``benchmarks/remote_step.py``)."""
        self.schedule: Schedule | None = None
        self._pending: list[Need] = []  # announced, not yet tried (sorted by step)
        self._deferred: list[Need] = []  # tried, found no room (sorted by step)
        self._step_bytes = 0  # bytes a step reads (the last announcement's mean)
        self._ahead: list[Need] = []  # announced and not yet read, with no schedule given
        self._advanced = 0  # blocks read before this step had their next uses moved on
        self._retried = -1  # the step of the last retry (with an order known)
        self._followed = (0, 0)  # follow(): the step last read, the step handed up to
        # the GETs its prefetches started, not yet settled: each drops out as it settles, on
        # the fetch loop's thread (a settled one's bytes are not held here); a set's add,
        # discard and copy are each atomic, so no lock (none to be held at a fork)
        self._started: set[Future] = set()

    def plan(self, schedule: Schedule) -> None:
        """Take ``schedule`` (the reads from its first step on) as what eviction keeps."""
        self.schedule = schedule
        self._advanced = schedule.first_step
        self._followed = (schedule.first_step, schedule.first_step)
        self._move_all(schedule, schedule.first_step, self.once)

    def _move_all(self, schedule: Schedule, now: int, order: bool = False) -> None:
        """Give every cached block of ``schedule``'s objects its first planned use from step
        ``now`` on (``order``: and record the order in the ledger, :meth:`.Ledger.order`)."""
        with _hint(self.cache):
            self._moved_all(schedule, now, order)

    def _moved_all(self, schedule: Schedule, now: int, order: bool) -> None:
        cache = self.cache
        objects = {cache.obj(key): key for key in schedule.objects()}
        if not objects:
            return
        with cache.ledger.read() as conn:
            rows = cache.ledger.blocks_of(conn, list(objects))
        steps = schedule.next_use_many([(objects[o], a, b) for o, a, b in rows], now)
        with cache.ledger.write() as conn:
            cache.ledger.set_uses(conn, [(now, s, o, a) for (o, a, _), s in zip(rows, steps)])
            if order:
                cache.ledger.order(conn, objects, schedule.first_step, schedule.last_step)

    def prefetch(self, needs: list[Need], now: int) -> None:
        """Fetch ``needs`` (ranges and the step each is read at) a window ahead of step
        ``now`` (the one being read); returns at once."""
        if self.schedule is None:  # the window is all it knows: what advance() reads
            self._ahead = [n for n in self._ahead if n.step >= self._advanced] + list(needs)
        elif not needs and not self._pending and not self._deferred:
            if now - self._advanced >= ADVANCE_EVERY:  # nothing to claim: the steps move on
                self.advance(now)
            return
        retry_now = self._room_may_have_come(now)
        self.advance(now)
        largest = self.cache.max_block  # a larger range is read around the cache: never ahead
        fresh = sorted((n for n in needs if 0 < n.end - n.start <= largest), key=_STEP)
        if fresh:
            steps = len({n.step for n in fresh})
            self._step_bytes = sum(n.end - n.start for n in fresh) // steps
        pending = _from(self._pending, now)
        pending = sorted([*pending, *fresh], key=_STEP)  # two sorted runs: linear
        budget, total, take = int(self.cache.cap * self.share), 0, 0
        while take < len(pending):
            need = pending[take]
            total += need.end - need.start
            if need.step > now and total > budget and take:
                break
            take += 1
        deferred, retry, tried = _from(self._deferred, now), 0, 0
        while retry_now and retry < len(deferred) and tried <= _RETRY_STEPS * self._step_bytes:
            tried += deferred[retry].end - deferred[retry].start
            retry += 1
        near = None if self.schedule is None else self.near
        tries = sorted([*deferred[:retry], *pending[:take]], key=_STEP)
        claimed = Claimed({}, [], 0, tries, tries)  # (nothing claimed: tried again later)
        with _hint(self.cache):
            claimed = self.cache.fetch_ahead(tries, now, near, self.once)
        later = claimed.late
        for gets in claimed.started.values():
            for _, _, future in gets:
                self._started.add(future)
                future.add_done_callback(self._started.discard)
        self._deferred = (
            sorted([*later, *deferred[retry:]], key=_STEP) if later or retry else deferred
        )
        self._pending = pending[take:]

    def settle(self, timeout: float) -> bool:
        """Wait, at most ``timeout`` seconds, until the GETs this planner's prefetches started
        are answered (not those of another loader reading the same objects: a loader closing
        beside a training loader that keeps fetching would wait out its deadline); whether
        they all are. Those still unanswered then are given up (:meth:`Fetcher.abandon`): a
        stalled server's GET is neither sent again nor retried for a loader that closed. (A
        remote store's planner is the store object's, shared by the loaders over it: a close
        on a stalled server gives up theirs too, and their reads fetch those ranges again.)"""
        fetcher, started = self.cache.fetcher, self._started.copy()
        if fetcher.wait_settled(timeout, started):
            return True
        fetcher.abandon(started, closed_reason())
        return False

    def follow(self, now: int, ahead: int) -> None:
        """With no loader announcing (a loop of reads along the plan): :meth:`prefetch` the
        schedule's reads at steps ``now .. now + ahead - 1`` that no earlier call handed over;
        a step read before the last one (a pass again) hands its window again. Handing the
        whole window at every read claimed each document ``ahead`` times: 0.28 of 0.51 ms of
        client CPU a cold document (benchmarks/remote_cpu.py, 100k passages, 64 a batch)."""
        schedule = self.schedule
        if schedule is None:
            return
        last, upto = self._followed
        if now < last:  # a pass again: its window is handed again
            upto = now
        first, stop = max(now, upto), max(upto, now + ahead)
        self._followed = (now, stop)
        self.prefetch(schedule.needs(first, stop) if first < stop else [], now)

    def _room_may_have_come(self, now: int) -> bool:
        """Whether what found no room is worth trying again at step ``now`` (see the module
        doc); with no order known (or ``near``), always."""
        schedule, last = self.schedule, self._retried
        if schedule is None or self.near or not self._deferred:
            return True
        if now == last:
            return False
        may = (
            now - last >= _RETRY_EVERY
            or schedule.reads_between(last, now)  # reads passed: next uses moved on
            or schedule.reads_between(last + WINDOW, now + WINDOW)  # into eviction's window
        )
        if may:
            self._retried = now
        return may

    def advance(self, now: int) -> None:
        """Move the next use of the blocks the schedule read before step ``now`` on to their
        next planned read (the reads may have been another process's: DataLoader workers);
        with no schedule given, the next one the window announced."""
        schedule = self.schedule
        if schedule is None and self._ahead:
            schedule = Schedule(self._ahead, self._advanced)
        if schedule is None or now <= self._advanced:
            return
        upto = min(now, schedule.last_step)
        if self.once and now < schedule.last_step and _epoch(now) > _epoch(self._advanced):
            self._advanced = upto  # the clock crossed into an epoch: its reads are next
            self._move_all(schedule, now)
            return
        if not schedule.reads_between(self._advanced, upto):
            self._advanced = max(self._advanced, upto)
            return
        # a reader of each range once an epoch (documents) has its blocks coalesced from
        # touching reads only: the ranges whose run of touching reads is not read again
        # within the epoch are in blocks with no later use in it, whose passed next use
        # eviction reads as none until the clock crosses into the next epoch (above):
        # looking them up was 0.03 of 0.11 ms of main-thread CPU a cold document
        # (benchmarks/remote_cpu.py), and moving them on to the next epoch's reads at each
        # step kept the window's retries from finding room (benchmarks/RESULTS.md)
        spans = schedule.spans(self._advanced, upto, now if self.once else None)
        self._advanced = max(self._advanced, upto)
        if not spans:
            return
        with _hint(self.cache):
            self._moved_on(spans, schedule, now)

    def _moved_on(self, spans: list[Span], schedule: Schedule, now: int) -> None:
        """:meth:`advance`'s ledger work: the next uses of the blocks of ``spans``."""
        cache = self.cache
        keys = [(cache.obj(key), a, b) for key, a, b in spans]
        with cache.ledger.read() as conn:
            found = cache.ledger.overlapping(conn, keys)
        blocks = {
            (k[0], p.start): (key, p.start, p.end)
            for (key, _, _), k, pieces in zip(spans, keys, found)
            for p in pieces
        }
        steps = schedule.next_use_many(list(blocks.values()), now)
        rows = [(now, s, o, a) for (o, a), s in zip(blocks, steps)]
        if self.once:  # read again far ahead: the window records it when announced
            hold = now + HOLD_STEPS
            rows = [r for r in rows if r[1] is not None and r[1] < hold]
            if not rows:
                return
        with cache.ledger.write() as conn:
            cache.ledger.set_uses(conn, rows)


@contextlib.contextmanager
def _hint(cache: NodeCache) -> Iterator[None]:
    """A plan's or a window's write to the ledger, given up where the disk under the cache
    is full (said once, as a fill the ledger refuses is): the reads go on without it, and a
    read's own claim that meets the same fetches around the cache (:class:`.NodeCache`)."""
    try:
        yield
    except OutOfSpaceError as e:
        cache.node.filler.warn(e)


def _epoch(step: int) -> int:
    return step // STEPS_PER_EPOCH


def _from(needs: list[Need], now: int) -> list[Need]:
    """``needs`` (sorted by step) from step ``now`` on: the passed ones are read without."""
    return needs[bisect.bisect_left(needs, now, key=_STEP) :]
