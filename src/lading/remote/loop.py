"""The fetch loop: one asyncio loop a process, on one thread, for every fetcher's GETs.

A ranged GET spends ~30 ms waiting and ~70-190 us of client CPU, so one thread keeps hundreds
in flight (Little's law). Every :class:`~lading.remote.fetch.Fetcher` of the process submits
to the loop :func:`running` gives (started on first use). Its owner is this module: in a
forked child the loop is dropped (a fork copies no threads; the next use starts one); at exit
(:mod:`lading.threads`, last: after the read-ahead and fill threads and the fetchers, which
settle their GETs and retry none) every client's calls are drained, the tasks still pending
(a call waiting out a retry's pause, or queued for a slot) cancelled and ended, and the loop
stopped and closed. A task left pending as the loop stops is reported as the interpreter
exits ("Task was destroyed but it is pending!": seen at 6 of 7 exits while GETs waited out a
retry's pause, whichever of the loop and the fetchers, then closed in one stage, went first).

Why the drain: obstore completes a call on one of tokio's threads, which hands the result to
this loop with ``call_soon_threadsafe``, queuing the callback and then waking the loop with the
GIL released. If the interpreter has begun to exit meanwhile, taking the GIL back ends that
thread with ``pthread_exit``, whose unwinding through Rust frames aborts the process (a core of
a cold ``lading get`` showed SIGABRT in ``take_gil`` under ``pyo3_async_runtimes::set_result``;
issue 39 item 9: 5 of 192 runs before, 0 of 384 after). :meth:`FetchLoop.settle` waits for
every such thread to be out.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import weakref
from typing import Any

from lading.threads import carry, register

_JOIN_S = 5.0


class FetchLoop(asyncio.SelectorEventLoop):
    """The fetch loop, counting the threads inside :meth:`call_soon_threadsafe`."""

    def __init__(self) -> None:
        super().__init__()
        self.waking = 0  # threads inside call_soon_threadsafe now
        self._waking_lock = threading.Lock()

    def call_soon_threadsafe(  # type: ignore[override]  # the same call, typed loosely
        self, callback: Any, *args: Any, context: Any = None
    ) -> Any:
        with self._waking_lock:
            self.waking += 1
        try:
            return super().call_soon_threadsafe(callback, *args, context=context)
        finally:
            with self._waking_lock:
                self.waking -= 1

    def settle(self, timeout: float = 1.0) -> None:
        """Wait (up to ``timeout`` s) until no thread is inside :meth:`call_soon_threadsafe`,
        then 20 ms more with the GIL released, for one that just left it to get back into
        Rust (from the ``finally`` above to its return: a few bytecodes)."""
        deadline = time.monotonic() + timeout
        while self.waking and time.monotonic() < deadline:
            time.sleep(0.001)
        time.sleep(0.02)


class _Owner:
    """The process's loop and thread, and the clients whose calls must end before exit."""

    def __init__(self) -> None:
        self._fresh()
        register(self, "loop")

    def forked(self) -> None:
        """No loop and no thread (a forked child's: the parent's loop is carried, never
        freed, :func:`lading.threads.carry`; its tasks hold the parent's calls)."""
        carry(self.loop, self.thread, self.clients)
        self._fresh()

    def _fresh(self) -> None:
        self._lock = threading.Lock()
        self.loop: FetchLoop | None = None
        self.thread: threading.Thread | None = None
        self.clients: weakref.WeakSet[Any] = weakref.WeakSet()

    def running(self) -> FetchLoop:
        with self._lock:
            if self.loop is None:
                loop = FetchLoop()
                thread = threading.Thread(target=loop.run_forever, name="lading-fetch", daemon=True)
                thread.start()
                self.loop, self.thread = loop, thread
            return self.loop

    def close(self) -> None:
        """Drain every client's calls (each bounded by its own timeout), stop the loop."""
        with self._lock:
            loop, thread, self.loop, self.thread = self.loop, self.thread, None, None
        if loop is None or thread is None:
            return
        for client in list(self.clients):
            drain = getattr(client, "drain", None)
            if drain is not None:
                drain(getattr(client, "timeout", 20.0) + 1.0)
        loop.settle()
        with contextlib.suppress(Exception):  # (exiting: nothing to report to)
            asyncio.run_coroutine_threadsafe(_end_tasks(), loop).result(_JOIN_S)
        loop.settle()  # a cancelled upload's Rust side takes the GIL to see it (~1 ms)
        loop.call_soon_threadsafe(loop.stop)
        if thread is not threading.current_thread():
            thread.join(_JOIN_S)
        if not thread.is_alive():  # closed here, not by the collector at exit: there its
            loop.close()  # self-pipe's sockets may go first ("Invalid file descriptor: -1")


async def _end_tasks() -> None:
    """Cancel the loop's other tasks and wait (at most a second) until they have ended."""
    me = asyncio.current_task()
    rest = [task for task in asyncio.all_tasks() if task is not me]
    for task in rest:
        task.cancel()
    if rest:
        await asyncio.wait(rest, timeout=1.0)


LOOP = _Owner()


def running(client: Any = None) -> FetchLoop:
    """The process's fetch loop, running (``client``: one whose calls are drained at exit)."""
    if client is not None:
        LOOP.clients.add(client)
    return LOOP.running()
