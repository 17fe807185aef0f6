"""A reader's cancellation: the GETs made on behalf of one loader end when it closes.

A loader reads through data that is not its own (a corpus, a store: the user's, still open
after the loader closes), so closing the loader cannot close their fetcher. Instead the reads
its read-ahead thread makes run under a :class:`Cancel` (:func:`reading_for`, a context
variable the thread sets once); :meth:`lading.remote.fetch.Fetcher.submit_many` and
:meth:`~lading.remote.fetch.Fetcher.run` capture it at submit. :meth:`Cancel.cancel` (the
loader's ``close``) settles every GET submitted under it that is not yet settled with
:class:`~lading.remote.fetch.CancelledError` (a waiter returns at once; the fetcher makes the error
from :meth:`Cancel.reason`, so this module needs nothing of it), and from then on none
is sent, queued or retried for it: a ranged GET in flight ends by its own timeout, nothing
follows it (a whole-object call of ``run`` is cancelled on the fetch loop). The thread's build
ends at its next read, which raises it at submit, in a wait on a GET it did not make (its
loader's prefetch: :meth:`Cancel.waking` wakes it), or in a wait on another process's fill
(:mod:`lading.remote.cache.reads`), which checks the flag as it polls.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from lading.threads import carry, register

_CURRENT: contextvars.ContextVar[Cancel | None] = contextvars.ContextVar(
    "lading_cancel", default=None
)


class Cancel:
    """The flag of one reader (a loader's read-ahead thread) and the GETs made under it."""

    def __init__(self, what: str = "the loader") -> None:
        self.what = what
        self.cancelled = False
        self._lock = threading.Lock()
        # settle(futures, error) of each fetcher, by fetcher, with the futures it made here
        self._made: weakref.WeakKeyDictionary[Any, set[Any]] = weakref.WeakKeyDictionary()
        self._waits: list[threading.Condition] = []  # of the waits under it (woken at cancel)
        register(self, "ahead")  # (its lock and GETs at a fork: forked())

    def forked(self) -> None:
        """In a forked child: the parent's GETs and waits are not this process's (its
        fetchers drop theirs), and a parent thread may have held the lock at the fork: both
        made anew, ``cancelled`` kept (a loader the parent closed stays closed)."""
        carry(self._made, self._waits, self._lock)
        self._lock = threading.Lock()
        self._made = weakref.WeakKeyDictionary()
        self._waits = []

    def close(self) -> None:
        """Nothing of its own to end at exit: the GETs are their fetchers', closed after."""

    def reason(self) -> str:
        """Why a GET made under this flag fails (:class:`lading.remote.fetch.CancelledError`)."""
        return closed_reason(self.what)

    def track(self, fetcher: Any, futures: Sequence[Any]) -> bool:
        """Note ``futures``, just submitted through ``fetcher``; False: cancelled already
        (the caller settles them, and sends none)."""
        with self._lock:
            if self.cancelled:
                return False
            made = self._made.setdefault(fetcher, set())
            made.update(futures)
        for future in futures:  # a settled GET holds its bytes: it leaves as it settles
            future.add_done_callback(functools.partial(self._settled, made))
        return True

    def _settled(self, made: set[Any], future: Any) -> None:
        """Drop ``future``, settled, from ``made`` (on the fetch loop's thread, or here)."""
        with self._lock:
            made.discard(future)

    @contextlib.contextmanager
    def waking(self, cond: threading.Condition) -> Iterator[None]:
        """While in it, :meth:`cancel` notifies ``cond`` (held by the caller, who waits on
        it with ``cancelled`` in its predicate): a wait under this flag on a GET made outside
        it (a prefetch of its loader's announcer) ends at the close, the GET left to its
        maker. A wait that enters after the cancel sees ``cancelled`` set already."""
        with self._lock:
            self._waits.append(cond)
        try:
            yield
        finally:
            with self._lock:
                self._waits.remove(cond)

    def cancel(self) -> None:
        """Settle every GET made under this flag as cancelled; send none after; wake every
        wait under it."""
        with self._lock:
            self.cancelled = True
            made = [(fetcher, list(futures)) for fetcher, futures in self._made.items()]
            self._made = weakref.WeakKeyDictionary()
            waits = list(self._waits)
        for fetcher, futures in made:
            fetcher.cancelled(futures, self)
        for cond in waits:  # (not under our lock: a waiter takes it while holding cond)
            with cond:
                cond.notify_all()


def closed_reason(what: str = "the loader") -> str:
    """Why a GET of a closed loader (``what``) fails; for a GET given up without a flag too
    (a loader's settle past its deadline), which needs no :class:`Cancel` made for it."""
    return (
        f"{what} was closed: nothing is fetched for it after close() (the corpus or store it "
        "read stays open: read it directly, or make a new loader)"
    )


def current() -> Cancel | None:
    """The flag the reads of this thread (this context) are made under, if any."""
    return _CURRENT.get()


def reading_for(cancel: Cancel, run: Callable[[], Any]) -> Any:
    """``run()`` with its GETs made under ``cancel``."""
    token = _CURRENT.set(cancel)
    try:
        return run()
    finally:
        _CURRENT.reset(token)
