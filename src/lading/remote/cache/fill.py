"""Filling fetched blocks into the node's ledger: one writer thread a process, in batches.

The fetch loop's thread hands each finished GET to :meth:`Filler.put`; the writer thread
fills as many as have finished in one SQLite transaction (up to 1024), and gives the claims of
failed GETs back to the node. :class:`~lading.remote.cache.NodeCache` plans and reads;
this module is the only one that writes blocks, and the only one with a thread inside SQLite.

A fork() while the writer thread is inside SQLite would leave SQLite's mutexes locked in the
child (a DataLoader worker), which then hangs on its first query. Around a fork, every
filler's writer is held outside SQLite; the child starts its own writer when it needs one.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import queue
import threading
import weakref
from collections.abc import Callable

from lading.remote.cache.ledger import Ledger
from lading.remote.fetch import Future

_BATCH = 1024  # finished GETs filled in one transaction at the most
_LIVE: weakref.WeakSet[Filler] = weakref.WeakSet()


def _before_fork() -> None:
    for filler in list(_LIVE):
        filler.sqlite.acquire()


def _after_fork() -> None:
    for filler in list(_LIVE):
        if filler.sqlite.locked():
            filler.sqlite.release()


os.register_at_fork(before=_before_fork, after_in_parent=_after_fork, after_in_child=_after_fork)


def _at_exit() -> None:
    """Park every writer thread outside SQLite and stop the fetch loops before the interpreter
    is torn down: a daemon thread left inside SQLite or a GET's callback while Python
    finalizes can abort the process (seen: a rank of 4 exited with SIGABRT after its work)."""
    for filler in list(_LIVE):
        if filler.pid == os.getpid():
            filler.sqlite.acquire(timeout=10)  # held for good: the writer waits outside SQLite
            filler.on_exit()


atexit.register(_at_exit)


class Filler:
    """Fills finished GETs into ``ledger`` on a writer thread of this process.

    Args:
        ledger: the node's ledger (holds the claims the GETs were made for).
        filled: called on the writer thread with the block ids just filled or given up, so
            the owner can stop counting them as in flight.
        on_exit: called at interpreter exit in the process that used this filler, with the
            writer parked outside SQLite (the owner stops its GETs and releases its claims).
    """

    def __init__(
        self,
        ledger: Ledger,
        filled: Callable[[list[int]], None],
        on_exit: Callable[[], None],
    ) -> None:
        self.ledger = ledger
        self.filled = filled
        self.on_exit = on_exit
        self.sqlite = threading.Lock()  # held by the writer thread while it is in SQLite
        self.reset()
        _LIVE.add(self)

    def reset(self) -> None:
        """Per-process state: a forked child gets an empty queue and starts its own writer."""
        self.pid = os.getpid()
        self._done: queue.SimpleQueue[tuple[int, Future]] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None

    def start(self) -> None:
        """Start this process's writer thread if it is not running."""
        if self._writer is None or not self._writer.is_alive():
            self._writer = threading.Thread(target=self._loop, name="lading-fill", daemon=True)
            self._writer.start()

    def put(self, block: int, future: Future) -> None:
        """Hand a finished GET of ``block`` to the writer (called on the fetch loop's thread)."""
        self._done.put((block, future))

    def _loop(self) -> None:
        """Fill finished GETs into the ledger, as many per transaction as have finished."""
        while True:
            done = [self._done.get()]
            # no wait for more to finish: a block filled ms later is one eviction cannot
            # choose meanwhile (tried, 3 ms: epoch-2 hits of a planned order fell from
            # 0.25 to 0.14-0.15 of 0.25 in test_the_whole_order_keeps_what_is_needed_soonest)
            limit = _BATCH  # ledger.fill writes them a transaction's pages at a time
            with contextlib.suppress(queue.Empty):
                while len(done) < limit:
                    done.append(self._done.get_nowait())
            good = [(b, f.result()) for b, f in done if f.exception() is None]
            failed = [b for b, f in done if f.exception() is not None]
            with self.sqlite:  # no fork() while this thread is inside SQLite (see the module)
                try:
                    self.ledger.fill(good)
                except Exception:  # a full disk, say: give the claims up, the bytes were read
                    failed += [b for b, _ in good]
                if failed:
                    with contextlib.suppress(Exception):
                        self.ledger.release(failed)
            self.filled([block for block, _ in done])
