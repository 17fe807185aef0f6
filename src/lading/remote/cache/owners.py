"""Who owns a claim: a token a process holds an ``flock`` on for as long as it lives.

A claim (a block being fetched) names its owner so that a process waiting for it can tell a
slow owner from a dead one. A bare pid cannot say: two containers sharing a hostPath cache
each have their pid 1, and a pid is reused after its process is gone. So each process makes
a random token, creates ``owners/<token>`` in the cache folder and locks it exclusively; the
kernel drops the lock when the process dies (however it dies), in whatever PID namespace it
ran, and no other process can ever hold that token. A waiter asks with a non-blocking shared
lock: refused, the owner lives; granted (or no file), the owner is gone and its file is
removed. A forked child makes its own token (the parent's lock is the parent's).

The file is made and locked under a hidden name, then renamed into place: a waiter that
looked between a file's making and its lock was granted the lock, took a live process for
gone and removed its file, and every process then took it for dead for the rest of its life
(2 of 30 rounds of 12 processes opening one folder at once; its late fills then wrote over
blocks others had placed in its evicted regions). No waiter looks at a hidden name.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
from pathlib import Path

from lading.disk.held import flock_held
from lading.remote.cache.folder import OWNERS, real_entries

DIR = OWNERS


class Owner:
    """This process's token in cache folder ``directory`` (made on first use)."""

    def __init__(self, directory: Path, mode: int = 0o666) -> None:
        self.folder, self.mode = directory / DIR, mode
        self._token: str | None = None
        self._fd = -1

    @property
    def token(self) -> str:
        """This process's token, its lock taken (the file made) on first use."""
        if self._token is None:
            try:
                self.folder.mkdir()
            except FileExistsError:
                pass  # (another user's, maybe: only its maker may chmod it)
            else:
                if self.mode & 0o020:  # a group's folder: so is this one
                    self.folder.chmod(0o2775)
            token = f"{os.getpid()}-{secrets.token_hex(6)}"
            making = self.folder / f".{token}"  # locked before any waiter can see it
            fd = os.open(making, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, self.mode)
            os.fchmod(fd, self.mode)  # the folder's mode, whatever the umask
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.rename(making, self.folder / token)
            self._token, self._fd = token, fd
        return self._token

    def alive(self, token: str | None) -> bool:
        """Whether the process that holds ``token`` lives (None: nobody, so no)."""
        if token is None:
            return False
        if token == self._token:
            return True
        if token.startswith("."):  # a token being made, not yet locked: never a claim's
            return False
        path = self.folder / token
        held = flock_held(path, follow=False)  # (a link there is no token: never opened)
        if held is None:  # no file (its owner closed it), or it cannot be locked: not alive
            return False
        if held:
            return True
        with contextlib.suppress(OSError):
            path.unlink()  # gone: its file goes too (the next asker finds no file)
        return False

    def others_alive(self) -> bool:
        """Whether a process other than this one holds a token in the folder (the files of
        those gone are removed on the way). Listed without following a link: one planted as
        the folder had every file of the folder it pointed at removed, each taken for a dead
        process's token (:mod:`.folder`)."""
        tokens = [name for name, _ in real_entries(self.folder)]
        return any(self.alive(t) for t in tokens if t != self._token and not t.startswith("."))

    def forked(self) -> None:
        """In a forked child: the parent's token is not this process's (its fd is closed
        here only: the parent keeps its lock)."""
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._fd)
        self._token, self._fd = None, -1

    def close(self) -> None:
        """Give the token up (at exit): its file is removed, then its lock dropped."""
        if self._token is not None:
            with contextlib.suppress(OSError):
                (self.folder / self._token).unlink()
            self.forked()
