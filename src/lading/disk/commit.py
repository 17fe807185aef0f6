"""Committing a snapshot, and collecting the ones no reader can still be opening.

:func:`commit` writes ``snap-<id>/manifest.json`` and then replaces ``meta.json`` (a temporary
file, fsynced, renamed over it: the commit point). The manifest being replaced enters the
``history`` of the new one with the time it was replaced; :func:`collect_garbage` removes a
replaced snapshot once that is longer ago than :func:`~lading.disk.snapshot.grace_seconds`
(see :data:`~lading.disk.snapshot.GRACE_S` for why 600 s). Both run under the build lock.
A bucket's commits write their history the same way (:func:`stamped`, right before their
``meta.json`` PUT), with no lock: :mod:`lading.stores.building.bucket_gc` collects there.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from lading.disk.files import fsync_dir, write_file
from lading.disk.names import check_inside, check_name
from lading.disk.snapshot import (
    ABANDONED_S,
    MANIFEST,
    META_FILE,
    SNAP_PREFIX,
    TMP_PREFIX,
    grace_seconds,
    is_build_dir,
    is_snapshot_dir,
    read_current,
    spot_crc32,
)
from lading.errors import StoreFormatError

# What a version 1 store kept at its top: ragged columns, the id index, an offsets index's
# spans, a tokenizer. Never meta.json.
_V1_FILE = re.compile(
    r"^(?:[\w.-]+\.(?:bin|off)|index\.[a-z]+|span\.(?:start|len)|tokenizer\.json)$"
)


def units(manifest: dict[str, Any]) -> set[str]:
    """Top-level names a snapshot uses: its ``snap-``/``build-`` directories (a version 1
    snapshot: its files). Never ``meta.json``."""
    out = {name.split("/", 1)[0] for name in manifest.get("files", {})}
    if str(manifest.get("snapshot", "")).startswith(SNAP_PREFIX):
        out.add(manifest["snapshot"])
    out.discard(META_FILE)
    return out


def replaced(previous: dict[str, Any], now: float) -> dict[str, Any]:
    """The history entry of the snapshot ``previous`` (its manifest) replaced at ``now``: its
    id, the time, and the units it uses (kept while a reader may still be opening them)."""
    return {"snapshot": previous["snapshot"], "replaced_at": now, "units": sorted(units(previous))}


def commit(root: Path, manifest: dict[str, Any], previous: dict[str, Any] | None) -> list[str]:
    """Make ``manifest`` the current snapshot of ``root`` (call under the build lock); then
    remove what no reader can still be opening (see :func:`collect_garbage`). Returns the
    names removed.

    Its files must be in place (under ``snap-<id>/`` or ``build-<id>/``); each gets its spot
    checksum here. ``snap-<id>/manifest.json`` is written, then ``meta.json`` replaced
    atomically. ``previous`` (the manifest being replaced) enters the history of replaced
    snapshots that are still kept.
    """
    now = time.time()
    kept, expired = history_after(previous, now)
    snap = manifest["snapshot"]
    files = manifest["files"]
    field, where = "a name in the directory's files", root / META_FILE
    for name in files:  # plain relative names (a manifest name is refused otherwise) ...
        check_name(name, field, where)
    # ... and no symlink on their way leads out: each directory looked at once, not a
    # realpath a file (17 of them cost ~0.4 ms of a merge's ~6)
    check_inside(root, files, field, where)
    for name, info in files.items():
        info["spot_crc32"] = spot_crc32(root / name)
    manifest["history"] = kept
    manifest.setdefault("committed_at", now)
    text = json.dumps(manifest, indent=2, sort_keys=True).encode("utf-8")
    (root / snap).mkdir(exist_ok=True)
    write_file(root / snap / MANIFEST, text)
    fsync_dir(root / snap)
    tmp = root / f"{TMP_PREFIX}{os.getpid()}-{secrets.token_hex(4)}.{META_FILE}"
    write_file(tmp, text)
    os.replace(tmp, root / META_FILE)  # the commit: readers see the old manifest or this one
    fsync_dir(root)
    return _sweep(root, manifest, expired, now)


def history_after(
    previous: dict[str, Any] | None, now: float
) -> tuple[list[dict[str, Any]], set[str]]:
    """The ``history`` of a manifest committed at ``now`` over ``previous`` (the current one's
    entries still within the grace, and ``previous`` itself, replaced now), and the names
    only its expired entries used (to remove: no reader can still be opening them)."""
    kept, expired = _split_history(previous, now)
    if previous is not None and previous.get("snapshot") is not None:
        kept.append(replaced(previous, now))
    return kept, expired


def stamped(manifest: dict[str, Any], previous: dict[str, Any] | None, now: float) -> bytes:
    """``manifest``'s bytes as the commit at ``now`` over ``previous`` writes them (a bucket's,
    stamped right before its ``meta.json`` PUT): ``committed_at`` and ``history``
    (:func:`history_after`) set, so a replaced snapshot's grace counts from its replacement,
    however long the upload before it took."""
    manifest["committed_at"] = now
    manifest["history"] = history_after(previous, now)[0]
    return json.dumps(manifest, indent=2, sort_keys=True).encode("utf-8")


def _split_history(
    manifest: dict[str, Any] | None, now: float
) -> tuple[list[dict[str, Any]], set[str]]:
    """(history entries still within the grace, names only expired entries used)."""
    history = [h for h in (manifest or {}).get("history", []) if isinstance(h, dict)]
    grace = grace_seconds()
    kept = [h for h in history if now - float(h.get("replaced_at", 0)) < grace]
    expired: set[str] = set()
    for h in history:
        if h not in kept:
            expired.update(str(u) for u in h.get("units", []))
            expired.add(str(h.get("snapshot", "")))
    return kept, expired


def collect_garbage(root: Path, fmt_name: str) -> list[str]:
    """Remove what no reader can still be opening (call under the build lock); the names removed.

    Kept: the current snapshot, every snapshot replaced less than :func:`grace_seconds` ago,
    and ``build-`` directories no snapshot names that changed within :data:`ABANDONED_S` (a
    parallel build still under way). Removed: older snapshots' ``snap-`` directories (their
    manifest first, so a pinned reader is told it is gone), the ``build-`` directories and
    version 1 files only they used, and ``snap-`` directories no manifest committed (a build
    killed between its rename and its commit).
    """
    try:
        current = read_current(root, fmt_name)
    except StoreFormatError:
        return []
    now = time.time()
    return _sweep(root, current, _split_history(current, now)[1], now)


def _sweep(root: Path, current: dict[str, Any], expired: set[str], now: float) -> list[str]:
    kept, also = _split_history(current, now)
    expired = expired | also
    keep = units(current).union(*(set(h.get("units", [])) for h in kept))
    keep.update(str(h.get("snapshot", "")) for h in kept)
    removed = []
    for entry in sorted(_entries(root)):
        name = entry.name
        if name in keep or entry.is_symlink():
            continue  # lading makes no symlink: one may lead out of the store, never follow it
        if is_snapshot_dir(entry):
            (entry / MANIFEST).unlink(missing_ok=True)  # first: a pinned reader learns it is gone
        elif is_build_dir(entry):
            if name not in expired and now - _newest_mtime(entry) < ABANDONED_S:
                continue
        elif name not in expired or not entry.is_file() or not _V1_FILE.match(name):
            continue  # else only version 1 files that a replaced snapshot listed: never a
            # folder, nor a file no version 1 store has (a manifest's history is input too)
        _remove(entry)
        removed.append(name)
    return removed


def _entries(root: Path) -> Iterable[Path]:
    with contextlib.suppress(FileNotFoundError):
        yield from root.iterdir()


def _newest_mtime(path: Path) -> float:
    newest = path.stat().st_mtime
    for sub in path.rglob("*"):
        with contextlib.suppress(OSError):
            newest = max(newest, sub.stat().st_mtime)
    return newest


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
