"""Filling fetched blocks in: one thread a process and cache folder writes bytes, then marks.

The fetch loop hands each finished GET of a claimed block to :meth:`Filler.put` (its future);
the fill thread writes the bytes of as many as have finished, and of those finishing within
:data:`LINGER_S` of the first, into the payload file (``pwrite``, at the place the claim
reserved, only where the claim still is) and marks them ready, in one ledger transaction
(:meth:`.ledger.Ledger.fill`), a block from an unpinned GET marked unconfirmed and the checks
the pinned ones passed applied (:mod:`lading.remote.fetch`); the claims of failed GETs are
given back. It is the only thread that writes a block's bytes, and its transactions, like every
one, are held outside a ``fork()`` (:data:`lading.threads.SQLITE`). Its owner is the node
(:class:`.node.Node`), which ends it.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

from lading.errors import LadingError
from lading.threads import carry

_BATCH = 1024  # finished GETs filled in one transaction at the most
_JOIN_S = 5.0  # how long close() waits for the thread's last transaction
# After a GET finishes, how long the thread waits for more to fill in the same transaction.
# A read's calls finish within a few ms of each other: without it a transaction took ~15
# blocks, with it ~37, and the fill thread's CPU a cold document fell from ~0.030 to ~0.023
# ms (200,000 passages, a 10 % cap, no plan). It waits once, then takes what came: waking at
# each GET that came meanwhile (a ``get`` with a timeout per block) cost the process ~4 % of
# its CPU a cold document more (3 of 3 pairs). The cost: another process waiting on one of
# these claims sees it ready up to 4 ms later (a GET takes ~30 ms).
LINGER_S = 0.004


class Fill(NamedTuple):
    """A claimed block's place and the GET (or carried bytes) that fills it, and how far
    its bytes are known to be the snapshot's: ``unpinned``, when they came from a request
    without ``If-Match`` (None: from a pinned one, or an object with no ETag to pin);
    ``checked``, when the pinned request that returned them was sent (it passed: the
    object's blocks that came unpinned before then are confirmed)."""

    object: int
    start: int
    end: int
    region: int
    at: int
    bytes_of: Callable[[], bytes]  # the fetched bytes (raises what the GET raised)
    unpinned: float | None = None
    checked: float | None = None


# a block fetched: object, start, region, at, bytes, when they came unpinned (None: pinned)
Done = tuple[int, int, int, int, bytes, float | None]


class Filler:
    """The fill thread of ``node`` (started on first use; see the module doc).

    Args:
        mark: ``(done, failed, checks)``: blocks fetched ``(object, start, region, at,
            bytes, unpinned)`` to write where their claims still are and make ready,
            ``(object, start, end)`` of failed GETs (their claims given back), and the
            ``(object, sent)`` of the pinned requests that passed: into the payload file and
            the ledger.
        trim: after each batch: keep the ledger's WAL short (:meth:`.ledger.Ledger.trim`).
    """

    def __init__(
        self,
        mark: Callable[[list[Done], list[tuple[int, int, int]], list[tuple[int, float]]], None],
        trim: Callable[[], None],
    ) -> None:
        self.mark, self.trim = mark, trim
        self.forked()

    def forked(self) -> None:
        """A fresh queue and no thread (a forked child's: the parent's thread is not here;
        its queue and thread are carried, never freed here)."""
        carry(getattr(self, "_queue", None), getattr(self, "_thread", None))
        self._queue: queue.SimpleQueue[Fill | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._warned = self.closed = False

    def put(self, fill: Fill) -> None:
        """Hand a finished GET over (called on the fetch loop's thread); after :meth:`close`,
        dropped (its claim was given back)."""
        if self.closed:
            return
        if self._thread is None:
            with self._lock:  # (close sets closed under it: no thread starts after close)
                if self.closed:
                    return
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._run, name="lading-fill", daemon=True
                    )
                    self._thread.start()
        self._queue.put(fill)

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            done = [first]
            self._closing.wait(LINGER_S)  # (close ends the wait: it never waits this out)
            with contextlib.suppress(queue.Empty):
                while len(done) < _BATCH:
                    more = self._queue.get_nowait()
                    if more is None:
                        self._queue.put(None)  # end after this batch
                        break
                    done.append(more)
            self._fill(done)

    def _fill(self, done: list[Fill]) -> None:
        fetched: list[Done] = []
        failed: list[tuple[int, int, int]] = []
        checks: list[tuple[int, float]] = []
        for fill in done:
            try:
                data = fill.bytes_of()
            except BaseException:  # the GET failed (its reader raises it): the claim goes
                # (any BaseException too: what bytes_of raises is the GET's outcome, never a
                # signal to this thread, which is not the main one: an asyncio.CancelledError
                # from a client's cancelled future killed it, leaving later claims held)
                failed.append((fill.object, fill.start, fill.end))
                continue
            fetched.append((fill.object, fill.start, fill.region, fill.at, data, fill.unpinned))
            if fill.checked is not None:
                checks.append((fill.object, fill.checked))
        try:
            self.mark(fetched, failed, checks)
        except Exception as e:  # the ledger refused (a full disk): the claims time out
            self.warn(e)
        with contextlib.suppress(Exception):
            self.trim()

    def warn(self, error: BaseException) -> None:
        """Say once that a fetched block could not be kept (a full disk, a ledger refusing),
        with the fix: lading's own errors name theirs (a folder reset: open again), whole;
        anything else is taken for the disk."""
        if not self._warned:
            self._warned = True
            crowded = descriptors()
            if isinstance(error, LadingError):
                what, fix = str(error), ""
            elif crowded is not None and crowded[0] >= 0.9 * crowded[1]:  # (EMFILE, as SQLite
                what = str(error)[:160]  # says it: "unable to open database file")
                fix = (
                    f": this process has {crowded[0]:,} of its {crowded[1]:,} file "
                    "descriptors open (ulimit -n); close the stores and corpora it no longer "
                    "reads, or raise the limit"
                )
            else:
                what = str(error)[:160]
                fix = ": free disk space where the cache folder is, or lower cache_bytes"
            warnings.warn(
                f"the node cache could not keep a fetched block ({type(error).__name__}: "
                f"{what}); reads go on, fetching what it could not keep{fix}",
                RuntimeWarning,
                stacklevel=2,
            )

    def close(self) -> None:
        """End the thread after what it was given (waits at most a few seconds); what comes
        after is dropped."""
        with self._lock:
            self.closed = True
            thread = self._thread
        if thread is not None and thread.is_alive():
            self._queue.put(None)
            self._closing.set()
            if thread is not threading.current_thread():
                thread.join(_JOIN_S)
        self._thread = None

    def __repr__(self) -> str:
        return f"Filler(thread={self._thread!r})"


def ready(data: bytes) -> Callable[[], Any]:
    """``bytes_of`` for bytes already in hand (a block carried forward)."""
    return lambda: data


def descriptors() -> tuple[int, int] | None:
    """This process's open file descriptors and its limit on them (``ulimit -n``), where it
    can tell (Linux: ``/proc/self/fd``), else None."""
    try:
        import resource

        opened = len(os.listdir("/proc/self/fd"))
        limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError):
        return None
    return (opened, int(limit)) if limit > 0 else None
