"""Snapshots: immutable files under version-unique paths, and one manifest committed last.

A directory of a snapshot format (a packed store, a token corpus, an offsets index) holds::

    meta.json                  the current manifest: the commit point, replaced atomically
    snap-<id>/manifest.json    each retained snapshot's manifest (the same JSON), immutable
    snap-<id>/...              files a one-process build (or a merge) wrote for that snapshot
    build-<id>/...             files that shard workers wrote before a merge committed them
    .tmp-<pid>-<hex>/          a build being written (removed under the lock once its builder died)

The manifest names every file by its path relative to the directory, with its size, CRC32 and
the CRC32 of its first and last 4 KiB. A build writes new files only (``snap-<id>`` is new for
every commit; a ``build-<id>`` directory holds only shards written once and renamed into
place), then commits: ``snap-<id>/manifest.json`` and a new ``meta.json``, written to a
temporary file, fsynced and renamed over the old one (``os.replace``; a PUT on object storage is
atomic the same way). So no file a reader may have open is ever rewritten, and a reader that
reads one manifest and opens what it names sees one snapshot: :func:`open_snapshot`.

Old snapshots go at a later commit (or build) under the lock, once they were replaced more
than :func:`grace_seconds` ago: see :data:`GRACE_S` for why that long, and
:mod:`lading.disk.commit` for the commit and the collection. A reader pinned to a
snapshot that was removed gets :class:`SnapshotGoneError`. An open memory map of a deleted file
stays valid (POSIX), so readers that have opened never notice.

Version 1 of these formats (every file at the top of the directory, the directory swapped whole
on a rebuild) is read as one snapshot whose id is ``v1-`` and the SHA-256 of its ``meta.json``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from lading.disk.formats import check_version, disk_format
from lading.disk.names import check_inside, check_layout, check_name, inside, refuse
from lading.disk.remote import meant_url
from lading.errors import LadingError, OtherFormatError, StoreFormatError, StoreNotFoundError

META_FILE = "meta.json"
MANIFEST = "manifest.json"  # inside snap-<id>/
SNAP_PREFIX = "snap-"
BUILD_PREFIX = "build-"
WRITE_PROBE = ".lading-write-probe-"  # a bucket build writes and deletes it before it starts
BUILD_MARK = "build.json"  # in every build-<id>/ lading made: what a collection may remove
_SNAP_NAME = re.compile(r"^snap-\d{8}T\d{6}Z-[0-9a-f]{8}$")
TMP_PREFIX = ".tmp-"
STAGE_MARK = "_lading_stage.json"  # in a copy made by ``lading stage`` (of any directory)
SPOT_BYTES = 4096
GRACE_ENV = "LADING_SNAPSHOT_GRACE_S"
# How long a replaced snapshot's files stay. An open reads meta.json, then checks and maps the
# 4-14 files it names: ~1 ms on a local disk, under a second on a loaded network filesystem.
# A pickled store (a spawned DataLoader worker, a rank) reopens the snapshot its parent pinned
# within its start-up: 2-5 s, most of it importing torch. 600 s is over 100x the slowest of
# these, and costs one old copy of the data on disk for 10 minutes after a rebuild.
GRACE_S = 600.0
# An unreferenced build-<id> (shards of a parallel build not merged yet) is left alone for a
# day: a Slurm array's tasks may wait hours in the queue between shards.
ABANDONED_S = 24 * 3600.0
OPEN_TRIES = 10  # a file gone between reading meta.json and opening it: read meta.json again
T = TypeVar("T")


class SnapshotGoneError(StoreFormatError):
    """The snapshot a reader is pinned to was removed (replaced longer ago than the grace)."""


class MissingFileError(StoreFormatError):
    """A file the manifest names is not there (gone with an old snapshot, or never written)."""


def new_snapshot_id() -> str:
    """A new, unique snapshot id (its directory name): UTC time of day and 32 random bits."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return f"{SNAP_PREFIX}{stamp}-{secrets.token_hex(4)}"


def is_snapshot_dir(path: Path) -> bool:
    """Whether ``path`` is named as :func:`new_snapshot_id` names snapshot directories and is
    a directory, not a symlink to one (lading never makes one: it may lead out of the store)."""
    return bool(_SNAP_NAME.match(path.name)) and path.is_dir() and not path.is_symlink()


def is_build_dir(path: Path) -> bool:
    """Whether ``path`` is a ``build-<id>`` directory that lading made (it holds
    :data:`BUILD_MARK`): a user's folder that happens to be called ``build-x`` is not, nor a
    symlink to one."""
    return (
        path.name.startswith(BUILD_PREFIX)
        and not path.is_symlink()
        and (path / BUILD_MARK).is_file()
    )


def grace_seconds() -> float:
    """Seconds a replaced snapshot is kept: ``LADING_SNAPSHOT_GRACE_S``, else :data:`GRACE_S`."""
    value = os.environ.get(GRACE_ENV, "")
    try:
        return float(value) if value else GRACE_S
    except ValueError:
        raise ValueError(f"{GRACE_ENV}={value!r}: expected seconds, e.g. 600") from None


# ------------------------------------------------------------------------------ reading


def decode_manifest(raw: bytes, where: str | Path, fmt_name: str) -> dict[str, Any]:
    """The bytes of a ``meta.json`` as a manifest of format ``fmt_name``, checked: JSON, that
    format, a version this lading reads, a file list, and every name the file list and the
    layout use (:mod:`lading.disk.names`: relative, inside, listed; a local reader also checks
    symlinks). Its snapshot id is the caller's to check (a local directory and an object-store
    prefix name a version 1 store's differently).

    Raises:
        StoreFormatError: naming ``where`` and how to rebuild.
    """
    fmt = disk_format(fmt_name)
    try:
        meta = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise StoreFormatError(f"{where} is not valid JSON ({e}); {fmt.rebuild}") from None
    if not isinstance(meta, dict) or meta.get("format") != fmt_name:
        found = meta.get("format") if isinstance(meta, dict) else type(meta).__name__
        raise other_format(where, found, fmt_name)
    check_version(fmt_name, meta.get("version"), where)
    if not isinstance(meta.get("files"), dict):
        raise StoreFormatError(f"{where}: no file list; {fmt.rebuild}")
    for name in meta["files"]:  # on a disk or in a bucket alike (symlinks: check_files)
        check_name(name, f"a name in the {fmt.what}'s files", where)
    check_layout(meta, fmt_name, where)
    return meta


# what reads each format a manifest may be mistaken for (a token corpus given to `lading get`)
_READ_BY = {
    "lading.packed": "open it with lading.open_store(path); at the command line `lading "
    "inspect`, `lading get`, `lading verify`",
    "lading.tokens": "open it with lading.lm.TokenCorpus.open(path); at the command line "
    "`lading inspect`, `lading verify`, `lading train lm --corpus`",
    "lading.offsets": "open it with lading.OffsetStore(path); at the command line `lading verify`",
}


def other_format(where: str | Path, found: object, fmt_name: str) -> StoreFormatError:
    """The error for a manifest ``where`` of format ``found`` read as ``fmt_name``: another
    lading format is named as what it is and what reads it (an :class:`OtherFormatError`,
    which a caller reading any format tells from damage); anything else as found."""
    if not isinstance(found, str) or found not in _READ_BY:
        return StoreFormatError(f"{where}: format is {found!r}, expected {fmt_name!r}")
    place = os.fspath(where)
    folder = place.removesuffix("/" + META_FILE) if place != META_FILE else "."
    return OtherFormatError(
        f"{folder} is a lading {disk_format(found).what}, not {_a(disk_format(fmt_name).what)} "
        f"({META_FILE} says format {found!r}): {_READ_BY[found]}",
        found,
    )


def _a(what: str) -> str:
    return f"{'an' if what[0] in 'aeiou' else 'a'} {what}"


def _parse(raw: bytes, where: Path, fmt_name: str) -> dict[str, Any]:
    meta = decode_manifest(raw, where, fmt_name)
    if meta["version"] == 1:  # one flat directory: its manifest's hash is its identity
        meta["snapshot"] = "v1-" + hashlib.sha256(raw).hexdigest()[:16]
    elif not str(meta.get("snapshot", "")).startswith(SNAP_PREFIX):
        raise StoreFormatError(f"{where}: no snapshot id; {disk_format(fmt_name).rebuild}")
    elif "/" in check_name(meta["snapshot"], "snapshot", where):
        raise refuse(where, "snapshot", meta["snapshot"], "is not one directory's name")
    return meta


def check_directory(root: Path, fmt_name: str) -> None:
    """Refuse a ``root`` that is a file or not there: nothing a ``fmt_name`` could be in
    (``lading verify`` tells this from damage, which is found inside a directory).

    Raises:
        StoreFormatError: naming ``root`` and the fix.
    """
    what, made_by = disk_format(fmt_name).what, disk_format(fmt_name).made_by
    if root.is_file():
        example = f" (e.g. `{made_by.format(source=root)}`, then DEST)" if made_by else ""
        raise StoreFormatError(
            f"{root} is a file, not a lading {what} (a directory holding {META_FILE}); "
            f"pass the directory a build wrote{example}"
        )
    if not root.is_dir():
        raise StoreFormatError(f"{root} is not a lading {what}: no such directory{meant_url(root)}")
    if not (root / META_FILE).exists() and not any(root.glob("snap-*")):
        # nothing committed there (a store missing its snapshot's meta.json, snapshots there,
        # is damage: verify's to say)
        raise no_manifest(root, fmt_name)


def no_manifest(root: Path, fmt_name: str) -> StoreFormatError:
    """The error for a ``root`` with no ``meta.json``: where a parallel build's shards wait
    there (``build-<id>/``), the merge that commits them (which names any shard missing);
    else an interrupted build, and the fix ``fmt_name``'s format names."""
    fmt = disk_format(fmt_name)
    waiting = {
        p.name: merge_command(_read_or_none(p / BUILD_MARK))
        for p in sorted(root.glob(f"{BUILD_PREFIX}*"))
    }
    if waiting:
        return unmerged(str(root), waiting, fmt.what)
    scratch = list(root.glob(f"{TMP_PREFIX}*"))
    if scratch:  # a killed build's: its files say what it was building (`lading inspect`
        # and `verify` of a killed `lading lm build` named the store's command)
        if any((p / "tokens.bin").exists() for p in scratch):
            fmt = disk_format("lading.tokens")
        return StoreFormatError(
            f"{root} is not a lading {fmt.what}: {META_FILE} is missing (an interrupted build "
            f"leaves no meta.json); {fmt.rebuild}"
        )
    inner = sorted(p.parent for p in root.glob(f"*/{META_FILE}"))
    if inner:  # (`lading train`'s OUT folder: its store is OUT/store)
        return StoreFormatError(
            f"{root} is not a lading {fmt.what}: {META_FILE} is missing; {inner[0]} holds one "
            "(pass that folder)"
        )
    build = f"; a build makes one: `{fmt.made_by.format(source='SOURCE')}`" if fmt.made_by else ""
    return StoreFormatError(
        f"{root} is not a lading {fmt.what}: {META_FILE} is missing (pass the folder a build "
        f"wrote){build}"
    )


def unmerged(where: str, waiting: dict[str, str], what: str) -> StoreNotFoundError:
    """The error for ``where`` (a folder or a URL) with no manifest but the shards of parallel
    builds waiting there (``waiting``: build id -> the command that merges it; ``what``: the
    kind named where the builds are of both kinds)."""
    builds, kinds = ", ".join(waiting), set(waiting.values())
    merges = " or ".join(f"`{m} {where}`" for m in sorted(kinds))
    tokens = kinds == {"lading lm merge"}
    what = what if len(kinds) > 1 else "token corpus" if tokens else "store"
    return StoreNotFoundError(
        f"{where} is not a lading {what} yet: it holds the shards of a parallel build "
        f"not merged ({builds}); {merges} commits them, or names the shards still to build"
    )


def _read_or_none(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


def merge_command(record: bytes | None) -> str:
    """The command merging the build whose ``build.json`` holds ``record``: ``lading lm
    merge`` where its options say it makes a token corpus, ``lading merge`` otherwise
    (unreadable too: that merge reads it and says what is wrong)."""
    try:
        options = json.loads(record or b"").get("options")
    except (ValueError, AttributeError):
        options = None
    tokens = isinstance(options, dict) and options.get("kind") == "tokens"
    return "lading lm merge" if tokens else "lading merge"


def read_current(root: Path, fmt_name: str) -> dict[str, Any]:
    check_directory(root, fmt_name)
    try:
        raw = (root / META_FILE).read_bytes()
    except FileNotFoundError:
        raise no_manifest(root, fmt_name) from None
    return _parse(raw, root / META_FILE, fmt_name)


def load_manifest(
    root: str | os.PathLike[str], fmt_name: str, snapshot: str | None = None
) -> dict[str, Any]:
    """The current manifest of ``root`` (its ``meta.json``), or with ``snapshot`` that one's.

    Format and version are checked; the files are not (see :func:`check_files`).

    Raises:
        StoreFormatError: no manifest, another format, a version this lading cannot read.
        SnapshotGoneError: ``snapshot`` is no longer kept.
    """
    return _load(Path(root), fmt_name, snapshot)[0]


def _load(root: Path, fmt_name: str, snapshot: str | None) -> tuple[dict[str, Any], Path]:
    """:func:`load_manifest`, and the file it was read from (for messages)."""
    current = read_current(root, fmt_name)
    if snapshot is None or current["snapshot"] == snapshot:
        return current, root / META_FILE
    path = root / snapshot / MANIFEST
    try:
        raw = path.read_bytes() if snapshot.startswith(SNAP_PREFIX) else None
    except FileNotFoundError:
        raw = None
    if raw is None or "/" in snapshot:
        raise gone(root, snapshot, current["snapshot"])
    return _parse(raw, path, fmt_name), path


def gone(root: Path, snapshot: str, current: str) -> SnapshotGoneError:
    """The error for a pinned snapshot that is no longer kept, saying what replaced it (a
    rebuild, or a new stage of a staged copy) and what to do."""
    return SnapshotGoneError(
        f"{root}: snapshot {snapshot} was removed; this object was pinned to it (a pickled "
        f"store reopens the snapshot it was opened on) and {_replaced_by(root, snapshot)}. "
        f"Open the store again to read its current snapshot {current}."
    )


def _replaced_by(root: Path, snapshot: str) -> str:
    """What replaced ``snapshot`` of ``root``, and when, as far as ``root`` tells: a staged
    copy's mark (:mod:`lading.disk.stage`) says when a restage replaced it (its ``kept``
    entry) or when the copy was last staged; a built store keeps it for the grace."""
    grace = f"{grace_seconds():.0f}s ({GRACE_ENV})"
    try:
        mark = json.loads((root / STAGE_MARK).read_bytes())
    except (OSError, ValueError):
        mark = None
    if not isinstance(mark, dict):
        return f"a rebuild replaced it more than {grace} ago"
    now = time.time()
    kept = mark.get("kept")
    for entry in kept if isinstance(kept, list) else []:
        at = entry.get("replaced_at") if isinstance(entry, dict) else None
        if entry.get("snapshot") == snapshot and isinstance(at, (int, float)):
            return (
                f"a new stage of this staged copy replaced it {now - at:.0f}s ago; a restage "
                f"keeps the snapshot it replaces {grace}"
            )
    staged = mark.get("staged_at")
    when = f", the latest {now - staged:.0f}s ago" if isinstance(staged, (int, float)) else ""
    return (
        f"a new stage of this staged copy replaced it (a restage{when}; one keeps the snapshot "
        f"it replaces {grace} where it held that snapshot whole: not a version 1 store, nor a "
        "copy an older lading staged)"
    )


def safe_relative(root: Path, name: object, what: str) -> Path:
    """``root / name`` for a name in a manifest's file list, checked as every manifest name is
    (:mod:`lading.disk.names`: relative, plain parts, no symlink out of ``root``)."""
    return inside(root, name, f"a name in the {what}'s files", root / META_FILE)


def spots(path: Path) -> bytes:
    """A file's first and last 4 KiB (they overlap in a file under 8 KiB): two ``pread`` on
    a bare descriptor (a buffered file object cost as much again, 24 files a merge)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        size = os.fstat(fd).st_size
        return os.pread(fd, SPOT_BYTES, 0) + os.pread(fd, SPOT_BYTES, max(0, size - SPOT_BYTES))
    finally:
        os.close(fd)


def spot_crc32(path: Path) -> int:
    """CRC32 of a file's first and last 4 KiB: read on every open, it catches a file that was
    zero-filled (what some filesystems leave after a crash) or overwritten, for 8 KiB of I/O."""
    return zlib.crc32(spots(path))


def file_crc32(path: Path, chunk: int = 4 << 20) -> int:
    """CRC32 of every byte of the file at ``path``, read ``chunk`` bytes at a time (what a
    manifest's ``crc32`` of a file is; :func:`spot_crc32` reads its ends only)."""
    crc = 0
    with open(path, "rb") as f:
        while block := f.read(chunk):
            crc = zlib.crc32(block, crc)
    return crc


def check_files(
    root: Path,
    manifest: dict[str, Any],
    fmt_name: str,
    spot: bool = True,
    where: Path | None = None,
) -> None:
    """Every file the manifest lists is inside ``root`` once symlinks are resolved (its names
    and its layout's were checked by :func:`decode_manifest`), and exists with its size and
    (with ``spot``) spot checksum. ``where``: the manifest file, for messages.

    Raises:
        MissingFileError: a file is not there (the caller may read a newer manifest).
        StoreFormatError: a file has another size or its spots another checksum.
    """
    fmt = disk_format(fmt_name)
    where = where or root / META_FILE  # the manifest read: meta.json or snap-<id>/manifest.json
    # decode_manifest checked every name (plain, relative) and that the layout's are listed:
    # what is left is symlinks, and every name the layout uses is among these
    check_inside(root, manifest["files"], f"a name in the {fmt.what}'s files", where)
    for name, info in manifest["files"].items():
        path = root / name
        try:
            actual = path.stat().st_size
            seen = spots(path) if spot and isinstance(info, dict) and "spot_crc32" in info else None
        except FileNotFoundError:
            raise MissingFileError(
                f"{path} is missing; the {fmt.what} is incomplete, {fmt.rebuild}"
            ) from None
        expected = info.get("size") if isinstance(info, dict) else None
        if actual != expected:
            raise StoreFormatError(
                f"{path} is {actual} bytes, expected {expected!r} (truncated or replaced?); "
                f"{fmt.rebuild}"
            )
        if seen is not None and zlib.crc32(seen) != info["spot_crc32"]:
            zeros = not seen.strip(b"\0")
            raise StoreFormatError(
                f"{path}: its first and last {SPOT_BYTES} bytes do not match their checksum"
                + (" (they are all zero bytes, as a crash can leave a file)" if zeros else "")
                + f"; the file was damaged after the build. {fmt.rebuild[:1].upper()}"
                + f"{fmt.rebuild[1:]} (`lading verify` checks every byte)."
            )


def open_snapshot(
    root: str | os.PathLike[str],
    fmt_name: str,
    opener: Callable[[dict[str, Any]], T],
    snapshot: str | None = None,
) -> T:
    """Read one manifest, check its files, and ``opener(manifest)`` them: one snapshot.

    A file missing between reading the manifest and opening it was removed with an old
    snapshot: the current manifest is read again and opened instead (up to :data:`OPEN_TRIES`
    times), never mixed with the first. Pinned to ``snapshot``, that is an error instead.

    Raises:
        SnapshotGoneError: the pinned ``snapshot`` is no longer kept.
        StoreFormatError: the directory is not a complete snapshot of ``fmt_name``.
    """
    path = Path(root)
    for _ in range(OPEN_TRIES):
        manifest, where = _load(path, fmt_name, snapshot)
        try:
            check_files(path, manifest, fmt_name, where=where)
            return _opened(opener, manifest, where, fmt_name)
        except (MissingFileError, FileNotFoundError) as e:
            now = read_current(path, fmt_name)["snapshot"]
            if snapshot is not None and now != snapshot:
                raise gone(path, snapshot, now) from None
            if now == manifest["snapshot"]:  # the manifest still names it: really missing
                if isinstance(e, MissingFileError):
                    raise
                raise MissingFileError(
                    f"{e.filename} is missing; {disk_format(fmt_name).rebuild}"
                ) from None
            time.sleep(0.001)  # a commit is under way: read its manifest
    raise StoreFormatError(
        f"{path} was rebuilt {OPEN_TRIES} times while it was being opened; open it again"
    )


def _opened(
    opener: Callable[[dict[str, Any]], T], manifest: dict[str, Any], where: Path, fmt_name: str
) -> T:
    """``opener(manifest)``; a field of the wrong type or value that no check above named
    (a manifest is input: anything may be in it) becomes one error naming the manifest."""
    try:
        return opener(manifest)
    except (LadingError, FileNotFoundError):
        raise
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError) as e:
        raise StoreFormatError(
            f"{where}: a field has a wrong type or value ({type(e).__name__}: "
            f"{str(e)[:200]}); {disk_format(fmt_name).rebuild}"
        ) from None


def content_id(manifest: dict[str, Any]) -> str:
    """A digest of what a snapshot holds: each file's role (its path without the ``snap-`` or
    ``build-`` directory), size and CRC32. Two builds of the same data (in two directories, on
    two nodes) get the same id, any other data another one: what keys caches and loader states
    (from the manifest an object pinned, never from what is on disk now)."""
    roles = []
    for name, info in manifest["files"].items():
        head, _, rest = name.partition("/")
        role = rest if rest and head.startswith((SNAP_PREFIX, BUILD_PREFIX)) else name
        roles.append((role, info.get("size"), info.get("crc32")))
    digest = hashlib.sha256(json.dumps(sorted(roles)).encode("utf-8"))
    return digest.hexdigest()[:32]
