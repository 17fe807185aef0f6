"""Atomic directory builds: a private temporary directory, a file lock, and a rename at the end.

A build writes into ``DEST.tmp-<pid>-<random>`` beside the destination and renames it into place
only when every file is written and fsynced, so a crash at any moment leaves either no
destination or the previous complete one, plus a temporary directory that the next build under
the lock removes. Unrelated processes building the same destination are serialised by
``fcntl.flock`` on ``DEST.lock``: the lock dies with its holder, so a killed builder never
blocks the next one.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path

from lading.stores.layout import META_FILE, fsync_dir

DATASET_MARK = "_lading.json"
_TMP_MARK = ".tmp-"
_OLD_MARK = ".old-"


@contextlib.contextmanager
def build_lock(dest: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``DEST.lock`` (blocking) for the body of the ``with``."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    lock_path = dest.parent / f"{dest.name}.lock"
    with open(lock_path, "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def new_temp_dir(dest: Path) -> Path:
    """A fresh, empty directory beside ``dest`` (same filesystem, so the rename is atomic)."""
    tmp = dest.parent / f"{dest.name}{_TMP_MARK}{os.getpid()}-{secrets.token_hex(4)}"
    tmp.mkdir(parents=True)
    return tmp


def remove_dead_temps(dest: Path) -> list[Path]:
    """Remove temporary and old directories left by builders of ``dest`` that are not running.

    Call under :func:`build_lock`. A directory whose builder pid is still alive is kept.
    """
    removed = []
    for mark in (_TMP_MARK, _OLD_MARK):
        for path in dest.parent.glob(f"{dest.name}{mark}*"):
            pid_part = path.name[len(dest.name) + len(mark) :].split("-", 1)[0]
            if pid_part.isdigit() and _alive(int(pid_part)) and int(pid_part) != os.getpid():
                continue
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError as e:
        return e.errno == errno.EPERM
    return True


def is_ours_to_replace(dest: Path) -> bool:
    """Whether ``dest`` may be deleted by a rebuild: absent, an empty dir, or a lading directory.

    A lading directory has a ``meta.json`` (any content: a corrupt store may be replaced) or,
    for parquet output that other tools read as a dataset, a ``_lading.json`` (pyarrow skips
    names starting with ``_``); anything else is the user's and is never deleted.
    """
    if not dest.exists():
        return True
    if not dest.is_dir():
        return False
    marked = (dest / META_FILE).is_file() or (dest / DATASET_MARK).is_file()
    return marked or not any(dest.iterdir())


def publish(tmp: Path, dest: Path) -> None:
    """Move the finished ``tmp`` to ``dest``, replacing a previous version of it.

    Linux cannot rename a directory over a non-empty one, so the old version is first renamed
    aside (``DEST.old-<pid>-…``) and removed after; in between, ``dest`` is briefly absent,
    never half-written.
    """
    if not is_ours_to_replace(dest):
        raise FileExistsError(
            f"{dest} exists and is not a lading directory; refusing to replace it. "
            "Choose another destination or remove it yourself."
        )
    old = None
    if dest.exists():
        old = dest.parent / f"{dest.name}{_OLD_MARK}{os.getpid()}-{secrets.token_hex(4)}"
        os.replace(dest, old)
    os.replace(tmp, dest)
    fsync_dir(dest.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
