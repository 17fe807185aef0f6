"""A directory-build lock that works on NFS, Lustre and Weka: an ``O_EXCL`` file with a heartbeat.

``fcntl.flock`` hangs or silently does nothing on several network filesystems (HF datasets #329,
#6744), so the lock is a file created with ``O_CREAT | O_EXCL`` (atomic on NFSv3+, Lustre, GPFS,
Weka) holding JSON: host, boot id, PID namespace, pid, start time, a random token and a
heartbeat counter. A thread of the holder rewrites it (write a temporary file, rename it over
the lock) every ``heartbeat`` seconds. A waiter takes the lock over when

- the holder is on this very node (same host name, boot id and PID namespace) and its pid is
  dead (at once: a SIGKILLed builder), or
- the file has not changed for ``stale_after`` seconds of the *waiter's* monotonic clock (a
  holder on another node that died or lost its mount). Clocks of different nodes are never
  compared, so skew cannot make a live lock look stale. A pid is only judged in the PID
  namespace it was read in: containers sharing a mount and a host name (``docker --network
  host``, Kubernetes ``hostNetwork`` pods) have PID namespaces of their own, where a live
  holder's pid may not exist; a lock file without the boot id and namespace (written by
  lading before they were) is judged by this rule alone too.

Takeover renames the stale file to a private name, checks it is the very file judged stale (same
token and beat) and deletes it; then the waiter competes for ``O_EXCL`` like anyone else. The
holder checks the token before each heartbeat, so a holder that was (wrongly) taken over stops
beating and says so. What the lock protects stays safe even then: builds go to private
temporary directories published by an atomic rename (:mod:`lading.disk.atomic`).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import secrets
import socket
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

HEARTBEAT_S = 5.0  # the holder rewrites the lock file this often
STALE_AFTER_S = 60.0  # a lock unchanged this long (12 missed beats) is taken over
POLL_S = 0.2
REPORT_EVERY_S = 30.0  # a waiter names the holder this often
# _NO_FSYNC: the lock file is written without an fsync (as its heartbeats always were). Its
# contents only tell a waiter whom to wait for: after a killed process they are in the page
# cache either way; other hosts see them once the file is closed (NFS flushes on close, Lustre
# and GPFS are coherent). Only a machine crash can lose them, and the lock is then still taken
# over: an empty lock file (no holder named) is stale once unchanged for stale_after seconds.
# The fsync cost one journal commit (0.3-1 ms, more on a busy disk) on every build and merge.
_HOST = socket.gethostname()


def _read_boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return ""


_BOOT_ID = _read_boot_id()  # "" where unknown (no /proc)
_LINUX = sys.platform.startswith("linux")


def pid_namespace() -> str:
    """This process's PID namespace (``pid:[4026531836]``), "" where unknown. Read each time:
    a child forked after its parent's ``unshare(CLONE_NEWPID)`` is in another one."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def this_node() -> tuple[str, str, str] | None:
    """(host name, boot id, PID namespace): where a pid means the same process; None where
    this Linux cannot say (no ``/proc``): then no pid is judged as this node's. Elsewhere
    (macOS) there are no PID namespaces: the host name alone."""
    here = (_HOST, _BOOT_ID, pid_namespace())
    if _LINUX and not (here[1] and here[2]):
        return None
    return here


def node_tag() -> str | None:
    """Eight hex digits naming :func:`this_node` (temporaries carry it), None where unknown."""
    here = this_node()
    if here is None:
        return None
    return hashlib.sha256("\0".join(here).encode("utf-8")).hexdigest()[:8]


@dataclass(frozen=True)
class Holder:
    """What a lock file says about the process holding it."""

    host: str
    pid: int
    started: float  # wall-clock time.time() of the holder's host
    token: str
    beat: int
    boot: str | None = None  # None: a lock file written before boot ids were
    pidns: str | None = None  # None: written before PID namespaces were

    def on_this_node(self) -> bool:
        """Whether this holder's pid is one of this process's PID namespace on this boot of
        this host (only then does its pid say whether it is alive)."""
        here = this_node()
        if here is None or self.boot is None or self.pidns is None:
            return False  # a lock file of the code before: whose namespace is unknown
        return (self.host, self.boot, self.pidns) == here

    def describe(self, now: float | None = None) -> str:
        age = (time.time() if now is None else now) - self.started
        return f"host {self.host}, pid {self.pid}, held for {age:.0f}s"


def read_holder(path: Path) -> Holder | None:
    """The holder named in lock file ``path``; None if absent or still being written."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return Holder(
            str(data["host"]),
            int(data["pid"]),
            float(data["started"]),
            str(data["token"]),
            int(data["beat"]),
            _optional(data.get("boot")),
            _optional(data.get("pidns")),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _optional(value: object) -> str | None:
    return None if value is None else str(value)


class FileLock:
    """An exclusive lock on ``path`` across processes and hosts (see the module docstring).

    Args:
        path: the lock file (created, removed on release).
        heartbeat: seconds between the holder's rewrites of the file.
        stale_after: seconds without a change after which a waiter takes the lock over.
        timeout: give up waiting after this many seconds (None: wait as long as it takes).
        report: where to say who holds the lock while waiting (None: stderr).
        report_every: seconds between those messages.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        heartbeat: float = HEARTBEAT_S,
        stale_after: float = STALE_AFTER_S,
        timeout: float | None = None,
        report: TextIO | None = None,
        report_every: float = REPORT_EVERY_S,
    ) -> None:
        if stale_after <= 2 * heartbeat:
            raise ValueError(
                f"stale_after={stale_after}s must exceed two heartbeats ({2 * heartbeat}s), or a "
                "live holder could be taken over"
            )
        self.path = Path(path)
        self.heartbeat, self.stale_after, self.timeout = heartbeat, stale_after, timeout
        self.report, self.report_every = report, report_every
        self.token = ""
        self._started = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._beat_state = threading.Lock()  # guards _writing only: never held across I/O
        self._writing = False  # the heartbeat thread is writing a beat now
        self.lost = False  # set if another process took the lock over while we held it

    def acquire(self) -> None:
        """Block until the lock is ours."""
        started = time.monotonic()
        last_report = started
        seen: tuple[Any, ...] | None = None  # (content) of the lock file as last observed
        seen_since = started
        while True:
            if self._try_create():
                return
            now = time.monotonic()
            holder = read_holder(self.path)
            state = (holder, self._mtime())
            if state != seen:
                seen, seen_since = state, now
            if self._stale(holder, now - seen_since):
                self._take_over(holder)
                continue
            if self.timeout is not None and now - started > self.timeout:
                raise TimeoutError(f"gave up after {self.timeout:.0f}s waiting for {self._who()}")
            if now - last_report >= self.report_every:
                last_report = now
                print(
                    f"lading: waiting {now - started:.0f}s for {self._who(holder)}; it is taken "
                    f"over if unchanged for {self.stale_after:.0f}s",
                    file=self.report or sys.stderr,
                    flush=True,
                )
            time.sleep(POLL_S)

    def release(self) -> None:
        """Stop the heartbeat and remove the lock file (if it is still ours).

        The heartbeat thread ends by itself once told to stop; release waits for it only
        where it is writing a beat now (which could put the file back after its removal),
        and then at most :meth:`_join_s` seconds: a beat stuck on a hung mount held the
        release (and the build) for as long as the mount hung. The thread removes what such
        a beat put back once its write returns.
        """
        self._stop.set()
        thread, self._thread = self._thread, None
        with self._beat_state:  # after the stop: a beat not yet begun sees it and ends
            writing = self._writing
        if thread is not None and writing:
            thread.join(self._join_s())
        holder = read_holder(self.path)
        if holder is not None and holder.token == self.token:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()

    def __enter__(self) -> FileLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def _who(self, holder: Holder | None = None) -> str:
        holder = holder or read_holder(self.path)
        named = holder.describe() if holder else "a holder still writing its name"
        return f"the lock {self.path} ({named})"

    def _mtime(self) -> int | None:
        try:
            return self.path.stat().st_mtime_ns
        except OSError:
            return None

    def _stale(self, holder: Holder | None, unchanged_for: float) -> bool:
        if not self.path.exists():
            return False
        if holder is not None and holder.on_this_node() and not pid_alive(holder.pid):
            return True  # a dead process of this very namespace, boot and host holds nothing
        return unchanged_for >= self.stale_after

    def _content(self, beat: int, token: str) -> bytes:
        record = {
            "host": _HOST,
            "boot": _BOOT_ID,
            "pidns": pid_namespace(),
            "pid": os.getpid(),
            "started": self._started,
            "token": token,
            "beat": beat,
        }
        return json.dumps(record).encode("utf-8")

    def _try_create(self) -> bool:
        self.token = secrets.token_hex(8)
        self._started = time.time()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        try:  # not fsynced: the name is what excludes (O_EXCL); see _NO_FSYNC
            os.write(fd, self._content(0, self.token))
        except BaseException:
            # a full disk can take the create (an inode was free) and fail the write: the
            # empty file left would hold off every later taker for stale_after seconds
            os.close(fd)
            with contextlib.suppress(OSError):
                self.path.unlink()
            raise
        os.close(fd)
        # a stop and a token of this hold's own: a thread of an earlier hold that has not
        # woken yet still sees its stop, and never writes or removes this hold's file
        self._stop = threading.Event()
        self.lost = False
        self._thread = threading.Thread(
            target=self._beat,
            args=(self._stop, self.token),
            name="lading-lock-heartbeat",
            daemon=True,
        )
        self._thread.start()
        return True

    def _join_s(self) -> float:
        """How long a release waits for a beat being written: a second, or a heartbeat."""
        return max(1.0, self.heartbeat)

    def _beat(self, stop: threading.Event, token: str) -> None:
        beat = 0
        while not stop.wait(self.heartbeat):
            with self._beat_state:
                if stop.is_set():  # released meanwhile: the file is not ours to write
                    return
                self._writing = True
            try:
                self._write_beat(beat := beat + 1, stop, token)
            finally:
                with self._beat_state:
                    self._writing = False
            if self.lost:
                return

    def _write_beat(self, beat: int, stop: threading.Event, token: str) -> None:
        """Rewrite the lock file with ``beat`` if it is still the hold ``token``'s (else mark
        the lock lost and say so). A release that did not wait for this write (a hung mount)
        left the file to it: removed again once written, if it still names that hold."""
        holder = read_holder(self.path)
        if holder is None or holder.token != token:
            if stop.is_set():
                return  # a released hold's late beat (a hung mount): nothing was lost
            self.lost = True
            print(
                f"lading: the lock {self.path} was taken over by another process "
                f"({holder.describe() if holder else 'removed'}); this build goes on, and "
                "its atomic publish keeps the result whole",
                file=self.report or sys.stderr,
                flush=True,
            )
            return
        tmp = self.path.with_name(f"{self.path.name}.beat-{token}")
        with contextlib.suppress(OSError):  # a missed beat is retried at the next one
            tmp.write_bytes(self._content(beat, token))
            os.replace(tmp, self.path)
        if stop.is_set():
            mine = read_holder(self.path)
            if mine is not None and mine.token == token:
                with contextlib.suppress(FileNotFoundError):
                    self.path.unlink()

    def _take_over(self, judged: Holder | None) -> None:
        aside = self.path.with_name(f"{self.path.name}.stale-{secrets.token_hex(4)}")
        try:
            os.rename(self.path, aside)
        except FileNotFoundError:
            return  # someone else removed it first
        moved = read_holder(aside)
        same = (moved is None and judged is None) or (
            moved is not None
            and judged is not None
            and (moved.token, moved.beat) == (judged.token, judged.beat)
        )
        if same:
            print(
                f"lading: took over the stale lock {self.path} "
                f"({judged.describe() if judged else 'no holder written'})",
                file=self.report or sys.stderr,
                flush=True,
            )
            aside.unlink(missing_ok=True)
            return
        # we moved a live lock that replaced the stale one in between: put it back
        with contextlib.suppress(FileExistsError):  # else a third process holds a new lock,
            os.link(aside, self.path)  # and the moved holder notices at its next heartbeat
        aside.unlink(missing_ok=True)


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host (a zombie counts as dead)."""
    try:
        os.kill(pid, 0)
    except OSError as e:
        return e.errno == errno.EPERM
    try:  # a killed child not yet reaped by its parent is a zombie: it holds nothing
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


@contextlib.contextmanager
def file_lock(path: str | os.PathLike[str], **options: Any) -> Iterator[FileLock]:
    """Hold :class:`FileLock` ``path`` for the body of the ``with``."""
    lock = FileLock(path, **options)
    lock.acquire()
    try:
        yield lock
    finally:
        lock.release()
