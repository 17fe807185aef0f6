"""Atomic builds' primitives: a private temporary directory, a file lock, a rename at the end.

A build writes into a temporary directory (``DEST/.tmp-<pid>-<node><random>`` for a snapshot
format, which commits by its manifest: :mod:`lading.disk.snapshot`;
``DEST.tmp-<pid>-<node><random>`` beside a directory that is published whole, such as a parquet
folder) and moves it into place only when every file is written and fsynced, so a crash at any
moment leaves the previous complete version (or none), plus a temporary directory that the
next build under the lock removes: at once where its builder was of this very node (``<node>``,
eight hex digits of :func:`lading.disk.lock.node_tag`: host, boot and PID namespace) and its pid
is dead; elsewhere (another host, a container of its own) once unchanged for
:data:`~lading.disk.snapshot.ABANDONED_S`. A pid says nothing outside its namespace, and a
builder whose lock was taken over (a suspended one) goes on in its directory. Names of the code
before (``<pid>-<random>``, eight hex digits) are judged by their pid on this host, as then.
Where no atomic exchange of two directories exists (NFS), a crash between :func:`publish`'s two
renames leaves no ``DEST`` but its versions beside it, and that next build puts the complete one
back first (:func:`recover_aside`).
:mod:`lading.disk.build` puts these steps together for every builder. Processes building the
same destination, on this host or on other nodes of a shared filesystem, are serialised by
``DEST.lock`` (:mod:`lading.disk.lock`: an ``O_EXCL`` file with a heartbeat, not ``flock``,
which hangs on Lustre and NFS): a killed builder's lock is taken over, at once on the same node
(host, boot and PID namespace), after ``LADING_LOCK_STALE_S`` (default 60) seconds elsewhere.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

from lading.disk.files import fsync_dir
from lading.disk.lock import HEARTBEAT_S, STALE_AFTER_S, FileLock, node_tag
from lading.disk.snapshot import (
    ABANDONED_S,
    META_FILE,
    STAGE_MARK,
    is_build_dir,
    is_snapshot_dir,
)
from lading.errors import NO_SPACE, OutOfSpaceError

DATASET_MARK = "_lading.json"
_TMP_MARK = ".tmp-"
_OLD_MARK = ".old-"


@contextlib.contextmanager
def build_lock(dest: Path, timeout: float | None = None) -> Iterator[None]:
    """Hold an exclusive lock on ``DEST.lock`` (blocking; ``TimeoutError`` after ``timeout``
    seconds where one is given) for the body of the ``with``.

    Waiting, it prints the holder's host, pid and age every 30 s. ``LADING_LOCK_STALE_S`` sets
    how long a silent holder on another host keeps it (default 60 s; heartbeat a twelfth).
    A full disk while the lock file is written raises :class:`OutOfSpaceError` naming
    ``dest``, and leaves no lock file (an empty one would stall the next build 60 s); a
    folder this process may not write in, the system's error naming the lock file (the CLI
    says it in one line with the fix).
    """
    stale = float(os.environ.get("LADING_LOCK_STALE_S", "") or STALE_AFTER_S)
    lock = FileLock(
        dest.parent / f"{dest.name}.lock",
        stale_after=stale,
        heartbeat=min(HEARTBEAT_S, stale / 12),
        timeout=timeout,
    )
    try:
        lock.acquire()
    except OSError as e:
        if e.errno not in NO_SPACE:
            raise
        state = "left as it was" if dest.exists() else "not created"
        raise OutOfSpaceError(
            e.errno,
            f"building {dest}: {_limit_reached(e.errno)} while taking its lock {lock.path} "
            f"({os.strerror(e.errno)}). Nothing was written and {dest} was {state}. "
            "Free space on that filesystem or build elsewhere.",
        ) from None
    try:
        yield
    finally:
        lock.release()


def new_temp_dir(dest: Path, inside: bool = False) -> Path:
    """A fresh, empty directory beside ``dest`` (``DEST.tmp-<pid>-<node><hex>``), or with
    ``inside`` in it (``DEST/.tmp-<pid>-<node><hex>``): on the same filesystem, so its rename
    is atomic. ``<node>`` names this host, boot and PID namespace (see the module docstring)."""
    name = _temp_name()
    tmp = dest / f".tmp-{name}" if inside else dest.parent / f"{dest.name}{_TMP_MARK}{name}"
    tmp.mkdir(parents=True)
    return tmp


@contextlib.contextmanager
def scratch(dest: Path, inside: bool = False) -> Iterator[Path]:
    """A fresh temporary directory for a build of ``dest``, removed if the body fails.

    Call under :func:`build_lock`; the body writes into the directory and publishes or
    commits it. ``inside``: the directory is made in ``dest`` (a snapshot format's new files
    go there), else beside it. A full disk (``ENOSPC``, ``EDQUOT``) or a file size limit
    (``EFBIG``) becomes an :class:`OutOfSpaceError` that says how much was written and that
    ``dest`` is untouched, instead of a traceback from inside a writer thread.
    """
    tmp = new_temp_dir(dest, inside)
    try:
        yield tmp
    except OSError as e:
        written = _size_of(tmp)
        shutil.rmtree(tmp, ignore_errors=True)
        if e.errno not in NO_SPACE:
            raise
        # scratch inside, dest itself was made for the build: what counts is a committed manifest
        there = (dest / META_FILE).exists() if inside else dest.exists()
        state = "left as it was" if there else "not created"
        raise OutOfSpaceError(
            e.errno,
            f"building {dest}: {_limit_reached(e.errno)} after writing {written:,} bytes "
            f"({Path(e.filename).name if e.filename else 'writing'}: {os.strerror(e.errno)}). "
            "The partial build was removed "
            f"and {dest} was {state}. Free space on that filesystem or build elsewhere.",
        ) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _limit_reached(code: int) -> str:
    """What ran out, for an :class:`OutOfSpaceError` of errno ``code`` (one of
    :data:`~lading.errors.NO_SPACE`)."""
    if code == errno.EFBIG:
        return "the file size limit (ulimit -f) was reached"
    return "the filesystem is full"


def _size_of(directory: Path) -> int:
    total = 0
    for path in directory.rglob("*"):
        with contextlib.suppress(OSError):
            total += path.stat().st_size if path.is_file() else 0
    return total


def _temp_name() -> str:
    """``<pid>-<node><random>``: sixteen hex digits after the pid, where the code before wrote
    eight (random); ``<node>`` is random too where this node cannot be named (no ``/proc``):
    such a directory is then never judged by its pid."""
    return f"{os.getpid()}-{node_tag() or secrets.token_hex(4)}{secrets.token_hex(4)}"


def remove_dead_temps(dest: Path) -> list[Path]:
    """Remove temporary and old directories (and files) left by builders of ``dest`` that are
    not running: ``DEST.tmp-*`` and ``DEST.old-*`` beside it, ``DEST/.tmp-*`` in it.

    Call under :func:`build_lock`. One whose builder is alive on this node (or, of the names
    written before nodes were, whose pid is alive on this host) is kept; one of another node
    (host, boot or PID namespace) is kept until nothing in it changed for
    :data:`~lading.disk.snapshot.ABANDONED_S`: its pid cannot be judged here. First,
    where a publisher died between the two renames of :func:`publish` and left no ``dest``,
    the complete copy it left is put back (:func:`recover_aside`), not removed.
    """
    recover_aside(dest)
    marks = tuple(f"{dest.name}{mark}" for mark in (_TMP_MARK, _OLD_MARK))  # same length
    found = [(path, path.name[len(marks[0]) :]) for path in _named(dest.parent, marks)]
    found += [(path, path.name[len(_TMP_MARK) :]) for path in _named(dest, (_TMP_MARK,))]
    removed = []
    for path, rest in found:
        if not _abandoned(path, rest):
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        removed.append(path)
    return removed


def left_aside(dest: Path) -> list[Path]:
    """The previous versions of ``dest`` that :func:`publish` renamed aside
    (``DEST.old-<pid>-<hex>``), whatever their publisher's state."""
    return sorted(_named(dest.parent, (f"{dest.name}{_OLD_MARK}",)))


def recover_aside(dest: Path) -> Path | None:
    """Put back ``dest`` where a publisher died between the two renames of :func:`publish`
    without ``RENAME_EXCHANGE`` (NFS): no ``dest``, its previous version (whole) renamed aside
    as ``DEST.old-<pid>-<hex>``, the finished new one as ``DEST.tmp-<pid>-<hex>``.

    The new one goes back where it can be told finished: the only temporary of that pid,
    holding the mark its writer writes last that the old one holds too (the ``meta.json`` of
    the same format: a checkpoint's; a dataset's ``_lading.json``, a staged copy's
    ``_lading_stage.json``). Otherwise the old one does. A version aside whose publisher is
    alive on this node is left alone (it is between its renames); one of another node is put
    back (its pid cannot be judged here, and under the lock a publisher between its renames
    was taken over: ``dest`` whole again beats ``dest`` missing, and such a publisher, were it
    only suspended, fails at its next rename rather than ever leave a half version). Call under
    :func:`build_lock`; the rest is dead temporaries for :func:`remove_dead_temps`.

    Returns:
        The directory renamed to ``dest`` (by its former name), or None where none was.

    Raises:
        FileExistsError: several versions aside, none more recent by construction: which one
            to keep is the user's choice (lading alone never leaves two).
    """
    if os.path.lexists(dest):
        return None
    olds = [path for path in left_aside(dest) if not _alive_here(_rest(path, dest, _OLD_MARK))]
    if not olds:
        return None
    if len(olds) > 1:
        raise FileExistsError(
            f"{dest} is missing and {len(olds)} previous versions of it were left beside it by "
            f"publishes that did not finish: {', '.join(p.name for p in olds)}. Rename the one "
            f"to keep to {dest.name} and remove the others."
        )
    old = olds[0]
    owner = _owner(_rest(old, dest, _OLD_MARK))
    news = [
        path
        for path in _named(dest.parent, (f"{dest.name}{_TMP_MARK}",))
        if _owner(_rest(path, dest, _TMP_MARK)) == owner
    ]
    chosen = news[0] if len(news) == 1 and _finished_like(news[0], old) else old
    os.replace(chosen, dest)
    fsync_dir(dest.parent)
    return chosen


def _rest(path: Path, dest: Path, mark: str) -> str:
    """``<pid>-<hex>`` of ``DEST<mark><pid>-<hex>``."""
    return path.name[len(dest.name) + len(mark) :]


_HEX = frozenset("0123456789abcdef")


def _node_of(rest: str) -> str | None:
    """The node tag of ``<pid>-<node><random>`` (sixteen hex digits), None in a name of the
    code before (``<pid>-<random>``, eight) or another."""
    tail = rest.partition("-")[2]
    return tail[:8] if len(tail) == 16 and set(tail) <= _HEX else None


def _owner(rest: str) -> str:
    """Whose ``<pid>-<hex>`` is: its pid, and its node where the name has one."""
    return f"{rest.partition('-')[0]}-{_node_of(rest) or ''}"


def _foreign(rest: str) -> bool:
    """Whether ``rest`` names a builder of another node (host, boot or PID namespace), or
    one whose node is unknown here: its pid says nothing here."""
    node = _node_of(rest)
    return node is not None and node != node_tag()


def _alive_here(rest: str) -> bool:
    """Whether the builder named by ``<pid>-<hex>`` is provably running on this node: a name
    of this node (or of the code before: judged on this host, as then) whose pid is alive.
    This process counts as dead: its own leftovers are from a process of the same pid before
    it."""
    pid = rest.partition("-")[0]
    if _foreign(rest):
        return False
    return pid.isdigit() and int(pid) != os.getpid() and _alive(int(pid))


def _abandoned(path: Path, rest: str) -> bool:
    """Whether ``path`` (``...<pid>-<hex>``) may be removed: its builder, of this node, is
    dead; of another node, nothing in it changed for :data:`ABANDONED_S`."""
    if _foreign(rest):
        return time.time() - _newest_mtime(path) >= ABANDONED_S
    return not _alive_here(rest)


def _newest_mtime(path: Path) -> float:
    """The latest change time of ``path`` and of anything in it (now where it is gone)."""
    try:
        newest = path.lstat().st_mtime
    except OSError:
        return time.time()
    if path.is_dir() and not path.is_symlink():
        for folder, dirs, files in os.walk(path):
            for name in (*dirs, *files):
                with contextlib.suppress(OSError):
                    newest = max(newest, os.lstat(os.path.join(folder, name)).st_mtime)
    return newest


def _finished_like(new: Path, old: Path) -> bool:
    """Whether ``new`` holds every mark ``old`` holds (at least one): each publisher writes its
    mark last, so a new version with it was finished."""
    marks = [name for name in (DATASET_MARK, STAGE_MARK) if (old / name).is_file()]
    fmt = lading_format(old)
    if fmt is None and not marks:
        return False
    return lading_format(new) == fmt and all((new / name).is_file() for name in marks)


def _named(folder: Path, prefixes: tuple[str, ...]) -> list[Path]:
    """The entries of ``folder`` whose name starts with one of ``prefixes`` (none where it is
    not a folder): one listing, no glob (whose pattern a destination's own name, with a ``[``
    or a ``*`` in it, would change; and twice as slow, in every build's lock)."""
    try:
        with os.scandir(folder) as entries:
            return [Path(e.path) for e in entries if e.name.startswith(prefixes)]
    except (FileNotFoundError, NotADirectoryError):
        return []


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError as e:
        return e.errno == errno.EPERM
    return True


def is_ours_to_replace(dest: Path) -> bool:
    """Whether ``dest`` may be deleted by a rebuild: absent, an empty dir, or a lading directory.

    A lading directory has a ``meta.json`` that lading wrote (:func:`lading_format` names its
    format) or, for parquet output that other tools read as a dataset, a ``_lading.json``
    (pyarrow skips names starting with ``_``), or is a staged copy (``_lading_stage.json``), or
    holds only what lading makes (snapshots, shards of a parallel build, temps, locks: a store
    whose ``meta.json`` was damaged may be rebuilt). Anything else is the user's and is never
    deleted: a ``meta.json`` of the user's own does not make a folder lading's.
    """
    if not dest.exists():
        return True
    if not dest.is_dir():
        return False
    if lading_format(dest) is not None:
        return True
    if any((dest / mark).is_file() for mark in (DATASET_MARK, STAGE_MARK)):
        return True
    # shard workers of a parallel build fill build-<id>/ before any meta.json exists; a
    # damaged meta.json counts only beside what lading made (a user's alone is theirs)
    entries = list(dest.iterdir())
    made = [entry for entry in entries if _lading_made(entry)]
    return len(made) == len(entries) or (
        bool(made) and all(e.name == META_FILE or _lading_made(e) for e in entries)
    )


def lading_format(dest: Path) -> str | None:
    """The format (``"lading.packed"``, ``"lading.tokens"``...) of the manifest ``dest``'s
    ``meta.json`` holds, or None where there is none, or it is not one lading wrote."""
    try:
        meta = json.loads((dest / META_FILE).read_bytes())
    except (OSError, ValueError):
        return None
    fmt = meta.get("format") if isinstance(meta, dict) else None
    return fmt if isinstance(fmt, str) and fmt.startswith("lading.") else None


def _lading_made(entry: Path) -> bool:
    name = entry.name
    return (
        is_build_dir(entry)
        or is_snapshot_dir(entry)
        or name.startswith(".tmp-")
        or name.endswith(".lock")
    )


def refuse_to_replace(dest: Path, new: str | None) -> None:
    """Refuse what :func:`publish` would refuse to replace with a directory of lading format
    ``new`` (None: a plain folder): a file, a folder lading did not write, a lading directory
    of another format. What writes a whole copy first (``lading stage``) asks before it.

    Raises:
        FileExistsError: naming ``dest``, what it holds and the fix.
    """
    if dest.is_file():
        raise FileExistsError(
            f"{dest} is a file; refusing to replace it with a directory. Choose another "
            "destination or remove it yourself."
        )
    if not is_ours_to_replace(dest):
        raise FileExistsError(
            f"{dest} exists and is not a lading directory; refusing to replace it. "
            "Choose another destination or remove it yourself."
        )
    other = lading_format(dest)
    if other is not None and other != new:  # (a dataset, a checkpoint over a store...)
        raise FileExistsError(
            f"{dest} holds a lading {other} directory; refusing to replace it with "
            f"{'a ' + new + ' one' if new else 'another kind of directory'}. Choose another "
            "destination or remove it yourself."
        )


def publish(tmp: Path, dest: Path) -> None:
    """Move the finished ``tmp`` to ``dest``, replacing a previous version of it.

    Linux cannot rename a directory over a non-empty one. Where the kernel and filesystem
    allow, the two are swapped in one step (``renameat2`` with ``RENAME_EXCHANGE``), so
    ``dest`` is the old version or the new one at every instant. Elsewhere the old version is
    first renamed aside (``DEST.old-<pid>-…``): in between, ``dest`` is briefly absent, never
    half-written, and a crash there leaves both versions, which the next holder of the lock
    puts back (:func:`recover_aside`, from :func:`remove_dead_temps`).

    The old version is deleted at once: what a reader may still open of it (a snapshot a
    pickled store pins) must be in ``tmp`` already, as :mod:`lading.disk.stage` links the
    snapshots it keeps for the grace into a new staged copy.
    """
    refuse_to_replace(dest, lading_format(tmp))
    if dest.exists() and _exchange(tmp, dest):
        fsync_dir(dest.parent)
        shutil.rmtree(tmp, ignore_errors=True)  # now holds the old version
        return
    old = None
    if dest.exists():
        old = dest.parent / f"{dest.name}{_OLD_MARK}{_temp_name()}"
        os.replace(dest, old)
    try:
        os.replace(tmp, dest)
    except BaseException:
        if old is not None:  # an error here, not a crash: the previous version back at once
            os.replace(old, dest)
        raise
    fsync_dir(dest.parent)
    if old is not None:  # a DEST.old-* is only ever a whole version: renamed before deleted
        trash = dest.parent / f"{dest.name}{_TMP_MARK}{_temp_name()}"
        os.replace(old, trash)
        shutil.rmtree(trash, ignore_errors=True)


_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically; False where ``renameat2`` or the flag is not supported."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_uint,
    ]
    result = renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if result == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EPERM):
        return False
    raise OSError(code, f"swapping {a} and {b}: {os.strerror(code)}")
