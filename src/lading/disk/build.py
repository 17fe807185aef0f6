"""The one build context every builder goes through: lock, remove dead temps, stage, commit.

::

    current = committed_without_lock(dest, "lading.packed")  # a read, no lock (a read-only
    if reusable(current):                                   # mount); None where a killed
        return ...the current snapshot...                   # build's .tmp-* asks for the lock
    with BuildContext(dest, "lading.packed") as build:      # lock, clean, collect old snapshots
        if reusable(build.previous):                        # again under the lock: a racing
            return build.previous["snapshot"]               # builder may have just committed it
        with build.scratch() as tmp:                        # DEST/.tmp-<pid>-<hex>, gone on error
            ...write files into tmp, naming them f"{build.snapshot}/..." in the manifest...
            build.commit(tmp, manifest)                     # tmp becomes DEST/snap-<id>; meta.json

A snapshot format (packed store, token corpus, offsets index) commits by its manifest
(:mod:`lading.disk.snapshot`): no file a reader may have open is touched. A directory that other
tools read as a whole (a repartitioned parquet dataset) is published instead
(:meth:`BuildContext.publish`: written beside it, swapped in by one rename). A shard of a
parallel build is renamed into a name nothing holds yet (:meth:`BuildContext.publish_new`).
Builders of one destination, on this host or on other nodes of a shared filesystem, are
serialised by ``DEST.lock`` (:func:`lading.disk.atomic.build_lock`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

from lading.disk.atomic import (
    build_lock,
    is_ours_to_replace,
    lading_format,
    publish,
    remove_dead_temps,
    scratch,
)
from lading.disk.commit import collect_garbage, commit
from lading.disk.files import fsync_dir
from lading.disk.snapshot import TMP_PREFIX, check_files, load_manifest, new_snapshot_id
from lading.errors import StoreFormatError

KINDS = {  # what users call each snapshot format, in the refusal to replace one by another
    "lading.packed": "store",
    "lading.offsets": "store",
    "lading.tokens": "token corpus",
}


def refuse_other_kind(dest: object, other: str | None, fmt: str | None, what: str) -> None:
    """Refuse to commit a ``what`` (format ``fmt``) where ``dest`` (a folder or a URL) holds a
    snapshot of another format, ``other`` (what its ``meta.json`` says; None: none there).

    Raises:
        FileExistsError: naming both kinds (``holds a lading store (lading.packed); refusing
            to replace it with a token corpus``).
    """
    if fmt is not None and other is not None and other != fmt:
        raise FileExistsError(
            f"{dest} holds a lading {KINDS.get(other, other)} ({other}); refusing to "
            f"replace it with a {what}. Choose another destination or remove it yourself."
        )


def committed(dest: str | os.PathLike[str], fmt: str) -> dict[str, Any] | None:
    """The manifest of ``dest``'s current snapshot of format ``fmt``; None if there is none
    or it cannot be read (a build replaces it).

    Read without the lock, as a reader opens it (the manifest is committed by one rename):
    what a builder checks first, so that a destination already up to date is reused where
    ``DEST.lock`` cannot be created (a prebuilt dataset on a read-only mount). A build
    checks again under the lock (:attr:`BuildContext.previous`), where racing builders agree.
    """
    try:
        return load_manifest(Path(dest), fmt)
    except StoreFormatError:
        return None


def has_debris(dest: str | os.PathLike[str]) -> bool:
    """Whether ``dest`` holds a build's scratch folder (``.tmp-*``: a build killed before its
    commit), which only a build under the lock removes: a builder that finds one takes the
    lock (and sweeps it) rather than reusing the current snapshot without it."""
    try:
        return any(entry.name.startswith(TMP_PREFIX) for entry in os.scandir(dest))
    except OSError:
        return False


def intact(dest: str | os.PathLike[str], manifest: dict[str, Any], fmt: str) -> bool:
    """Whether every file ``manifest`` lists is in ``dest`` at its size and spot checksum (what
    an open checks): a damaged snapshot of the same source is built again, never reused (its
    open's error says to rebuild: reusing it made that advice fail the same way)."""
    try:
        check_files(Path(dest), manifest, fmt)
    except StoreFormatError:  # (a missing file included)
        return False
    return True


def committed_without_lock(dest: str | os.PathLike[str], fmt: str) -> dict[str, Any] | None:
    """The manifest a builder may reuse without taking the lock: ``dest``'s current snapshot
    of format ``fmt`` (:func:`committed`), or None where nothing is committed or ``dest``
    holds a killed build's scratch folder (:func:`has_debris`: only a build under the lock
    removes it, so the builder takes the lock, which sweeps it, and checks again there)."""
    return None if has_debris(dest) else committed(dest, fmt)


class BuildContext:
    """Build ``dest`` under its lock (see the module docstring for the steps).

    Args:
        dest: the directory to build.
        fmt: its snapshot format (``"lading.packed"``...), or None for a directory published
            whole or a shard.
        what: what the user calls it, for the refusal to replace a folder lading did not write.
        collect: remove old snapshots as the lock is taken (what a build writing its payload
            frees room with); a merge passes False: the build it is about to commit may look
            abandoned (shards built a day before). Its commit collects after (a retried
            merge that commits nothing leaves that to the next commit).

    Attributes:
        snapshot: the id this build commits as (its files go under ``DEST/<snapshot>/``).
        previous: the manifest committed before (read under the lock), or None.
    """

    def __init__(
        self,
        dest: str | os.PathLike[str],
        fmt: str | None,
        what: str = "store",
        collect: bool = True,
    ) -> None:
        self.dest = Path(dest)
        self.fmt = fmt
        self.what = what
        self.collect = collect
        self.snapshot = new_snapshot_id()
        self.previous: dict[str, Any] | None = None
        self._lock: contextlib.ExitStack | None = None

    def __enter__(self) -> BuildContext:
        stack = contextlib.ExitStack()
        stack.enter_context(build_lock(self.dest))
        self._lock = stack
        try:
            remove_dead_temps(self.dest)
            if self.fmt is not None:
                self.previous = self._current()
                if self.collect:
                    collect_garbage(self.dest, self.fmt)
        except BaseException:
            stack.close()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def _current(self) -> dict[str, Any] | None:
        assert self.fmt is not None
        return committed(self.dest, self.fmt)

    def check_ours(self) -> None:
        """Refuse to build into a folder that lading did not write.

        Raises:
            FileExistsError: naming the folder and what to do.
        """
        if not is_ours_to_replace(self.dest):
            raise FileExistsError(
                f"{self.dest} exists and is not a lading {self.what}; refusing to replace it. "
                "Choose another destination or remove it yourself."
            )
        self.check_kind()

    def check_kind(self) -> None:
        """Refuse to commit over a snapshot of another lading kind (a token corpus over a
        store: it would no longer open). What a merge checks: the folder became lading's when
        its shards were claimed (:meth:`check_ours` there), and what a user put beside them
        since is left alone, not a reason to refuse.

        Raises:
            FileExistsError: naming both kinds.
        """
        refuse_other_kind(self.dest, lading_format(self.dest), self.fmt, self.what)

    @contextlib.contextmanager
    def scratch(self) -> Iterator[Path]:
        """A fresh temporary directory, in ``dest`` for a snapshot format (``dest`` is made),
        beside it otherwise; removed if the body fails (a full disk becomes an
        :class:`~lading.errors.OutOfSpaceError`)."""
        inside = self.fmt is not None
        created = inside and not self.dest.exists()
        if inside:
            self.dest.mkdir(parents=True, exist_ok=True)
        try:
            with scratch(self.dest, inside=inside) as tmp:
                yield tmp
        except BaseException:
            if created:  # a first build that failed leaves no folder behind
                with contextlib.suppress(OSError):
                    self.dest.rmdir()
            raise

    def commit(self, tmp: Path | None, manifest: dict[str, Any]) -> str:
        """Rename ``tmp`` (if any) to ``dest/<snapshot>`` and commit ``manifest`` as the
        current snapshot; old snapshots past their grace go. Returns the snapshot id."""
        manifest["snapshot"] = self.snapshot
        if tmp is not None:
            os.rename(tmp, self.dest / self.snapshot)
        commit(self.dest, manifest, self.previous)
        self.previous = manifest
        return self.snapshot

    def publish(self, tmp: Path) -> None:
        """Swap the finished ``tmp`` in as ``dest`` (a directory read whole by other tools)."""
        publish(tmp, self.dest)

    def publish_new(self, tmp: Path) -> bool:
        """Rename ``tmp`` to ``dest``, which nothing may hold yet; False (and ``tmp`` removed)
        when another builder got there first (a shard built twice: the same content)."""
        try:
            os.rename(tmp, self.dest)
        except OSError as e:
            if e.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
            shutil.rmtree(tmp, ignore_errors=True)
            return False
        fsync_dir(self.dest.parent)
        return True
