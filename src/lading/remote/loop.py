"""The fetch loop and a clean exit: an event loop that counts the threads handing results in.

obstore completes a call on one of tokio's threads; if the interpreter begins to exit while
such a thread waits for the GIL, the process aborts (issue 39 item 9: SIGABRT in 5 of 192
cold ``lading get`` runs before, 0 of 384 after; ``benchmarks/remote_exit_loop.py``). So every
fetcher registers in :data:`LIVE`, and at exit :func:`_close_all` closes each one: its client's
calls drained, then :meth:`FetchLoop.settle` waits for the threads still inside the loop.
"""

from __future__ import annotations

import asyncio
import atexit
import threading
import time
import weakref
from typing import Any


class FetchLoop(asyncio.SelectorEventLoop):
    """The fetch loop, counting the threads inside :meth:`call_soon_threadsafe`.

    obstore completes a call on one of tokio's threads, which hands the result to this loop
    with ``call_soon_threadsafe``: the callback is queued first, then the loop is woken by a
    write to its socket, with the GIL released. The future can thus be done while that
    thread is still to take the GIL back; if the interpreter has begun to exit meanwhile,
    taking it ends the thread with ``pthread_exit``, whose unwinding through Rust frames
    aborts the process (a core of a cold ``lading get`` run showed exactly this: SIGABRT
    in ``take_gil`` under ``sock_send`` under ``pyo3_async_runtimes::set_result``, after
    ``bytes_async``). :meth:`settle` waits for every such thread to be out.
    """

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


LIVE: weakref.WeakSet[Any] = weakref.WeakSet()  # every Fetcher of this process


@atexit.register
def _close_all() -> None:
    """Close every fetcher of this process before the interpreter is torn down (item 9 of
    issue 39: a GET ending on obstore's runtime after that aborts the process)."""
    for fetcher in list(LIVE):
        fetcher.close()
