"""Many GETs in flight from one thread, each call retried under one deadline.

A ranged GET spends ~30 ms waiting and ~70-190 us of client CPU, so throughput is requests in
flight / latency (Little's law): 128 in flight at 30 ms is ~4,200 GETs/s. Every fetcher of a
process submits to the one fetch loop (:mod:`lading.remote.loop`); callers get :class:`Future`
objects, or block on :meth:`Fetcher.read`.

The requests of one submission are grouped by object into *calls* of up to
:data:`CALL_RANGES` ranges, each one ``await`` of the client's ``get_ranges`` (obstore runs a
call's requests side by side in Rust, up to 10 at once; measured here: 69-88 us of client CPU
a GET where one ``await`` per GET cost 110-190 us). A call is never merged into fewer
requests: the planner (:mod:`lading.remote.ranges`) already decided what one GET holds.

Pinning: a GET of a pinned object sends ``If-Match`` with the ETag the snapshot recorded, so a
replaced object is refused, never read. ``get_ranges`` cannot send it, so a call sends one of
its ranges as its own pinned GET when the object's last check is over :data:`PIN_S` old (the
first call to an object always): a replaced object is caught at its first read and within a
second after. Calls in that second are not pinned: an object overwritten in place (same
names, no new manifest) may be read with its new bytes until the next check. Each future
says which it was (:attr:`Future.checked`: when its pinned request was sent, else None), and
the fetcher when each object's last check passed (:meth:`Fetcher.passed`): the node cache
keeps a block filled from an unpinned GET as unconfirmed and serves it only once a check of
its object sent after its bytes came has passed, asking for one (:meth:`Fetcher.confirm`,
a one-byte pinned GET) when none has (:mod:`lading.remote.cache.reads`): a process that
stops, or is killed, before its next check leaves no new bytes trusted. Once a check is
refused, the fetcher remembers the object (:meth:`Fetcher.changed`) and pins every later call
of it, and the node cache drops its blocks (:meth:`lading.remote.cache.NodeCache.read`).

Deadline (:class:`lading.deadline.Deadline`): a call that fails (a 5xx, a dropped connection,
a short body) or takes longer than ``timeout`` is retried with backoff for the ranges it has
not returned yet, ``retries`` times; then :class:`RemoteReadError` names the object, range,
attempts and last error. A missing or replaced object, or access denied, is not retried.

Ends: :meth:`Fetcher.close` settles every unsettled future with an error saying so and sends
nothing after: a call still queued for a slot, or between a failed attempt and its retry,
stops there; a fetcher used after ``close`` refuses, naming the fix.

Over 400 lines, as one idea: the calls, their deadline and their end share the fetcher's
state (its unsettled futures, its slots, ``closed``), and split they would reach into it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from lading.deadline import DEFAULT_BACKOFF, DEFAULT_RETRIES, DEFAULT_TIMEOUT, TIMEOUT_ENV, Deadline
from lading.errors import LoaderClosedError, RemoteChangedError, RemoteNotFoundError
from lading.remote.cancel import Cancel, current
from lading.remote.loop import running
from lading.remote.objects import (
    EXTRA_REQUESTS,
    ObjectClient,
    ObjectInfo,
    PermanentError,
    RemoteReadError,
    changed,
    describe,
)
from lading.remote.slots import NodeSlots
from lading.threads import carry, register

T = TypeVar("T")

__all__ = [
    "DEFAULT_BACKOFF",
    "DEFAULT_RETRIES",
    "DEFAULT_TIMEOUT",
    "TIMEOUT_ENV",
    "Fetcher",
    "Future",
]

DEFAULT_IN_FLIGHT = 128  # > 64: at 30 ms a GET, 128 in flight serve ~4,200 GETs/s
CALL_RANGES = 10  # ranges a call: obstore's get_ranges runs at most 10 requests of one at once
PIN_S = 1.0  # a call checks its object's ETag when the last check is older than this
CLOSED = "{!r} was closed while this GET was in flight; open the store or corpus again"
REFUSED = "{!r} was closed: nothing is fetched after close(); open the store or corpus again"


class ClosedError(RemoteReadError):
    """A GET settled by its fetcher's ``close`` before an answer came: another view of the
    node cache waiting on it reads the block again through its own fetcher."""


class CancelledError(ClosedError, LoaderClosedError):
    """A GET made for a loader that closed (:mod:`lading.remote.cancel`): not sent, not
    retried, no longer waited for. A node cache's other readers that shared it take it as
    a :class:`ClosedError`: they read the block again through a call of their own."""


Request = tuple[str, int, int, str | None]  # key, start, end, etag (None: not pinned)


class Future:
    """The bytes of one GET, once fetched: ``result()`` waits for them (or raises the GET's
    error). Lighter than ``concurrent.futures.Future`` (one condition per batch of GETs, not
    one per GET: ~35 us saved a GET). Callbacks run on the fetch loop's thread.

    Attributes:
        checked: once settled with bytes, when (``time.time()``) the ``If-Match`` request
            that returned them was sent; None where they came from a request without it
            (of an unpinned call, or beside a call's pinned range): another version's bytes
            if the object was overwritten in place shortly before.
        sent: when (``time.monotonic()``) its latest attempt began (queued for a slot, or
            sent); 0.0 before the first. A read that joins the GET and sees it fail sends it
            again where this is before the read began (:mod:`lading.remote.cache.reads`).
    """

    __slots__ = ("_callbacks", "_cond", "_data", "_done", "_error", "checked", "sent")

    def __init__(self, cond: threading.Condition) -> None:
        self._cond = cond
        self._data: bytes | None = None
        self._error: BaseException | None = None
        self._done = False
        self._callbacks: list[Callable[[Future], None]] = []
        self.checked: float | None = None
        self.sent = 0.0

    def done(self) -> bool:
        return self._done

    def failed(self) -> bool:
        """Whether it settled with an error (never waits)."""
        return self._done and self._error is not None

    def result(self, timeout: float | None = None) -> bytes:
        """The bytes, waiting up to ``timeout`` seconds (None: until the GET's deadline
        settles it, or its fetcher closes).

        A wait in a loader's read (under its :class:`~lading.remote.cancel.Cancel`) ends when
        the loader closes, though another made the GET (its announcer's prefetch): the GET
        goes on for its maker.

        Raises:
            RemoteReadError: the GET failed for good, or its fetcher closed.
            CancelledError: the loader this thread reads for closed first.
            TimeoutError: not fetched within ``timeout``.
        """
        if not self._done:
            cancel = current()
            with self._cond:
                if cancel is None:
                    if not self._cond.wait_for(lambda: self._done, timeout):
                        raise TimeoutError(f"a GET is still running after {timeout}s")
                else:
                    with cancel.waking(self._cond):
                        ended = self._cond.wait_for(lambda: self._done or cancel.cancelled, timeout)
                    if not ended:
                        raise TimeoutError(f"a GET is still running after {timeout}s")
                    if not self._done:
                        raise CancelledError(cancel.reason())
        if self._error is not None:
            raise self._error
        assert self._data is not None
        return self._data

    def add_done_callback(self, fn: Callable[[Future], None]) -> None:
        """Run ``fn(self)`` once settled: on the fetch loop's thread, or here and now if it
        is settled already."""
        with self._cond:
            if not self._done:
                self._callbacks.append(fn)
                return
        fn(self)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The GET's error, or None once it succeeded (waits for it)."""
        try:
            self.result(timeout)
        except (RemoteReadError, OSError) as e:
            return e
        return None


class Fetcher:
    """Issues ranged GETs through ``make_client()``'s client, ``in_flight`` at a time.

    Args:
        make_client: builds the object client (called again in a forked child, which may
            need another backend: see :mod:`lading.remote.objects`).
        in_flight: GETs outstanding at once (>= 1).
        retries, timeout, backoff: the deadline of every call (:class:`lading.deadline.Deadline`).
        node: a directory of the node's slot files: ``in_flight`` then caps the GETs in
            flight of every process that passes it (:mod:`lading.remote.slots`).
        pin_every: send ``If-Match`` with every GET of a pinned object (one range a call),
            for bytes that must never mix two versions (a parquet row group read at its old
            footer's offsets from a rewritten file).

    Attributes:
        gets: requests sent by this fetcher (retries included).
        bytes_fetched: bytes those requests returned.
        retried: attempts that failed and were retried.
    """

    def __init__(
        self,
        make_client: Callable[[], ObjectClient],
        *,
        in_flight: int = DEFAULT_IN_FLIGHT,
        retries: int = DEFAULT_RETRIES,
        timeout: float = DEFAULT_TIMEOUT,
        backoff: float = DEFAULT_BACKOFF,
        node: Path | None = None,
        pin_every: bool = False,
    ) -> None:
        if in_flight < 1:
            raise ValueError(f"in_flight={in_flight}: need >= 1")
        self.deadline = Deadline(timeout, retries, backoff)
        self.make_client, self.in_flight, self.pin_every = make_client, in_flight, pin_every
        self.gets = self.bytes_fetched = self.retried = 0
        self.node = None if node is None else NodeSlots(node, max(1, in_flight // CALL_RANGES))
        self.closed = False
        self._lock = threading.Lock()
        self._client: ObjectClient | None = None
        self._said: str | None = None  # what it was, once closed (its client let go)
        self._endpoint = ""  # its client's, kept past close for the messages of calls in flight
        self._unsettled: set[Future] = set()  # submitted, not yet settled
        self._slots: asyncio.Semaphore | None = None
        self._checked: dict[str, float] = {}  # object -> when a call last sent If-Match
        self._changed: set[str] = set()  # objects whose pinned GET was refused: pinned always
        self._passed: dict[str, float] = {}  # object -> when its last passed check was sent
        self._tasks: set[asyncio.Task[None]] = set()
        self._runs: set[concurrent.futures.Future[object]] = set()  # whole calls waited on
        register(self, "fetch")

    @property
    def timeout(self) -> float:
        return self.deadline.timeout

    @property
    def retries(self) -> int:
        return self.deadline.retries

    @property
    def client(self) -> ObjectClient:
        """This process's client (made on first use, and again in a forked child)."""
        with self._lock:
            if self.closed:
                raise RemoteReadError(REFUSED.format(self))
            if self._client is None:
                self._client = self.make_client()
                self._endpoint = str(getattr(self._client, "endpoint", "") or "")
            return self._client

    def __repr__(self) -> str:
        return f"Fetcher({self._client!r})" if self._said is None else self._said

    def submit(self, key: str, start: int, end: int, etag: str | None = None) -> Future:
        """Start fetching bytes ``[start, end)`` of ``key``; the future holds the bytes."""
        return self.submit_many([(key, start, end, etag)])[0]

    def submit_many(
        self,
        requests: Sequence[Request],
        callbacks: Sequence[Callable[[Future], None] | None] | None = None,
    ) -> list[Future]:
        """Start fetching every request (one wake-up of the loop for all of them);
        ``callbacks[i]`` (if given and not None) runs once request ``i`` is settled."""
        cancel = current()  # the loader these GETs are made for, if any (closes them)
        refuse_if_cancelled(cancel)
        client = self.client
        loop = running(client)
        cond = threading.Condition()
        futures = [Future(cond) for _ in requests]
        if callbacks is not None:
            for future, callback in zip(futures, callbacks):
                if callback is not None:
                    future._callbacks.append(callback)
        if requests:
            with self._lock:  # closed since ``self.client`` looked? then close swept without
                if self.closed:  # these, and their launch would see "closed": refused here
                    raise RemoteReadError(REFUSED.format(self))
                self._unsettled.update(futures)
            if cancel is not None and not cancel.track(self, futures):
                self.cancelled(futures, cancel)  # cancelled just now: none is sent
                refuse_if_cancelled(cancel)
            loop.call_soon_threadsafe(self._launch, list(requests), futures, cancel)
        return futures

    def read(self, requests: Sequence[Request]) -> list[bytes]:
        """Fetch every request concurrently; the bytes in request order.

        Raises:
            RemoteReadError: the first request that failed for good.
        """
        return [f.result() for f in self.submit_many(requests)]

    def _launch(
        self, requests: list[Request], futures: list[Future], cancel: Cancel | None
    ) -> None:
        if self.closed or (cancel is not None and cancel.cancelled):  # settled by the close
            return  # (submitted just before it): never sent
        calls: dict[tuple[str, str | None], list[int]] = {}
        for i, (key, _, _, etag) in enumerate(requests):
            calls.setdefault((key, etag), []).append(i)
        now = time.monotonic()
        for (key, etag), members in calls.items():
            every = self.pin_every and etag is not None  # each range its own pinned GET
            size = 1 if every else CALL_RANGES
            for lo in range(0, len(members), size):
                part = members[lo : lo + size]
                ranges = [(requests[i][1], requests[i][2]) for i in part]
                pin, last = etag, self._checked.get(key)
                recent = last is not None and now - last < PIN_S and key not in self._changed
                if not every and etag is not None and recent:
                    pin = None  # checked under a second ago: this call needs no If-Match
                elif etag is not None:
                    self._checked[key] = now
                task = asyncio.ensure_future(
                    self._run(key, pin, ranges, [futures[i] for i in part], cancel)
                )
                self._tasks.add(task)  # a running task must be referenced (asyncio: weak)
                task.add_done_callback(self._tasks.discard)

    async def _run(
        self,
        key: str,
        etag: str | None,
        ranges: list[tuple[int, int]],
        futures: list[Future],
        cancel: Cancel | None,
    ) -> None:
        try:
            datas, checked = await self._get(key, etag, ranges, cancel, futures)
        except BaseException as e:
            self._settle(futures, None, e)
        else:
            self._settle(futures, datas, None, checked)

    async def _get(
        self,
        key: str,
        etag: str | None,
        ranges: list[tuple[int, int]],
        cancel: Cancel | None,
        futures: Sequence[Future] = (),
    ) -> tuple[list[bytes], list[float | None]]:
        """The bytes of ``ranges`` of ``key``: one call an attempt, of the ranges not yet in;
        and for each, when the ``If-Match`` request that returned it was sent (None: sent
        without). An attempt whose ``futures`` are all settled already (given up by their
        reader: :meth:`abandon`, a close) is not sent."""
        if self._slots is None:  # made on the loop's thread, in the process that runs it
            self._slots = asyncio.Semaphore(max(1, self.in_flight // CALL_RANGES))
        client, slots = self._client, self._slots
        if client is None:  # closed since the call was queued (close lets the client go)
            self._refuse_if_closed()
        assert client is not None
        out: list[bytes | None] = [None] * len(ranges)
        checked: list[float | None] = [None] * len(ranges)
        todo = list(range(len(ranges)))
        ends = time.monotonic() + self.deadline.total  # queued or sent, the GET's bound

        async def attempt() -> list[bytes]:
            nonlocal todo
            asked = [ranges[i] for i in todo]
            began = time.monotonic()  # (before the wait for a slot: a queued attempt counts)
            for future in futures:
                future.sent = began
            if slots.locked():  # (free: no timer, the common case costs nothing more)
                await _queued(slots.acquire(), ends, "the fetcher's request slots")
            else:
                await slots.acquire()
            try:
                slot = None
                if self.node is not None:
                    slot = await _queued(self.node.acquire(ends), ends, "the node's slots")
                try:
                    self._refuse_if_closed(cancel)  # queued for a slot at close: not sent
                    self._refuse_if_abandoned(futures)
                    self.gets += requests_sent(client, asked, etag)
                    sent, more = time.time(), [0]
                    counting = EXTRA_REQUESTS.set(more)  # (this task's: a fallback's GETs)
                    try:  # timed from here: the wait for a slot is no attempt's
                        datas = await _within(get_ranges(client, key, asked, etag), self.timeout)
                    finally:
                        EXTRA_REQUESTS.reset(counting)
                        self.gets += more[0]
                finally:
                    if slot is not None and self.node is not None:
                        self.node.release(slot)
            finally:
                slots.release()
            pinned = pinned_ranges(client, len(asked), etag)
            if pinned:  # its If-Match passed: the object was the snapshot's when sent
                self._passed[key] = max(sent, self._passed.get(key, sent))
            self.bytes_fetched += bytes_received(client, asked, datas, etag)
            short = []
            for n, (i, (start, end), data) in enumerate(zip(todo, asked, datas)):
                if len(data) == end - start:
                    out[i] = data
                    checked[i] = sent if n < pinned else None
                else:
                    short.append(i)
            todo = short
            if short:
                start, end = ranges[short[0]]
                raise OSError(f"bytes {start}-{end - 1} came back short ({len(short)} ranges)")
            return out  # type: ignore[return-value]  # every range is in

        first, last = ranges[0]
        what = f"GET {describe(client.url, key, first, last)}"
        try:
            return await self._attempts(what, attempt, cancel, timed=False), checked
        except RemoteNotFoundError:  # the snapshot opened lists it: gone since
            self._note_changed(key)
            raise changed(client.url, key, client.endpoint, f"bytes {first}-{last - 1}") from None
        except (PermanentError, QueuedPastDeadlineError) as e:  # (named: which GET)
            if isinstance(e, RemoteChangedError):
                self._note_changed(key)
            raise type(e)(f"{what}: {e}") from None

    def _note_changed(self, key: str) -> None:
        with self._lock:
            self._changed.add(key)

    def passed(self, key: str) -> float | None:
        """When (``time.time()``) the last ``If-Match`` request of object ``key`` that passed
        was sent, None if none did: bytes of it that came before then are the snapshot's."""
        return self._passed.get(key)

    def confirm(self, checks: Sequence[tuple[str, str]]) -> dict[str, float]:
        """Check each ``(key, etag)``'s version now, side by side: one GET of its first byte
        with ``If-Match``, always (a call :meth:`_launch` would leave unpinned), under the
        deadline; when each check that passed was sent (:meth:`passed` is updated too).

        A client that cannot send ``If-Match`` (``pins`` false: fsspec but for s3fs) checks
        nothing: none passed, and its blocks are served as every read of it is, unpinned.

        Raises:
            RemoteChangedError: an object was deleted or replaced (it joins :meth:`changed`).
            RemoteReadError: a check failed for good.
        """
        if not checks or not getattr(self.client, "pins", True):
            return {}

        async def check(key: str, etag: str, cancel: Cancel | None) -> tuple[str, float]:
            self._checked[key] = time.monotonic()  # (the loop's: its next call needs no pin)
            _, checked = await self._get(key, etag, [(0, 1)], cancel)
            assert checked[0] is not None  # one range with an etag: its request was pinned
            return key, checked[0]

        async def checking(cancel: Cancel | None) -> list[tuple[str, float]]:
            return list(await asyncio.gather(*(check(k, e, cancel) for k, e in checks)))

        return dict(self._on_loop(checking))

    def changed(self) -> frozenset[str]:
        """The objects this fetcher found deleted or replaced since the snapshot opened (a
        pinned GET refused): every later call of one is pinned, and bytes of it read in the
        second before the refusal (:data:`PIN_S`) may be another version's."""
        with self._lock:
            return frozenset(self._changed)

    # -- the rest of the read path: the manifest and the listing, under the same deadline ----

    def get_object(self, key: str) -> bytes:
        """The whole object ``key`` (a manifest), retried and timed out as a ranged GET is.

        Raises:
            PermanentError: the object or its bucket does not exist (not retried).
            RemoteReadError: every attempt failed or timed out (names endpoint and setting).
        """
        client = self.client
        return self.run(f"GET {describe(client.url, key)}", lambda: client.get_async(key))

    def list(self, prefix: str = "") -> dict[str, ObjectInfo]:
        """Every object below ``prefix``, retried and timed out as a ranged GET is."""
        client = self.client
        what = f"LIST {describe(client.url, prefix) if prefix else client.url + '/'}"
        return self.run(what, lambda: client.list_async(prefix))

    def run(self, what: str, attempt: Callable[[], Awaitable[T]]) -> T:
        """Run ``attempt()`` on the fetch loop under the deadline; this thread waits for the
        outcome (at most the deadline's total and a second)."""
        return self._on_loop(lambda cancel: self._attempts(what, attempt, cancel))

    def _on_loop(self, make: Callable[[Cancel | None], Coroutine[Any, Any, T]]) -> T:
        """Run ``make(cancel)`` (attempts under the deadline) on the fetch loop; this thread
        waits for the outcome (at most the deadline's total and a second). A close, of the
        fetcher or of the loader it runs for, cancels it: the waiter hears so at once."""
        cancel = current()
        refuse_if_cancelled(cancel)
        loop = running(self.client)
        future = asyncio.run_coroutine_threadsafe(make(cancel), loop)
        with self._lock:  # (close cancels it: its caller hears "closed" at once)
            if self.closed:
                future.cancel()
                raise RemoteReadError(REFUSED.format(self))
            self._runs.add(future)  # type: ignore[arg-type]
        if cancel is not None and not cancel.track(self, [future]):  # closed just now
            future.cancel()
        try:
            return future.result(self.deadline.total + 1.0)
        except concurrent.futures.CancelledError:
            refuse_if_cancelled(cancel)  # the loader it was for closed: ends with it
            raise ClosedError(CLOSED.format(self)) from None
        finally:
            with self._lock:
                self._runs.discard(future)

    async def _attempts(
        self,
        what: str,
        attempt: Callable[[], Awaitable[T]],
        cancel: Cancel | None = None,
        timed: bool = True,
    ) -> T:
        """``attempt()`` until one succeeds, under the deadline's pauses; each within the
        timeout, or (``timed`` False) timed by ``attempt`` itself from when its request is
        sent: a ranged GET waits for one of the fetcher's slots first, and a wait behind a
        slow server's answers is no attempt of its (it timed out unsent and was retried
        beside the calls still running: a review saw 227 in flight for 120 slots)."""
        last: BaseException | None = None
        for n, pause in enumerate(self.deadline.pauses()):
            if n:
                self.retried += 1
                await asyncio.sleep(pause)
                self._refuse_if_closed(cancel)  # a failed attempt is not retried after close
            try:
                return await (_within(attempt(), self.timeout) if timed else attempt())
            except (PermanentError, CancelledError, QueuedPastDeadlineError):
                raise
            except asyncio.CancelledError as e:  # a client's own (a cancelled fsspec future)
                if _cancelled_here(self, cancel):
                    raise  # this task's cancellation (a close, the exit): it ends here
                if _ended(self, cancel):
                    raise ClosedError(CLOSED.format(self)) from None
                last = OSError(f"the client's call was cancelled ({e!r})")
                continue  # not this task's: a failed attempt, retried
            except (OSError, asyncio.TimeoutError) as e:
                last = e
                if isinstance(e, asyncio.TimeoutError) and not _ended(self, cancel):
                    self.deadline.no_answer(what, self._endpoint, n + 1)
        endpoint = self._endpoint
        raise RemoteReadError(self.deadline.gave_up(what, endpoint, last))

    def _settle(
        self,
        futures: Sequence[Future],
        datas: Sequence[bytes] | None,
        error: BaseException | None,
        checked: Sequence[float | None] | None = None,
    ) -> None:
        """Complete ``futures`` (one call's, sharing a condition) unless settled already
        (``checked``: when each one's pinned request was sent, None where unpinned)."""
        if checked is not None:  # (a future settled already, by a close, holds an error)
            for future, when in zip(futures, checked):
                future.checked = when
        with self._lock:
            live: Sequence[tuple[Future, bytes | None]] = [
                (f, None if datas is None else datas[i])
                for i, f in enumerate(futures)
                if f in self._unsettled
            ]
            self._unsettled.difference_update(f for f, _ in live)
        _settle(live, error)

    def wait_settled(self, timeout: float, among: set[Future] | None = None) -> bool:
        """Wait until every GET submitted so far (``among``: of those, the ones this fetcher
        sent: a forked child's fetcher sent none of its parent's) is settled (fetched, failed
        or closed), at most ``timeout`` seconds in all; whether they all are. GETs submitted
        meanwhile are not waited for. What a reader that stops calls so that nothing it asked
        for is sent after it returns (:meth:`lading.loading.loader.Loader.close`)."""
        with self._lock:
            pending = list(self._unsettled if among is None else self._unsettled & among)
        return _wait_done(pending, timeout)

    def close(self) -> None:
        """Settle every GET not yet settled with an error saying so, send none after (a call
        queued for a slot, or about to retry, stops there); returns at once (calls in flight
        end by their own timeout; at exit :mod:`.loop` drains them)."""
        with self._lock:
            self.closed = True
            live, self._unsettled = list(self._unsettled), set()
            runs, self._runs = list(self._runs), set()
            # its connection pool goes with it, at once (calls in flight hold their own):
            # kept, every socket it opened lived until a cycle collection dropped this
            self._said, self._client = repr(self), None
        _settle([(future, None) for future in live], ClosedError(CLOSED.format(self)))
        for run in runs:  # a whole-object GET or a LIST: its waiter raises ClosedError
            run.cancel()
        if self.node is not None:  # (its files: at once, or as the last call ends)
            self.node.close()

    def _refuse_if_closed(self, cancel: Cancel | None = None) -> None:
        """Raise, never to be retried, where a call would send a request after close (of
        this fetcher, or of the loader it was made for)."""
        if self.closed:
            raise PermanentError(CLOSED.format(self))
        refuse_if_cancelled(cancel)

    def abandon(self, futures: Iterable[Future], reason: str) -> None:
        """Settle ``futures`` (those not settled yet) with :class:`CancelledError` (``reason``):
        their reader stopped waiting (a loader's close, after the wait its deadline allows).
        A call whose every future is settled sends no further attempt: nothing is fetched or
        retried for them after."""
        self._settle(list(futures), None, CancelledError(reason))

    def _refuse_if_abandoned(self, futures: Sequence[Future]) -> None:
        """Raise where every one of a call's ``futures`` was settled before it was sent (by
        :meth:`abandon` or a cancel): nobody waits for its bytes."""
        if futures:
            with self._lock:
                waited = any(f in self._unsettled for f in futures)
            if not waited:
                raise CancelledError("no reader waits for this GET any more: not sent")

    def cancelled(self, futures: Sequence[Any], cancel: Cancel) -> None:
        """Settle ``futures`` (those not settled yet) as cancelled: the loader they were made
        for closed (:mod:`lading.remote.cancel`); their calls stop at the next send. A
        :meth:`run`'s future among them is cancelled on the loop: its waiter returns at
        once, its attempt in flight ends."""
        for future in futures:
            if isinstance(future, concurrent.futures.Future):
                future.cancel()
        ours = [f for f in futures if isinstance(f, Future)]
        self._settle(ours, None, CancelledError(cancel.reason()))

    def forked(self) -> None:
        """In a forked child: the parent's client, GETs and slots are not this process's;
        a client is made again on first use, and the counts start at zero (the parent tells
        the node its own: kept here, the child told them again). The parent's are carried,
        never freed here (:func:`lading.threads.carry`)."""
        carry(self._client, self._slots, self._unsettled, self._checked, self._runs, self._lock)
        self.gets = self.bytes_fetched = self.retried = 0
        self._lock = threading.Lock()
        self._client, self._slots, self._unsettled, self._checked = None, None, set(), {}
        self._runs = set()
        if self.node is not None:
            self.node.forked()


def refuse_if_cancelled(cancel: Cancel | None) -> None:
    """Raise :class:`CancelledError` where a GET would be sent, queued or retried, or a read
    would wait on another process's fill, for a loader that closed."""
    if cancel is not None and cancel.cancelled:
        raise CancelledError(cancel.reason())


def _ended(fetcher: Fetcher, cancel: Cancel | None) -> bool:
    """Whether a call's attempt is not retried: its fetcher, or the loader it is for, closed
    (no "retrying" warning then)."""
    return fetcher.closed or (cancel is not None and cancel.cancelled)


def _cancelled_here(fetcher: Fetcher, cancel: Cancel | None) -> bool:
    """Whether an ``asyncio.CancelledError`` the running task caught is its own cancellation
    (``Task.cancelling``, 3.11+; on 3.10, whether its fetcher or loader closed), not one a
    client's call raised from a future of its own that something else cancelled: that one
    would settle the GET with a ``BaseException`` (the fill thread died of it)."""
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)
    if cancelling is not None:
        return bool(cancelling())
    return _ended(fetcher, cancel)


def pinned_ranges(client: ObjectClient, ranges: int, etag: str | None) -> int:
    """How many of a call's ``ranges`` (its first ones) :func:`get_ranges` sends with
    ``If-Match``: none without an etag or with a client that cannot send it (``pins``
    false: fsspec but for s3fs), the first with a client's ``get_ranges`` (which cannot send
    it: the first goes as its own pinned GET), else every one. What this counts as pinned
    confirms the node cache's blocks of the object: it must never count an unpinned read."""
    if etag is None or not getattr(client, "pins", True):
        return 0
    return 1 if getattr(client, "get_ranges", None) is not None else ranges


def requests_sent(client: ObjectClient, ranges: list[tuple[int, int]], etag: str | None) -> int:
    """How many requests :func:`get_ranges` sends for ``ranges``: a client's ``get_ranges``
    (obstore's) sends ranges that touch or overlap as one request, even at ``coalesce=0``
    (the planner cuts a long run at block limits, and those pieces touch), beside the pinned
    first range's own; one a range otherwise. The fetcher's ``gets`` counts these: counted a
    range, 7 pieces of one run read as 7 GETs where 1 was sent."""
    if getattr(client, "get_ranges", None) is None:
        return len(ranges)
    pinned = pinned_ranges(client, len(ranges), etag)
    return pinned + len(_merged(ranges[pinned:]))


def bytes_received(
    client: ObjectClient, ranges: list[tuple[int, int]], datas: list[bytes], etag: str | None
) -> int:
    """How many bytes the server sent for ``ranges`` (answered by ``datas``): where requests
    merge touching ranges (:func:`requests_sent`), the overlapping ones' shared bytes once
    (windows that share a token: counted a range, 0.02-3 % over the server's bytes)."""
    if getattr(client, "get_ranges", None) is None:
        return sum(map(len, datas))
    pinned = pinned_ranges(client, len(ranges), etag)
    got = [(a, a + len(d)) for (a, _), d in zip(ranges[pinned:], datas[pinned:])]
    return sum(map(len, datas[:pinned])) + sum(b - a for a, b in _merged(got))


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``spans`` sorted, those that touch or overlap joined: what one request of a client's
    ``get_ranges`` carries each (:func:`requests_sent`, :func:`bytes_received`)."""
    out: list[tuple[int, int]] = []
    for start, stop in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], stop))
        else:
            out.append((start, stop))
    return out


async def get_ranges(
    client: ObjectClient, key: str, ranges: list[tuple[int, int]], etag: str | None
) -> list[bytes]:
    """Bytes of each ``(start, end)`` of ``key``: the client's ``get_ranges`` (one ``await``,
    the requests run side by side), else one ``get_range`` a range gathered."""
    many = getattr(client, "get_ranges", None)
    if many is not None:
        found: list[bytes] = await many(key, ranges, etag)
        return found
    return list(await asyncio.gather(*(client.get_range(key, a, b, etag) for a, b in ranges)))


class QueuedPastDeadlineError(RemoteReadError):
    """A GET waited for a request slot until its whole remote deadline had passed (every slot
    held by calls a slow or silent server has not answered): never sent, and not retried by
    its fetcher (its time is spent). Not permanent: a read that joined it as a prefetch sends
    its ranges again, once, in its own time (:func:`lading.remote.cache.reads._failed_before`)."""


async def _queued(acquire: Awaitable[T], ends: float, what: str) -> T:
    """``await acquire`` (a request slot), at most until ``ends`` (``time.monotonic()``): the
    wait for a slot counts against the GET's whole deadline (``Deadline.total`` from its
    first queueing), not against an attempt's timeout, which starts as the request is sent.
    A GET that has its slot before ``ends`` is sent with a whole attempt's time: at most
    ``total + timeout`` in all.

    Raises:
        QueuedPastDeadlineError: ``ends`` passed first."""
    left = ends - time.monotonic()
    try:
        if left <= 0:
            raise asyncio.TimeoutError
        return await _within(acquire, left)
    except asyncio.TimeoutError:
        if inspect.iscoroutine(acquire):
            acquire.close()  # (never awaited where the deadline had passed already)
        raise QueuedPastDeadlineError(
            f"waited for one of {what} past the remote deadline (every one held by requests "
            f"the server had not answered); not sent. A slow endpoint: a longer timeout "
            f"(timeout= or ${TIMEOUT_ENV}), or fewer GETs ahead"
        ) from None


async def _within(call: Awaitable[T], timeout: float) -> T:
    """``await call``, or ``TimeoutError`` after ``timeout`` seconds (``asyncio.timeout`` on
    3.11+: a timer on the running task, not a task a call as ``wait_for`` makes). Only the
    waiting stops: the client's calls are shielded (they end by their own timeout)."""
    timer = getattr(asyncio, "timeout", None)
    if timer is None:  # Python 3.10
        return await asyncio.wait_for(call, timeout)
    async with timer(timeout):
        return await call


def _wait_done(futures: Sequence[Future], timeout: float) -> bool:
    """Wait until every one of ``futures`` is settled, at most ``timeout`` seconds in all;
    whether they all are."""
    ends = time.monotonic() + timeout
    for future in futures:
        if not future.done():
            with future._cond:
                future._cond.wait_for(future.done, max(0.0, ends - time.monotonic()))
    return all(future.done() for future in futures)


def _settle(done: Sequence[tuple[Future, bytes | None]], error: BaseException | None) -> None:
    """Complete each future with its bytes (or ``error``), then run their callbacks."""
    callbacks: list[tuple[Callable[[Future], None], Future]] = []
    for future, data in done:
        with future._cond:
            if future._done:
                continue
            future._data, future._error, future._done = data, error, True
            callbacks += [(callback, future) for callback in future._callbacks]
            future._callbacks = []
            future._cond.notify_all()
    for callback, future in callbacks:
        callback(future)
