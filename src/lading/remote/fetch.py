"""Many GETs in flight from one thread: an asyncio loop per process, retries with backoff.

A ranged GET spends ~30 ms waiting and ~70-190 us of client CPU, so throughput is requests in
flight / latency (Little's law): 128 in flight at 30 ms is ~4,200 GETs/s. The loop runs on a
daemon thread, started on first use and again in a forked child (a fork copies no threads);
callers get :class:`Future` objects, or block on :meth:`Fetcher.read`.

The requests of one submission are grouped by object into *calls* of up to
:data:`CALL_RANGES` ranges, each one ``await`` of the client's ``get_ranges`` (obstore runs a
call's requests side by side in Rust, up to 10 at once; measured here: 69-88 us of client CPU a
GET where one ``await`` per GET cost 110-190 us, same run). A call is never merged into fewer
requests: the planner (:mod:`lading.remote.ranges`) already decided what one GET holds.

Pinning: a GET of a pinned object sends ``If-Match`` with the ETag the snapshot recorded, so a
replaced object is refused, never read. ``get_ranges`` cannot send it, so a call sends one of
its ranges as its own pinned GET when the object's last check is over :data:`PIN_S` old (the
first call to an object always): a replaced object is caught at its first read and within a
second after (the extra awaits of a pinned range a call cost ~50 us a document here). A
snapshot's files are never rewritten by lading; this catches a store damaged by hand.

A call that fails (a 5xx, a dropped connection) or takes longer than ``timeout`` seconds is
retried after ``backoff * 2**attempt`` seconds (with jitter, so a node's processes do not
retry in step), up to ``retries`` times, for the ranges it has not returned yet; then
:class:`RemoteReadError` names the object, the byte range, the attempts and the last error. A
missing object or a replaced one (its ETag changed) is not retried. A GET that returns another
number of bytes than asked for is retried too: a document is never wrong or empty because of a
short read.
"""

from __future__ import annotations

import asyncio
import os
import random
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TypeVar

from lading.remote.loop import LIVE, FetchLoop
from lading.remote.objects import (
    ObjectClient,
    ObjectInfo,
    PermanentError,
    RemoteReadError,
    describe,
)
from lading.remote.slots import NodeSlots

T = TypeVar("T")

DEFAULT_IN_FLIGHT = 128  # > 64: at 30 ms a GET, 128 in flight serve ~4,200 GETs/s
CALL_RANGES = 10  # ranges a call: obstore's get_ranges runs at most 10 requests of one at once
PIN_S = 1.0  # a call checks its object's ETag when the last check is older than this
DEFAULT_RETRIES = 3
DEFAULT_TIMEOUT = 20.0  # seconds one attempt may take (an 8 MiB block at 1 MB/s still fits)
DEFAULT_BACKOFF = 0.05  # seconds before the first retry; doubled each time
TIMEOUT_ENV = "LADING_REMOTE_TIMEOUT"  # the default of ``timeout`` (seconds an attempt may take)

Request = tuple[str, int, int, str | None]  # key, start, end, etag (None: not pinned)


class Future:
    """The bytes of one GET, once fetched: ``result()`` waits for them (or raises the GET's
    error). Lighter than ``concurrent.futures.Future`` (one condition per batch of GETs, not
    one per GET: ~35 us saved a GET), with the same ``result``/``done``/``exception``/
    ``add_done_callback``. Callbacks run on the fetch loop's thread."""

    __slots__ = ("_callbacks", "_cond", "_data", "_done", "_error")

    def __init__(self, cond: threading.Condition) -> None:
        self._cond = cond
        self._data: bytes | None = None
        self._error: BaseException | None = None
        self._done = False
        self._callbacks: list[Callable[[Future], None]] = []

    def done(self) -> bool:
        return self._done

    def result(self, timeout: float | None = None) -> bytes:
        """The bytes, waiting up to ``timeout`` seconds (None: for ever).

        Raises:
            RemoteReadError: the GET failed for good.
            TimeoutError: not fetched within ``timeout``.
        """
        if not self._done:
            with self._cond:
                if not self._cond.wait_for(lambda: self._done, timeout):
                    raise TimeoutError(f"a GET is still running after {timeout}s")
        if self._error is not None:
            raise self._error
        assert self._data is not None
        return self._data

    def exception(self) -> BaseException | None:
        """The GET's error, or None once it succeeded (waits for it)."""
        if not self._done:
            with self._cond:
                self._cond.wait_for(lambda: self._done)
        return self._error

    def add_done_callback(self, callback: Callable[[Future], None]) -> None:
        with self._cond:
            if not self._done:
                self._callbacks.append(callback)
                return
        callback(self)


class Fetcher:
    """Issues ranged GETs through ``make_client()``'s client, ``in_flight`` at a time.

    Args:
        make_client: builds the object client (called again in a forked child, which may
            need another backend: see :mod:`lading.remote.objects`).
        in_flight: GETs outstanding at once (>= 1).
        retries: further attempts after a failed or slow one.
        timeout: seconds an attempt may take before it counts as failed.
        backoff: seconds before the first retry.
        node: a directory of the node's slot files: ``in_flight`` then caps the GETs in
            flight of every process that passes it (:mod:`lading.remote.slots`), not
            of this one alone.
        pin_every: send ``If-Match`` with every GET of a pinned object (one range a call),
            not once a call and second: for bytes that must never mix two versions (a
            parquet row group read at its old footer's offsets from a rewritten file).

    Attributes:
        gets: requests sent by this process (retries included).
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
        if in_flight < 1 or retries < 0 or timeout <= 0 or backoff < 0:
            raise ValueError(
                f"in_flight={in_flight}, retries={retries}, timeout={timeout}, "
                f"backoff={backoff}: need in_flight >= 1, retries >= 0, timeout > 0, backoff >= 0"
            )
        self.make_client = make_client
        self.in_flight, self.retries = in_flight, retries
        self.timeout, self.backoff = timeout, backoff
        self.gets = self.bytes_fetched = self.retried = 0
        self.pin_every = pin_every
        self._pid = -1
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._client: ObjectClient | None = None
        self._slots: asyncio.Semaphore | None = None
        # the node's cap (every process opening the same cache shares it), where one is given
        self.node = None if node is None else NodeSlots(node, max(1, in_flight // CALL_RANGES))

    @property
    def client(self) -> ObjectClient:
        """This process's client (made on first use)."""
        self._start()
        assert self._client is not None
        return self._client

    def _start(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._pid != os.getpid() or self._loop is None:
                self._client = self.make_client()
                loop = FetchLoop()
                thread = threading.Thread(target=loop.run_forever, name="lading-fetch", daemon=True)
                thread.start()
                self._thread = thread
                LIVE.add(self)
                self._slots = None
                self._checked: dict[str, float] = {}  # object -> when a call last sent If-Match
                self._tasks: set[asyncio.Task[None]] = set()
                self._loop, self._pid = loop, os.getpid()
            return self._loop

    def submit(self, key: str, start: int, end: int, etag: str | None = None) -> Future:
        """Start fetching bytes ``[start, end)`` of ``key``; the future holds the bytes."""
        return self.submit_many([(key, start, end, etag)])[0]

    def submit_many(
        self,
        requests: Sequence[Request],
        callbacks: Sequence[Callable[[Future], None] | None] | None = None,
    ) -> list[Future]:
        """Start fetching every request (one wake-up of the loop for all of them);
        ``callbacks[i]`` (if given and not None) is request ``i``'s done-callback, set before
        it starts (no lock taken a future, as ``add_done_callback`` takes)."""
        loop = self._start()
        cond = threading.Condition()
        futures = [Future(cond) for _ in requests]
        if callbacks is not None:
            for future, callback in zip(futures, callbacks):
                if callback is not None:
                    future._callbacks.append(callback)
        if requests:
            loop.call_soon_threadsafe(self._launch, list(requests), futures)
        return futures

    def _launch(self, requests: list[Request], futures: list[Future]) -> None:
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
                if not every and etag is not None and last is not None and now - last < PIN_S:
                    pin = None  # checked under a second ago: this call needs no If-Match
                elif etag is not None:
                    self._checked[key] = now
                task = asyncio.ensure_future(
                    self._run(key, pin, ranges, [futures[i] for i in part])
                )
                self._tasks.add(task)  # a running task must be referenced (asyncio: weak)
                task.add_done_callback(self._tasks.discard)

    async def _run(
        self, key: str, etag: str | None, ranges: list[tuple[int, int]], futures: list[Future]
    ) -> None:
        try:
            datas = await self._get(key, etag, ranges)
        except BaseException as e:
            _settle(futures, None, e)
        else:
            _settle(futures, datas, None)

    def read(self, requests: Sequence[Request]) -> list[bytes]:
        """Fetch every request concurrently; the bytes in request order.

        Raises:
            RemoteReadError: the first request that failed for good.
        """
        return [f.result() for f in self.submit_many(requests)]

    async def _get(self, key: str, etag: str | None, ranges: list[tuple[int, int]]) -> list[bytes]:
        """The bytes of ``ranges`` of ``key``: one call a try, the ranges not yet returned."""
        if self._slots is None:  # made on the loop's thread, in the process that runs it
            self._slots = asyncio.Semaphore(max(1, self.in_flight // CALL_RANGES))
        client = self._client  # set before the loop started; no lock on this thread (a fork
        assert client is not None  # while it held one would leave the child's locked)
        out: list[bytes | None] = [None] * len(ranges)
        todo = list(range(len(ranges)))
        last: BaseException | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                self.retried += len(todo)
                await asyncio.sleep(self.backoff * 2 ** (attempt - 1) * random.uniform(0.5, 1.5))
            asked = [ranges[i] for i in todo]
            async with self._slots:
                slot = None if self.node is None else await self.node.acquire()
                self.gets += len(asked)
                try:
                    datas = await _within(get_ranges(client, key, asked, etag), self.timeout)
                except PermanentError as e:
                    start, end = asked[0]
                    raise RemoteReadError(
                        f"GET {describe(client.url, key, start, end)}: {e}"
                    ) from None
                except (OSError, asyncio.TimeoutError) as e:
                    last = e
                    continue
                finally:
                    if slot is not None and self.node is not None:
                        self.node.release(slot)
            short = []
            for i, (start, end), data in zip(todo, asked, datas):
                self.bytes_fetched += len(data)
                if len(data) == end - start:
                    out[i] = data
                else:
                    short.append(i)
                    last = OSError(f"{len(data)} bytes came back for the {end - start} asked")
            todo = short
            if not todo:
                return out  # type: ignore[return-value]  # every range is in
        start, end = ranges[todo[0]]
        raise RemoteReadError(self.gave_up(f"GET {describe(client.url, key, start, end)}", last))

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
        """Every object below ``prefix`` (see :meth:`ObjectClient.list`), retried and timed
        out as a ranged GET is."""
        client = self.client
        what = f"LIST {describe(client.url, prefix) if prefix else client.url + '/'}"
        return self.run(what, lambda: client.list_async(prefix))

    def run(self, what: str, attempt: Callable[[], Awaitable[T]]) -> T:
        """Run ``attempt()`` on the fetch loop until it succeeds, at most ``retries + 1``
        times, each within ``timeout`` seconds; this thread waits for the outcome."""
        loop = self._start()
        return asyncio.run_coroutine_threadsafe(self._attempts(what, attempt), loop).result()

    async def _attempts(self, what: str, attempt: Callable[[], Awaitable[T]]) -> T:
        last: BaseException | None = None
        for n in range(self.retries + 1):
            if n:
                self.retried += 1
                await asyncio.sleep(self.backoff * 2 ** (n - 1) * random.uniform(0.5, 1.5))
            try:
                return await asyncio.wait_for(attempt(), self.timeout)
            except PermanentError:
                raise
            except (OSError, asyncio.TimeoutError) as e:
                last = e
        raise RemoteReadError(self.gave_up(what, last))

    def gave_up(self, what: str, last: BaseException | None) -> str:
        """The message of a call that failed ``retries + 1`` times: what, where, the setting."""
        client = self._client
        endpoint = getattr(client, "endpoint", "") or "the default endpoint"
        reason = "timed out" if isinstance(last, asyncio.TimeoutError) else f"{last}"
        return (
            f"{what} (endpoint {endpoint}) failed {self.retries + 1} times, each allowed "
            f"{self.timeout:g}s (timeout=, env {TIMEOUT_ENV}; retries={self.retries}); last: "
            f"{reason}. Check that the endpoint is up and reachable, or raise the timeout"
        )

    def close(self) -> None:
        """Stop this process's loop thread (a later call starts a new one), after the
        client's calls still running have ended (at most ``timeout`` + 1 s: see
        :meth:`~lading.remote.client_obstore.ObstoreClient.drain`) and every thread
        that completed one has left this loop's ``call_soon_threadsafe`` (see :class:`_Loop`)."""
        with self._lock:
            if self._loop is not None and self._pid == os.getpid():
                drain = getattr(self._client, "drain", None)
                if drain is not None and threading.current_thread() is not self._thread:
                    drain(self.timeout + 1.0)
                    if isinstance(self._loop, FetchLoop):
                        self._loop.settle()
                self._loop.call_soon_threadsafe(self._loop.stop)
                if self._thread is not None and threading.current_thread() is not self._thread:
                    self._thread.join(5.0)
            self._loop, self._pid = None, -1


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


async def _within(call: Awaitable[T], timeout: float) -> T:
    """``await call``, or ``TimeoutError`` after ``timeout`` seconds. On Python 3.11+
    ``asyncio.timeout`` (a timer on the task already running), not ``wait_for``, which
    wraps each call in a task of its own (~20 us a call of 10 GETs here). Either way only
    the waiting stops: the client's calls are shielded (they end by their own timeout)."""
    timer = getattr(asyncio, "timeout", None)
    if timer is None:  # Python 3.10
        return await asyncio.wait_for(call, timeout)
    async with timer(timeout):
        return await call


def _settle(futures: list[Future], datas: list[bytes] | None, error: BaseException | None) -> None:
    """Complete ``futures`` (one call's, sharing a condition) under one hold of their lock."""
    if not futures:
        return
    callbacks: list[tuple[Callable[[Future], None], Future]] = []
    with futures[0]._cond:
        for n, future in enumerate(futures):
            future._data = None if datas is None else datas[n]
            future._error, future._done = error, True
            callbacks += [(callback, future) for callback in future._callbacks]
            future._callbacks = []
        futures[0]._cond.notify_all()
    for callback, future in callbacks:
        callback(future)
