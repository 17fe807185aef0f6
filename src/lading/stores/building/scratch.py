"""Scratch folders beside the node cache that outlive no process: a killed worker's is removed.

A shard built into object storage is written whole on local disk first (:mod:`lading.stores.
building.remote_shards`), a merge mirrors the bucket's small files, a Ray task writes its block:
each in a folder of the node cache removed at the end. A process killed (SIGKILL, the OOM killer,
a preempted node) never reaches that end, and its folder, a whole shard perhaps, stayed forever.

So each folder holds :data:`MARK`, a file its process keeps an exclusive ``flock`` on for as long
as the folder is in use (as the node cache's claim owners do, :mod:`lading.remote.cache.owners`:
the kernel drops the lock when the process dies however it dies, in whatever PID namespace it
ran, and a reused pid never holds it). Every new scratch folder first sweeps its siblings: one
whose mark can be locked shared has no owner, and is removed. The folder is made and locked under
a hidden name, then renamed into place, so no sweep sees it before its lock is taken.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from lading.disk.held import flock_held

MARK = ".lading-scratch-owner"  # in each scratch folder, locked by the process using it


@contextlib.contextmanager
def owned_folder(parent: Path, prefix: str) -> Iterator[Path]:
    """A new folder ``parent/<prefix>...``, removed at the end whatever happens (and by a later
    call if this process is killed first); those of dead processes removed first."""
    parent.mkdir(parents=True, exist_ok=True)
    sweep(parent)
    making = Path(tempfile.mkdtemp(prefix=f".{prefix}", dir=parent))  # hidden: never swept
    fd = os.open(making / MARK, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        folder = parent / making.name[1:]
        os.rename(making, folder)
        try:
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    finally:
        os.close(fd)
        shutil.rmtree(making, ignore_errors=True)  # (gone unless the rename failed)


def sweep(parent: Path) -> list[Path]:
    """Remove the scratch folders in ``parent`` whose process is gone; those removed."""
    removed: list[Path] = []
    try:
        entries = [p for p in parent.iterdir() if not p.name.startswith(".")]
    except OSError:
        return removed
    for folder in entries:
        if not alive(folder / MARK):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def alive(mark: Path) -> bool:
    """Whether a process holds ``mark``'s lock; True also where there is no mark (not a
    scratch folder, or one made by an older lading: never removed here)."""
    return flock_held(mark, follow=False) is not False  # cannot tell (no locks here): kept
