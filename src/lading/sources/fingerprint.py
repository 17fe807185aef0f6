"""A source file's cheap identity, recorded at build time and compared on every open."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

_FINGERPRINT_BYTES = 1 << 16  # hash 64 KiB at each end: cheap even for a 100 GB corpus


def fingerprint(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Cheap identity of a file: size, mtime and a hash of its first and last 64 KiB.

    Stored in a store's metadata so that opening it can tell whether the source has changed.
    """
    p = Path(path)
    st = p.stat()
    digest = hashlib.sha256()
    with open(p, "rb") as f:
        digest.update(f.read(_FINGERPRINT_BYTES))
        if st.st_size > _FINGERPRINT_BYTES:
            f.seek(max(st.st_size - _FINGERPRINT_BYTES, _FINGERPRINT_BYTES))
            digest.update(f.read(_FINGERPRINT_BYTES))
    return {
        "path": str(p.resolve()),
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "head_tail_sha256": digest.hexdigest(),
    }


def fingerprint_changed(recorded: Mapping[str, Any]) -> str | None:
    """Why the file ``recorded`` describes differs from it now, or None when it looks the same.

    Size, the hash of the first and last 64 KiB, and the modification time: an edit in the
    middle that keeps the size changes only the last (make's rule; hashing the whole file on
    every open would read a 21 GB corpus per process: see benchmarks/RELIABILITY.md). A copy
    or ``touch`` of an unchanged source therefore counts as a change, and ``build_store``
    rebuilds. A missing file is not a change (the store may have been copied to another
    machine).
    """
    path = recorded.get("path")
    if not path or not os.path.exists(path):
        return None
    now = fingerprint(path)
    if now["size"] != recorded.get("size"):
        return f"{path} is now {now['size']} bytes, was {recorded.get('size')} at build time"
    if now["head_tail_sha256"] != recorded.get("head_tail_sha256"):
        return f"{path} has different content than at build time"
    if "mtime_ns" in recorded and now["mtime_ns"] != recorded["mtime_ns"]:
        return f"{path} was modified after the build (its modification time changed)"
    return None
