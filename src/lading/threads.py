"""Every thread lading starts has an owner, an end and one rule at ``fork()`` and at exit.

Imports a thread may start on first use are made here, before any thread: a fork that lands
while a thread imports a module copies that module's import lock held, and the child's first
use of it waits for ever (numpy >= 2.4's ``np.unique`` imports ``numpy.ma`` on its first call:
a fresh-clone CI run's forked child hung there, found with gdb in the stray child).

Owners (a loader's read-ahead, the node cache's fill thread, the fetch loop) register here
with the stage they belong to; this module is the only place that hooks ``fork()`` and exit:

- **fork**: before it, :data:`SQLITE` is taken exclusively, so no thread of this process is
  inside SQLite when the process is copied (SQLite's mutexes would be copied locked and the
  child would hang on its first query); every transaction of the node cache holds it shared.
  After it, in the parent, it is released; in the child, which has no threads, every
  registered owner's ``forked()`` drops its per-process state (threads, queues, GETs in flight,
  connections), made again on first use: a carried read-ahead pass builds from its cursor.
  What an owner drops there it hands to :func:`carry` first, and the child never frees it:
  a destructor run in the child meets the parent's state without its threads. obstore's
  client, freed there, waited for ever on a lock its runtime's threads held at the fork (a
  fresh-clone CI run's forked child hung 80 minutes at the line that dropped it). SQLite's
  connections are the exception: the ledger closes the parent's in the child, as SQLite's
  locks must be the child's own (:meth:`lading.remote.cache.ledger.Ledger.forked`).
- **exit**: one hook, in stage order (at ``atexit``; in a ``multiprocessing`` child, such as a
  DataLoader worker, which ends by ``os._exit`` past ``atexit``, as one of its finalizers: else
  a worker's last figures, claims and GETs were dropped with it): read-ahead threads stop first
  (no new reads), then the node caches' fill threads (their claims handed back), then the
  fetchers (every GET not yet answered settled, none retried), then the fetch loop (its calls
  drained: a GET ending on obstore's runtime after the interpreter began to exit aborts the
  process; its tasks ended: one left pending is reported on stderr as the interpreter exits).
  Each owner's ``close()`` bounds its own waits.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import multiprocessing
import multiprocessing.util
import os
import threading
import weakref
from collections.abc import Iterator
from typing import Protocol

import numpy.ma  # noqa: F401  # imported lazily by np.unique (numpy >= 2.4): see the module doc

STAGES = ("ahead", "fill", "fetch", "loop")  # the order in which owners are closed at exit
FORK_WAIT_S = 10.0  # how long a fork waits for the threads inside SQLite to leave it


class Owner(Protocol):
    """What a thread's owner gives this module."""

    def forked(self) -> None:
        """In a forked child: drop every per-process thing (the threads are gone)."""

    def close(self) -> None:
        """End the thread and what it holds, every wait bounded."""


class Gate:
    """Held shared by every thread while it is inside SQLite, exclusively around a fork."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._inside = 0
        self._forking = False

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        """``with gate.shared():`` a section no fork may cut through."""
        with self._cond:
            self._cond.wait_for(lambda: not self._forking, FORK_WAIT_S)
            self._inside += 1
        try:
            yield
        finally:
            with self._cond:
                self._inside -= 1
                self._cond.notify_all()

    def before_fork(self) -> None:
        with self._cond:
            self._forking = True
            self._cond.wait_for(lambda: self._inside == 0, FORK_WAIT_S)

    def after_fork_parent(self) -> None:
        with self._cond:
            self._forking = False
            self._cond.notify_all()

    def after_fork_child(self) -> None:
        self.__init__()  # type: ignore[misc]  # the parent's lock may have been held


SQLITE = Gate()
# A forked child's copies of its parent's per-process objects: held for the child's life, and
# past it (one reference more than the list's owners, so not even the interpreter's end frees
# them: a process forked by hand may exit through it).
_CARRIED: list[object] = []
ctypes.pythonapi.Py_IncRef(ctypes.py_object(_CARRIED))


def carry(*objects: object) -> None:
    """In a forked child, keep ``objects`` (the parent's: a client, a loop, GETs in flight)
    from ever being freed here, where what they belong to is gone (module doc).
    None is skipped: an owner's ``forked()`` that also makes its first state carries nothing
    then."""
    kept = tuple(o for o in objects if o is not None)
    if kept:
        _CARRIED.append(kept)


_OWNERS: dict[str, weakref.WeakSet[Owner]] = {stage: weakref.WeakSet() for stage in STAGES}


def register(owner: Owner, stage: str) -> None:
    """Give ``owner`` the fork rule and its place in the exit order (held weakly)."""
    if stage not in _OWNERS:
        raise ValueError(f"unknown stage {stage!r}; choose from {list(STAGES)}")
    _OWNERS[stage].add(owner)
    _close_at_child_exit()


def _owners(stage: str) -> list[Owner]:
    """The live owners of ``stage``, listed while other threads may register more (a loader
    pass starting makes a flag): a WeakSet that grows while listed raises, so it is tried
    again (a registration is a moment's work)."""
    for _ in range(100):
        try:
            return list(_OWNERS[stage])
        except RuntimeError:  # ("Set changed size during iteration")
            continue
    return list(_OWNERS[stage].copy())


def _in_child() -> None:
    SQLITE.after_fork_child()
    for stage in STAGES:
        for owner in _owners(stage):
            owner.forked()


os.register_at_fork(
    before=SQLITE.before_fork,
    after_in_parent=SQLITE.after_fork_parent,
    after_in_child=_in_child,
)


@atexit.register
def close_all() -> None:
    """Close every owner of this process, stage by stage (see the module doc)."""
    for stage in STAGES:
        for owner in _owners(stage):
            with contextlib.suppress(Exception):  # exiting: a report would go nowhere
                owner.close()


_exit_hooked = 0  # the pid whose multiprocessing finalizers close the owners at its exit


def _close_at_child_exit(_: object = None) -> None:
    """In a ``multiprocessing`` child (forked, spawned or from a forkserver), once: close
    every owner as the child's finalizers run; it exits by ``os._exit``, past ``atexit``."""
    global _exit_hooked
    if _exit_hooked == os.getpid() or multiprocessing.parent_process() is None:
        return
    _exit_hooked = os.getpid()
    multiprocessing.util.Finalize(None, close_all, exitpriority=10)


class _AfterFork:
    """What ``multiprocessing`` calls in a child it forked, after clearing the finalizers
    the parent had (a fork's own hook runs before that)."""


_AFTER_FORK = _AfterFork()
multiprocessing.util.register_after_fork(_AFTER_FORK, _close_at_child_exit)
