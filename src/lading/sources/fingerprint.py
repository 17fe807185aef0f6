"""A source file's cheap identity, recorded at build time and compared on every open."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from lading.errors import SourceError

_FINGERPRINT_BYTES = 1 << 16  # hash 64 KiB at each end: cheap even for a 100 GB corpus

# Called with a source's fingerprint after a build has read that source and before it compares
# the identity and commits: tests replace the file here to prove the check deterministically.
AFTER_READ: Callable[[Mapping[str, Any]], None] | None = None


def fingerprint(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Cheap identity of a file: device, inode, size, mtime and a hash of its first and last
    64 KiB, all taken from one open descriptor (``fstat``, then reads of that descriptor), so
    they describe one file even if another is renamed over the path meanwhile.

    Stored in a store's metadata so that opening it can tell whether the source has changed;
    taken before a build reads the file and compared after (:func:`changed_during`).
    """
    p = Path(path)
    digest = hashlib.sha256()
    with open(p, "rb") as f:
        st = os.fstat(f.fileno())
        digest.update(f.read(_FINGERPRINT_BYTES))
        if st.st_size > _FINGERPRINT_BYTES:
            f.seek(max(st.st_size - _FINGERPRINT_BYTES, _FINGERPRINT_BYTES))
            digest.update(f.read(_FINGERPRINT_BYTES))
    return {
        "path": str(p.resolve()),
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "head_tail_sha256": digest.hexdigest(),
        "dev": st.st_dev,
        "ino": st.st_ino,
    }


def changed_during(before: Mapping[str, Any]) -> str | None:
    """Why the file ``before`` describes (a :func:`fingerprint` taken before a build read it) is
    not that file any more, or None: another file at the path (device or inode), another size,
    modification time or head/tail hash. A build compares after reading, and fails on a change:
    what it read may be part old, part new."""
    path = str(before["path"])
    try:
        now = fingerprint(path)
    except FileNotFoundError:
        return f"{path} was removed while it was read"
    if (now["dev"], now["ino"]) != (before.get("dev"), before.get("ino")):
        return f"{path} was replaced by another file while it was read"
    for key, what in (
        ("size", "size"),
        ("mtime_ns", "modification time"),
        ("head_tail_sha256", "content"),
    ):
        if now[key] != before.get(key):
            return f"{path} changed while it was read (its {what} changed)"
    return None


def refuse_if_changed(before: Mapping[str, Any]) -> None:
    """Fail a build whose source (``before``: its :func:`fingerprint` taken before reading)
    changed while it was read; a source that is not a file (no ``dev``) passes.

    Raises:
        SourceError: naming the file and what changed; the caller commits nothing.
    """
    if AFTER_READ is not None:
        AFTER_READ(before)
    if "dev" not in before:
        return
    changed = changed_during(before)
    if changed:
        raise SourceError(
            str(before["path"]),
            None,
            f"{changed}; what was read may mix its old and new content, so nothing was "
            "committed. Build again once the file is final",
        )


def fingerprint_changed(recorded: Mapping[str, Any]) -> str | None:
    """Why the file ``recorded`` describes differs from it now, or None when it looks the same.

    Size, the hash of the first and last 64 KiB, and the modification time: an edit in the
    middle that keeps the size changes only the last (make's rule; hashing the whole file on
    every open would read a 21 GB corpus per process: see benchmarks/RELIABILITY.md). A copy
    or ``touch`` of an unchanged source therefore counts as a change, and ``build_store``
    rebuilds. A missing file is not a change (the store may have been copied to another
    machine).
    """
    path = recorded.get("path") if isinstance(recorded, Mapping) else None
    if not isinstance(path, str) or not path or "\0" in path or not os.path.isfile(path):
        return None  # a manifest is input: only a regular file is read (never a FIFO, a device)
    now = fingerprint(path)
    if now["size"] != recorded.get("size"):
        return f"{path} is now {now['size']} bytes, was {recorded.get('size')!r} at build time"
    if now["head_tail_sha256"] != recorded.get("head_tail_sha256"):
        return f"{path} has different content than at build time"
    if "mtime_ns" in recorded and now["mtime_ns"] != recorded["mtime_ns"]:
        return f"{path} was modified after the build (its modification time changed)"
    return None
