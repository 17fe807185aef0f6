"""What ``lading verify`` checks besides the files a manifest lists: the records a build keeps.

A reader of the current snapshot opens ``meta.json`` and the files it lists, and nothing else;
:func:`~lading.disk.meta.verify_checksums` reads those. A build also leaves records that other
readers open later, which a damaged copy would fail only then:

- ``snap-<id>/manifest.json``: the snapshot's own copy of ``meta.json`` (the same JSON,
  written by :func:`lading.disk.commit.commit`), what a reader pinned to the snapshot reopens
  once a rebuild has replaced ``meta.json``;
- ``shard.json`` in each shard directory the snapshot reads (a store's ``shards``, a merged
  token corpus's ``parts``): the worker's account of its shard (files with sizes and CRC32s,
  counts), which a later merge of the same build reads again;
- ``build.json`` in each ``build-<id>/`` the snapshot reads from: the build's recipe and shard
  count, which marks the folder as lading's (the collection of old snapshots removes only
  those) and which a rerun worker and a later merge check their own against.

:func:`verify_bookkeeping` checks that each of these is there where a build always writes it,
parses, and agrees with ``meta.json``; a record that only some builds write (a one-process
build's ``shard.json`` in older stores) is checked where it exists. Version 1 directories
keep none of them, nor does a copy made by ``lading stage`` (it copies what a reader opens:
``meta.json`` and the files it lists).

The records are read through :class:`Records`: a folder's files (:class:`Folder`), or a
bucket's objects, where a build in shards straight into object storage keeps the same ones
(:class:`lading.remote.stage.BucketRecords`, which ``verify`` of a URL passes).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Protocol

from lading.disk.atomic import STAGE_MARK
from lading.disk.formats import DiskFormat, disk_format
from lading.disk.names import inside
from lading.disk.snapshot import BUILD_MARK, BUILD_PREFIX, MANIFEST, META_FILE, SNAP_PREFIX
from lading.errors import StoreFormatError

SHARD_RECORD = "shard.json"  # in each shard directory (lading.stores.building.shardset.SHARD_FILE)
# where a format's manifest lists its shard directories, and the counts each shard.json repeats
_SHARDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "lading.packed": ("shards", ("rows",)),
    "lading.tokens": ("parts", ("documents", "tokens")),
}

__all__ = ["SHARD_RECORD", "Folder", "Records", "verify_bookkeeping"]

_MISSING = object()  # what _read_record gives for a record that is not there


class Records(Protocol):
    """Where a snapshot's records are read: names are relative to the store's root."""

    def at(self, name: str) -> str:
        """``name`` as a message names it: a path, or the object's URL."""

    def read(self, name: str) -> bytes:
        """The bytes of ``name``; ``FileNotFoundError`` where there is none."""

    def size(self, folder: str, name: str, where: str) -> int:
        """The size of ``name`` in ``folder`` ("": the root); ``FileNotFoundError`` where
        there is none, :class:`~lading.errors.StoreFormatError` (naming ``where``) for a name
        that leaves the folder."""

    def staged(self) -> bool:
        """Whether this is a copy made by ``lading stage`` (no build wrote records there)."""

    def copy_command(self, source: str, dest: str) -> str:
        """How to copy record ``source`` over ``dest``: a shell command, in backquotes."""


class Folder:
    """The records of a store or corpus in the local folder ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def at(self, name: str) -> str:
        return str(self.root / name)

    def read(self, name: str) -> bytes:
        return (self.root / name).read_bytes()

    def size(self, folder: str, name: str, where: str) -> int:
        base = self.root / folder if folder else self.root
        return inside(base, name, "a name in files", where).stat().st_size

    def staged(self) -> bool:
        return (self.root / STAGE_MARK).is_file()

    def copy_command(self, source: str, dest: str) -> str:
        return f"`cp {self.at(source)} {self.at(dest)}`"


def verify_bookkeeping(root: Path | Records, meta: dict[str, Any], fmt_name: str) -> list[str]:
    """The problems with the records beside the snapshot ``meta`` (the manifest read from
    ``root/meta.json``, already checked against the files): its ``snap-<id>/manifest.json``,
    the ``shard.json`` of each shard it reads and the ``build.json`` of each build it reads
    from, each one line naming the file, what disagrees and the fix (empty: all agree).
    ``root``: a folder, or the :class:`Records` of one (a bucket's objects)."""
    records = Folder(root) if isinstance(root, Path) else root
    fmt = disk_format(fmt_name)
    if not str(meta.get("snapshot", "")).startswith(SNAP_PREFIX):
        return []  # version 1: one flat folder, none of these
    if records.staged():  # a staged copy: meta.json and the files it lists,
        return []  # what a reader opens; no build wrote (or will read) records there
    return [
        *_snapshot_manifest(records, meta, fmt),
        *_shard_records(records, meta, fmt_name, fmt),
        *_build_records(records, meta, fmt_name, fmt),
    ]


def _read_record(records: Records, name: str) -> tuple[Any, str | None]:
    """(the JSON in ``name``, None), or (None, what is wrong: unreadable, not JSON), or
    (:data:`_MISSING`, that it is missing)."""
    path = records.at(name)
    try:
        raw = records.read(name)
    except FileNotFoundError:
        return _MISSING, f"{path} is missing"
    except OSError as e:
        return None, f"{path} cannot be read ({e.strerror or e})"
    try:
        return json.loads(raw.decode("utf-8")), None
    except (UnicodeDecodeError, ValueError) as e:
        return None, f"{path} is not valid JSON ({e})"


def _crc(value: object) -> str:
    return f"{value:#010x}" if isinstance(value, int) else repr(value)


def _entry(info: object) -> str:
    """A file list's entry as a message shows it: ``size 250, CRC32 0x1234abcd``."""
    if not isinstance(info, dict):
        return repr(info)
    return f"size {info.get('size')!r}, CRC32 {_crc(info.get('crc32'))}"


def _snapshot_manifest(records: Records, meta: dict[str, Any], fmt: DiskFormat) -> list[str]:
    snap = str(meta["snapshot"])
    name = f"{snap}/{MANIFEST}"
    path, current = records.at(name), records.at(META_FILE)
    restore = (
        f"{current} passed the checks: restore the copy with "
        f"{records.copy_command(META_FILE, name)}, or {fmt.rebuild}"
    )
    copy, wrong = _read_record(records, name)
    if wrong is not None:
        return [
            f"{wrong}: it is snapshot {snap}'s own copy of {META_FILE}, which a reader pinned "
            f"to the snapshot reopens once a rebuild replaced {META_FILE}; {restore}"
        ]
    if copy == meta:
        return []
    if not isinstance(copy, dict):
        said = f"holds a JSON {type(copy).__name__}, not a manifest"
    else:
        said = "; ".join(_differences(records, copy, meta))
    return [
        f"{path} differs from {current} ({said}): it must be the same JSON, snapshot {snap}'s "
        f"own copy, which a reader pinned to the snapshot reopens; {restore}"
    ]


def _differences(records: Records, copy: dict[str, Any], meta: dict[str, Any]) -> list[str]:
    """What the manifest ``copy`` says otherwise than ``meta``: each file listed otherwise
    (with its size on disk where the two disagree on it), then the other fields by name."""
    said = []
    files, listed = copy.get("files"), meta["files"]
    if not isinstance(files, dict):
        said.append(f"files is {type(files).__name__}, not a file list")
        files = listed
    for name in sorted(set(files) | set(listed)):
        mine, theirs = files.get(name), listed.get(name)
        if mine == theirs:
            continue
        if theirs is None:
            said.append(f"it lists {name}, which {META_FILE} does not")
        elif mine is None:
            said.append(f"it does not list {name}, which {META_FILE} does")
        else:
            on_disk = ""
            if not isinstance(mine, dict) or mine.get("size") != theirs.get("size"):
                try:
                    on_disk = f"; the file is {records.size('', name, META_FILE)} bytes"
                except (OSError, StoreFormatError):
                    on_disk = "; the file is missing"
            said.append(
                f"it lists {name} with {_entry(mine)}, {META_FILE} with {_entry(theirs)}{on_disk}"
            )
    others = sorted(k for k in set(copy) | set(meta) if k != "files" and copy.get(k) != meta.get(k))
    if others:
        said.append(f"it has other values of {', '.join(others)}")
    return said


def _shard_records(
    records: Records, meta: dict[str, Any], fmt_name: str, fmt: DiskFormat
) -> list[str]:
    key, counts = _SHARDS.get(fmt_name, ("", ()))
    shards = meta.get(key) if key else None
    if not isinstance(shards, list):
        return []  # (a one-process token corpus, an offsets index: no shards)
    problems = []
    for shard in shards:
        rel = shard.get("dir") if isinstance(shard, dict) else None
        if not isinstance(rel, str):
            continue  # (the open checked every shard's dir)
        name = f"{rel}/{SHARD_RECORD}"
        path = records.at(name)
        record, wrong = _read_record(records, name)
        if record is _MISSING and not rel.startswith(BUILD_PREFIX):
            continue  # a one-process build's shard: only newer builds keep a record of it
        if wrong is None and not isinstance(record, dict):
            wrong = f"{path} holds a JSON {type(record).__name__}, not a shard's record"
        if wrong is None:
            said = _shard_differences(records, rel, record, shard, counts, meta["files"])
            if not said:
                continue
            wrong = f"{path} disagrees with {records.at(META_FILE)}: {'; '.join(said)}"
        problems.append(
            f"{wrong}. It is the shard's own record, which a later merge of its build "
            f"reads again; {fmt.rebuild}"
        )
    return problems


def _shard_differences(
    records: Records,
    rel: str,
    record: dict[str, Any],
    shard: dict[str, Any],
    counts: tuple[str, ...],
    listed: dict[str, Any],
) -> list[str]:
    """What a shard's ``record`` says otherwise than the manifest: its counts (``shard``, the
    manifest's entry for it) and its files (``listed``, the manifest's file list); a file the
    manifest does not list (a merged corpus reads one shard's tokenizer) is checked on disk."""
    said = [
        f"{k} {record.get(k)!r}, where {META_FILE} has {shard.get(k)!r}"
        for k in counts
        if record.get(k) != shard.get(k)
    ]
    files = record.get("files")
    if not isinstance(files, dict):
        return [*said, f"files is {type(files).__name__}, not a file list"]
    for name, info in sorted(files.items()):
        theirs = listed.get(f"{rel}/{name}")
        if not isinstance(info, dict):
            said.append(f"files.{name} is {info!r}, not a size and a CRC32")
        elif theirs is None:
            try:
                actual = records.size(rel, name, records.at(f"{rel}/{SHARD_RECORD}"))
            except StoreFormatError as e:
                said.append(str(e))
                continue
            except FileNotFoundError:
                said.append(f"it lists {name}, which is missing")
                continue
            if actual != info.get("size"):
                said.append(f"it lists {name} of {info.get('size')!r} bytes; it is {actual}")
        else:
            for field, label in (("size", "size"), ("crc32", "CRC32")):
                mine, expected = info.get(field), theirs.get(field)
                if mine != expected:
                    shown = (repr, _crc)[field == "crc32"]
                    said.append(
                        f"{name} {label} {shown(mine)}, where {META_FILE} has {shown(expected)}"
                    )
    return said


def _build_records(
    records: Records, meta: dict[str, Any], fmt_name: str, fmt: DiskFormat
) -> list[str]:
    key = _SHARDS.get(fmt_name, ("", ()))[0]
    shards = meta.get(key) if key else None
    dirs = [s.get("dir") for s in shards if isinstance(s, dict)] if isinstance(shards, list) else []
    builds = sorted({str(name).split("/", 1)[0] for name in meta["files"]})
    units = [b for b in builds if b.startswith(BUILD_PREFIX)]
    problems = []
    for unit in units:
        path = records.at(f"{unit}/{BUILD_MARK}")
        record, wrong = _read_record(records, f"{unit}/{BUILD_MARK}")
        if wrong is None and not isinstance(record, dict):
            wrong = f"{path} holds a JSON {type(record).__name__}, not a build's record"
        if wrong is None:
            said = []
            bid = record.get("build_id")
            if bid is not None and bid != unit:
                said.append(f"it says build_id {bid!r}, but it is {unit}'s")
            n = record.get("n")  # (none in a Ray sink's build: its tasks write as they go)
            # a merge reads every shard of one build (one whose duplicates it dropped is
            # rewritten into the snapshot's own folder): all the snapshot's shards are its
            mine = [d for d in dirs if len(units) == 1 or str(d).startswith(f"{unit}/")]
            read = len(mine)
            if n is not None and n != read:
                said.append(f"it says the build has {n!r} shards; {META_FILE} reads {read} of it")
            if not said:
                continue
            wrong = f"{path} disagrees with {records.at(META_FILE)}: {'; '.join(said)}"
        problems.append(
            f"{wrong}. It is the record of the build {records.at(unit)} holds (its inputs and "
            f"shard count), which marks the folder as lading's and which a rerun worker and a "
            f"later merge read; {fmt.rebuild}"
        )
    return problems
