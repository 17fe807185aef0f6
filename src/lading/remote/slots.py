"""One cap on requests in flight for the whole node: slot files locked with ``flock``.

Every process of a node (8 ranks x 4 DataLoader workers) has its own fetch loop; a cap per
process multiplies by 32. The node's cap is ``n`` slot files in the cache directory: a call
(up to :data:`~lading.remote.fetch.CALL_RANGES` GETs) holds one slot, locked with
``flock`` for as long as it runs. The kernel drops a dead process's locks, so a killed rank
never keeps a slot; a lock is two system calls (~2 us), once a call, not once a GET.

A process's own calls share its open files: ``flock`` on a file this process already locked
succeeds again, so a process keeps the set of slots it holds and tries only the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import random
import threading
import time
from pathlib import Path

_WAIT_S = 0.002  # between tries while every slot is held


class NodeSlots:
    """``n`` slots shared by every process that opens ``directory`` (made if missing); its
    files are open from the first :meth:`acquire` until :meth:`close` (once no call holds a
    slot: a descriptor closed under a held slot could be reused by another file, which the
    release would then unlock)."""

    def __init__(self, directory: Path, n: int) -> None:
        self.directory, self.n = directory, max(1, n)
        self._lock = threading.Lock()  # the fds and held slots: the loop's and close()'s
        self._fds: list[int] = []
        self._held: set[int] = set()
        self._closing = False

    def __del__(self) -> None:
        """Dropped unclosed (a remote corpus or store its owner never closed): the files go
        with it. No call holds a slot of an object no one refers to. Without this a corpus
        dropped after a loader read it kept 12 descriptors, ~80 opens to EMFILE."""
        fds, self._fds = getattr(self, "_fds", []), []  # (an __init__ that raised made none)
        _close(fds)

    def forked(self) -> None:
        """In a forked child (its :class:`~lading.remote.fetch.Fetcher` says so): the parent's
        open files share its locks, so the child closes its copies (the parent's locks stay:
        a ``flock`` goes with the last descriptor of its file) and opens its own on first
        use."""
        fds, self._fds, self._held = self._fds, [], set()
        self._lock = threading.Lock()
        _close(fds)

    def _open(self) -> None:
        if self._fds:
            return
        from lading.remote.cache.folder import (  # (the cache package imports this)
            make_folders,
            open_new,
            shared,
        )

        group = shared(self.directory.parent)  # a group's cache folder: the slots are too
        make_folders(self.directory, group)
        mode = 0o664 if group else 0o644
        fds = [  # never through a link (a shared folder's: lading.remote.cache.folder)
            open_new(self.directory / f"slot-{i:04d}", os.O_RDWR | os.O_CREAT, mode)
            for i in range(self.n)
        ]  # a forked child opens its own: a lock is shared with the file description
        for fd in fds if group else ():
            with contextlib.suppress(OSError):  # (one another user made is theirs to chmod)
                os.fchmod(fd, mode)
        with self._lock:
            if self._closing or self._fds:  # (closed meanwhile)
                extra = fds
            else:
                self._fds, self._held, extra = fds, set(), []
        _close(extra)

    def _try(self) -> int | None:
        first = random.randrange(self.n)  # processes start at different slots
        with self._lock:  # (each flock a non-blocking call)
            for k in range(self.n):
                i = (first + k) % self.n
                if i in self._held or not self._fds:
                    continue
                try:
                    fcntl.flock(self._fds[i], fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue
                self._held.add(i)
                return i
        return None

    async def acquire(self, until: float | None = None) -> int | None:
        """A slot of the node's, waiting while every one is held (on the fetch loop), until
        ``until`` (``time.monotonic()``) at most; None once closed (the call is refused by
        its fetcher, closed too).

        Raises:
            TimeoutError: ``until`` passed with every slot held (another process's requests
                unanswered, or that process stopped while it held them)."""
        while not self._closing:
            self._open()
            if (slot := self._try()) is not None:
                return slot
            if until is not None and time.monotonic() >= until:
                raise asyncio.TimeoutError
            await asyncio.sleep(_WAIT_S)
        return None

    def release(self, slot: int) -> None:
        """Give ``slot`` back to the node; the last one held after :meth:`close` lets the
        files go."""
        with self._lock:
            if slot not in self._held:
                return
            self._held.discard(slot)
            fcntl.flock(self._fds[slot], fcntl.LOCK_UN)  # (non-blocking)
            fds: list[int] = []
            if self._closing and not self._held:
                fds, self._fds = self._fds, []
        _close(fds)

    def close(self) -> None:
        """Let the slot files go: at once where no call holds a slot, else at the last
        release. No slot is taken after."""
        with self._lock:
            self._closing = True
            fds: list[int] = []
            if not self._held:
                fds, self._fds = self._fds, []
        _close(fds)


def _close(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)
