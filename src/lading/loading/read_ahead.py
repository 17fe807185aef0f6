"""Batches built on a thread of this process, a few ahead of the caller (``read_ahead=``).

With ``num_workers=0`` a batch is built when the caller asks for it, so the work of building
it (for remote data: the node cache's lookups, claims and reads, ~5-10 ms a batch) is added to
every training step. :class:`BuiltAhead` builds the next ``depth`` batches on one thread while
the caller holds the current one: a training step that waits on a GPU (or sleeps) leaves the
GIL free, and the build runs beside it instead of after it, as a DataLoader worker would, but
with no second process, no copy of the batch between processes and no worker's startup.

What does not change: the batches and their order (each is built from its key alone); the
position, which counts the batches the caller *received* (a state saved now resumes at the
next one, whatever is built ahead); errors, raised to the caller at the batch that raised them,
with their traceback. Closing (a pass broken off, ``set_epoch`` or a loaded state mid-pass)
stops the thread after the batch it is building and drops what was built ahead.

Across epochs (:class:`Carried`): a pass read to its end leaves the thread building the next
epoch's first batches (its plan, for a remote store, included: ~0.1-0.3 s of CPU at each
epoch's start otherwise spent while the GPU waits). The next pass takes them when it starts
where they do (the next epoch, from its first batch: what a plain ``for batch in loader`` or
``set_epoch(epoch + 1)`` reads); any other start (``set_epoch`` elsewhere, a loaded state)
drops them and builds from there.

Every wait is bounded and the thread has one owner (:class:`Carried`, the loader's): a
``break``, ``set_epoch`` or a loaded state mid-pass, :meth:`lading.loading.Loader.close` (or
the end of a ``with`` block), a dropped loader and the interpreter's exit stop it, returning
within one batch's build or the remote deadline (``LADING_REMOTE_TIMEOUT``), whichever is
first. In a forked child (:mod:`lading.threads`) the parent's thread does not exist: the pass
goes on from its cursor, built by a thread of the child's own.

Why it is not the default everywhere: code on the thread that draws from torch's or NumPy's
*global* random generator would draw in an order that depends on the thread's timing beside
the training step's own draws. lading's own batch builders draw only from their own seeded
generators, so the loaders whose batches lading builds alone turn it on for remote data
(LM corpora, parquet sessions); ``lading.loader`` runs the user's dataset and ``collate_fn``,
and builds ahead only when asked (``read_ahead=2``).
"""

from __future__ import annotations

import copy
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from lading.deadline import remote_timeout
from lading.loading.state import Cursor
from lading.remote.cancel import Cancel, reading_for
from lading.threads import carry, register

_DONE = object()  # the thread's batches ran out
EPOCH_END = object()  # between one epoch's batches and the next's (Carried)
_POLL_S = 0.05  # how often a waiting side checks whether the other stopped (or a fork came)
_LATE_S = 0.002  # the longest a built batch waits for a caller that waits for it (see below)
# Threads that never wait for the read-ahead's: the fetch loop's and the fill threads settle
# the GETs a build waits on (a GC there ran a finalizer that froze every GET 35-40 s).
_NEVER_JOINS = ("lading-fetch", "lading-fill")


class BuiltAhead:
    """The batches of ``batches`` (an iterator), each built on a thread up to ``depth`` ahead.

    A caller that waits for a batch (the build is slower than its step) is woken once
    ``depth`` batches are ready, not at each one: with no step to hide the build behind,
    a wake a batch cost ~65-100 us of CPU (two threads and the interpreter lock changing
    hands), nearly what building a batch of windows costs (benchmarks/RESULTS.md, "After the
    window asks for a held block once"). A batch that took ``_LATE_S`` or longer to build
    (a GET waited for), the last one, an error and an epoch's end wake the caller at once,
    and a waiting caller looks every ``_LATE_S`` anyway, so a built batch is never held back
    longer than that while the next build waits on a fetch.

    Args:
        batches: the batches, built when iterated (on the thread only, from the first
            ``next`` on).
        depth: batches kept ready (>= 1).
    """

    def __init__(self, batches: Iterator[Any], depth: int) -> None:
        if depth < 1:
            raise ValueError(f"read_ahead={depth}: batches built ahead, >= 1 (0: none)")
        self._batches, self._depth = batches, depth
        self._ready: deque[tuple[Any, BaseException | None]] = deque()
        self._changed = threading.Condition(threading.Lock())  # _ready and who waits on it
        self._caller_waits = self._builder_waits = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._ended = self._gave_up = False
        self.cancel = Cancel()  # the thread's GETs, ended by close(cancel=True)

    def __iter__(self) -> BuiltAhead:
        return self

    def __next__(self) -> Any:
        if self._ended:
            raise StopIteration
        if self._thread is None:
            self._thread = threading.Thread(
                target=reading_for,
                args=(self.cancel, self._build),
                name="lading-ahead",
                daemon=True,
            )
            self._thread.start()
        with self._changed:  # bounded waits: a thread that died without a word ends the pass
            while not self._ready:
                if self._stop.is_set():  # closed (from another thread) while it waited
                    raise StopIteration
                if not self._thread.is_alive():
                    self._ended = True
                    raise RuntimeError("the read-ahead thread ended without its batches")
                self._caller_waits = True
                self._changed.wait(_LATE_S)
                self._caller_waits = False
            batch, error = self._ready.popleft()
            if self._builder_waits:
                self._changed.notify()
        if error is not None:
            self._ended = True
            raise error
        if batch is _DONE:
            self._ended = True
            raise StopIteration
        return batch

    def _build(self) -> None:
        """The thread: build batches into the queue until they run out, one raises, or the
        caller closes."""
        try:
            began = time.perf_counter()
            for batch in self._batches:  # built here
                slow = time.perf_counter() - began >= _LATE_S
                if not self._put((batch, None), slow or batch is EPOCH_END):
                    return
                began = time.perf_counter()
        except BaseException as e:  # handed to the caller, raised there
            self._put((None, e), True)
            return
        self._put((_DONE, None), True)

    def _put(self, item: tuple[Any, BaseException | None], now: bool) -> bool:
        """Queue ``item`` once there is room (False: closed first); wake a waiting caller
        ``now``, or once ``depth`` batches are ready."""
        with self._changed:
            while len(self._ready) >= self._depth:
                if self._stop.is_set():
                    return False
                self._builder_waits = True
                self._changed.wait(_POLL_S)
                self._builder_waits = False
            if self._stop.is_set():
                return False
            self._ready.append(item)
            if self._caller_waits and (now or len(self._ready) >= self._depth):
                self._changed.notify()
        return True

    def close(self, cancel: bool = False, finalizing: bool = False, grace: float = 0.0) -> None:
        """Stop the thread after the batch it is building and drop what it built ahead;
        returns when it stopped, or after the remote deadline (a build stuck on a stalled
        GET ends by its own deadline; it hands nothing out after). ``cancel``: the thread's
        GETs end with it (:mod:`lading.remote.cancel`): a build waiting on one ends now, and
        none is sent, queued or retried for it after; ``grace``: seconds the thread may take
        to end by itself first (a pass left early: on a healthy server its build ends, and
        the GETs it made fill the cache for the next pass; on a stalled one the cancel ends
        it after ``grace``, not after the remote deadline).

        ``finalizing`` (a finalizer: the GC may run it on any thread, inside any lock): the
        GETs are cancelled from a thread of their own. The thread is never joined on the
        fetch loop's or a fill thread (a build may wait on what only they settle: a GC
        there froze every GET of the process), nor a second time once a close gave up."""
        self._ended = True
        self._stop.set()
        with self._changed:
            self._changed.notify_all()  # a builder waiting for room stops now
        thread = self._thread
        here = threading.current_thread()
        joins = (
            thread is not None
            and thread is not here
            and here.name not in _NEVER_JOINS
            and not self._gave_up
        )
        if cancel and grace > 0 and joins:
            assert thread is not None
            thread.join(grace)
            cancel = thread.is_alive()  # ended by itself: its GETs go on for the cache
        if cancel and not finalizing:
            self.cancel.cancel()
        elif cancel and not sys.is_finalizing():  # (its locks may be held by the frame the
            # GC interrupted); as the interpreter finalizes no thread starts (a start waits
            # for ever): the plane's exit hooks have ended every GET by then
            threading.Thread(target=self.cancel.cancel, name="lading-cancel", daemon=True).start()
        if joins:
            assert thread is not None
            thread.join(remote_timeout())
            self._gave_up = thread.is_alive()  # (its build ends by its own deadline)
        with self._changed:  # what was built ahead is not handed out: let it go now
            self._ready.clear()


def epochs_from(cursor: Cursor, epoch: Callable[[Cursor], Iterator[Any]]) -> Iterator[Any]:
    """The batches of ``cursor``'s epoch from its position (``epoch(cursor)``), then
    :data:`EPOCH_END`, then each following epoch's whole, each followed by :data:`EPOCH_END`."""
    while True:
        yield from epoch(cursor)
        yield EPOCH_END
        cursor = Cursor(cursor.epoch + 1)


class Carried:
    """Batches built ahead on one thread across passes (see the module doc).

    Args:
        owner: closes the thread when it is garbage-collected (the loader: the thread holds
            no reference to it).
        cursor: where the first batch is.
        epoch: a cursor's epoch's batches from its position on (no reference to ``owner``).
        depth: batches kept ready.

    Attributes:
        at: where the next batch the thread hands out is.
    """

    def __init__(
        self, owner: object, cursor: Cursor, epoch: Callable[[Cursor], Iterator[Any]], depth: int
    ) -> None:
        self.at = copy.copy(cursor)
        self._epoch, self._depth = epoch, depth
        self.built = BuiltAhead(epochs_from(copy.copy(cursor), epoch), depth)
        # (holds this, not the owner); never at exit: close_all closes it, in stage order
        self._finalizer = weakref.finalize(owner, self._dropped)
        self._finalizer.atexit = False
        register(self, "ahead")

    def starts(self, cursor: Cursor) -> bool:
        """Whether a pass from ``cursor`` reads what this thread builds next."""
        at = self.at
        return (at.epoch, at.segment, at.batches) == (
            cursor.epoch,
            cursor.segment,
            cursor.batches,
        ) and (at.base is cursor.base)

    def epoch(self) -> Iterator[Any]:
        """The batches from :attr:`at` to its epoch's end; then :attr:`at` is the next epoch's
        first batch, which the thread goes on building."""
        while True:
            try:
                batch = next(self.built)  # (after a fork, the child's own thread's)
            except StopIteration:  # closed: the loader's pass says so (Loader.close)
                return
            if batch is EPOCH_END:
                self.at = Cursor(self.at.epoch + 1)
                return
            self.at.batches += 1
            yield batch

    def forked(self) -> None:
        """In a forked child the thread is gone: the pass goes on from :attr:`at`, built by
        a thread of the child's own (the parent's queue and batches built ahead are not
        taken: their locks may have been held at the fork; carried, never freed here)."""
        carry(self.built)
        self.built = BuiltAhead(epochs_from(copy.copy(self.at), self._epoch), self._depth)

    def close(self, cancel: bool = True, finalizing: bool = False, grace: float = 0.0) -> None:
        """Stop the thread and drop what it built ahead (``cancel``: its GETs too; a plain
        ``close()`` is the exit's, :func:`lading.threads.close_all`: they end at once, so
        the exit waits for no deadline; ``finalizing`` and ``grace``: as
        :meth:`BuiltAhead.close` says)."""
        self._finalizer.detach()
        self.built.close(cancel, finalizing, grace)

    def _dropped(self) -> None:
        """The owner was garbage-collected (on whatever thread the GC ran: the fetch loop's,
        perhaps): stop and cancel; joined only where :meth:`BuiltAhead.close` may wait."""
        self.built.close(cancel=True, finalizing=True)
