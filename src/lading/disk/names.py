"""Every name a manifest uses, checked before anything is opened: the tar rule for stores.

A store, a token corpus or an offsets index is input someone else may have written (a folder
copied from a colleague, a tarball, a bucket other jobs write). Its manifest names files twice:
in its file list (``files``: sizes and checksums) and in its layout (which file holds which
column: ``shards[i].columns[c].data``, ``index.dir``, ``global_offsets``, ``tokenizer``, a
token corpus's ``dir``...). A reader opens what the layout says, so every layout name must be

- a relative name made of plain parts: no ``..``, ``.`` or empty part, not absolute, no
  backslash, no NUL or other control character, at most :data:`MAX_PART` bytes a part and
  :data:`MAX_NAME` bytes in all (Linux's ``NAME_MAX`` and ``PATH_MAX``);
- listed in the file list (so its size and checksums were checked, and ``lading verify``
  reads every byte of it);
- and, on a local disk, still inside the directory once every symlink is resolved.

Anything else is refused with one :class:`~lading.errors.StoreFormatError` naming the field,
the value and the fix, before a file is opened. Python's ``tarfile`` ``data_filter`` makes the
same three refusals before extracting. :func:`check_name` is the part that needs no disk (an
object-store prefix has no symlinks): the remote reader calls it too.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from lading.errors import StoreFormatError

MAX_NAME = 4096  # bytes: PATH_MAX on Linux
MAX_PART = 255  # bytes: NAME_MAX on Linux (ext4, xfs, btrfs; S3 keys may be longer, we refuse)
_UNNAMEABLE = re.compile(r"[\x00-\x1f\x7f\\]")  # control characters and the backslash
# Which files each kind of id index opens in its directory (lading.stores.index.IdIndex). A new
# kind adds its files here, or stores using it are refused on open.
INDEX_FILES: dict[str, tuple[str, ...]] = {
    "dense": ("index.dense",),
    "hash": ("index.table", "index.keys"),
    "hash-ids": ("index.slots",),
    "runs": ("index.runs",),
    "sorted-int": ("index.keys", "index.rows"),
}
# whole numbers each kind reads
INDEX_COUNTS = {
    "hash": ("buckets", "width", "max_spill"),
    "hash-ids": ("homes", "width", "max_away"),
    "runs": ("runs",),
}
INDEX_DTYPES = ("<i4", "<i8")  # rows: int32 while they fit, else int64; int keys: int64
TOKEN_DTYPES = ("<u2", "<u4")  # token ids: uint16 up to 65,536 entries, else uint32
# Fixed file names of the formats whose layout is one directory (``dir``) of known files.
TOKEN_FILES = ("tokens.bin", "tokens.off", "tokenizer.json")
OFFSETS_FILES = ("span.start", "span.len", "ids.bin", "ids.off")
# A version 1 packed store keeps each column at the top as <column>.bin and <column>.off.
_COLUMN_SUFFIXES = (".bin", ".off")


def refuse(where: object, field: str, value: object, reason: str) -> StoreFormatError:
    """The one-line error for a manifest field: where, which field, what it holds, why, fix."""
    shown = repr(value)
    if len(shown) > 120:
        shown = shown[:100] + f"... ({len(shown)} characters)"
    return StoreFormatError(
        f"{where}: {field} = {shown} {reason}; the manifest was damaged or written by someone "
        "else: rebuild the store (or copy it again from where it was built)"
    )


def _why_not(name: object, directory: bool) -> str | None:
    """Why ``name`` cannot be a relative name inside a directory, or None if it can."""
    if not isinstance(name, str):
        return f"is a {type(name).__name__}, not a file name"
    if not name:
        return None if directory else "is empty, not a file name"
    bad = _UNNAMEABLE.search(name)
    if bad is not None and bad.group() == "\\":
        return "holds a backslash, which no lading name has"
    if bad is not None:
        return "holds a control character (NUL, newline...), which no lading name has"
    if name.startswith("/"):
        return "points outside the store (an absolute path)"
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        return "is not valid UTF-8"
    if size > MAX_NAME:
        return f"is {size} bytes long, over the {MAX_NAME} a path may have"
    parts = name.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return "points outside the store (a '..', '.' or empty part)"
    if any(len(part.encode("utf-8")) > MAX_PART for part in parts):
        return f"has a part over {MAX_PART} bytes, longer than a file name may be"
    return None


def check_name(name: object, field: str, where: object, *, directory: bool = False) -> str:
    """``name`` if it is a relative name that stays inside the directory (see the module
    docstring); ``directory=True`` also accepts ``""`` (the directory itself).

    Raises:
        StoreFormatError: naming ``where`` (the manifest), ``field`` and the value.
    """
    reason = _why_not(name, directory)
    if reason is not None:
        raise refuse(where, field, name, reason)
    assert isinstance(name, str)  # _why_not refused every other type
    return name


def inside(root: Path, name: object, field: str, where: object, directory: bool = False) -> Path:
    """``root / name`` for a checked ``name`` whose real path (every symlink resolved) is still
    inside the real path of ``root``. ``root`` itself may be a symlink: it is what the user
    gave; a link *inside* it that leads out is refused.

    Raises:
        StoreFormatError: naming the field, the value and where it leads.
    """
    checked = check_name(name, field, where, directory=directory)
    path = root / checked if checked else root
    base = os.path.realpath(root)
    real = os.path.realpath(path)
    if real != base and not real.startswith(base.rstrip(os.sep) + os.sep):
        raise refuse(where, field, name, f"points outside the store: a symlink leads to {real}")
    return path


def check_inside(root: Path, names: Iterable[str], field: str, where: object) -> None:
    """:func:`inside` for many checked names at once, cheaply: each directory on the way is
    looked at once (``lstat``, no ``realpath``); only a name with a symlink on its way is
    resolved. A store's 4-20 files share 2-6 directories: ~25 ``lstat`` calls an open.

    Raises:
        StoreFormatError: a name whose real path leaves ``root``.
    """
    base = os.fspath(root)
    seen: set[str] = set()
    for name in names:
        at = 0
        while at >= 0:  # every prefix of the name ending at a "/", then the name itself
            at = name.find("/", at + 1)
            rel = name if at < 0 else name[:at]
            if rel in seen:
                continue
            try:
                link = stat.S_ISLNK(os.lstat(f"{base}/{rel}").st_mode)
            except OSError:
                break  # missing: the size check names it
            if link:
                inside(root, name, field, where)  # resolve this one: in or out
                break
            seen.add(rel)


def _listed(
    files: dict[str, Any], name: object, field: str, where: object, root: Path | None
) -> None:
    checked = check_name(name, field, where)
    if checked not in files:
        raise refuse(where, field, name, "is not in the manifest's file list")
    if root is not None:
        inside(root, checked, field, where)


def _join(directory: str, name: str) -> str:
    return f"{directory}/{name}" if directory else name


def _dict(value: object, field: str, where: object) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise refuse(where, field, value, "is not a JSON object")
    return value


def _count(value: object, field: str, where: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise refuse(where, field, value, "is not a count (a whole number >= 0)")
    return value


def packed_names(manifest: dict[str, Any], where: object) -> list[tuple[str, object]]:
    """(field, name) of every file a packed store's layout names; structure checked on the way
    (what is a list, an object, a count)."""
    out: list[tuple[str, object]] = []
    index = _dict(manifest.get("index"), "index", where)
    version = manifest.get("version")
    _count(manifest.get("count"), "count", where)
    if version == 1:
        fields = manifest.get("fields")
        if not isinstance(fields, list):
            raise refuse(where, "fields", fields, "is not a list of field names")
        columns = ["text", "ids", *(f"field.{f}" for f in fields)]
        if manifest.get("tokens"):
            columns.append("tokens")
        out += [(f"column {c}", c + s) for c in columns for s in _COLUMN_SUFFIXES]
        directory = ""
    else:
        shards = manifest.get("shards")
        if not isinstance(shards, list) or not shards:
            raise refuse(where, "shards", shards, "is not a non-empty list of shards")
        for i, shard in enumerate(shards):
            shard = _dict(shard, f"shards[{i}]", where)
            _count(shard.get("rows"), f"shards[{i}].rows", where)
            check_name(shard.get("dir", ""), f"shards[{i}].dir", where, directory=True)
            columns_of = _dict(shard.get("columns"), f"shards[{i}].columns", where)
            for column, files in columns_of.items():
                files = _dict(files, f"shards[{i}].columns.{column}", where)
                for key in ("data", "offsets"):
                    out.append((f"shards[{i}].columns.{column}.{key}", files.get(key)))
        _check_dtypes(manifest, columns_of, where)
        spans = _dict(manifest.get("global_offsets", {}), "global_offsets", where)
        out += [(f"global_offsets.{column}", name) for column, name in spans.items()]
        directory = check_name(index.get("dir", ""), "index.dir", where, directory=True)
    out += _index_names(index, directory, "index", where)
    if manifest.get("tokens"):
        out.append(("tokenizer", manifest.get("tokenizer", "tokenizer.json")))
    return out


def _check_dtypes(manifest: dict[str, Any], columns: dict[str, Any], where: object) -> None:
    """Each column's item dtype is the one lading writes: UTF-8 bytes (``|u1``) for text, ids
    and fields; for tokens the little-endian unsigned width the tokenizer info says (a
    big-endian or signed dtype would read every token id wrong, without an error)."""
    tokens = manifest.get("tokens")
    wanted = tokens.get("dtype") if isinstance(tokens, dict) else None
    if tokens and wanted not in TOKEN_DTYPES:
        raise refuse(where, "tokens.dtype", wanted, f"is not one of {TOKEN_DTYPES}")
    if "dtypes" not in manifest:  # read from tokens.dtype (lading.stores.layout.dtypes)
        return
    dtypes = _dict(manifest["dtypes"], "dtypes", where)
    for column in columns:
        found = dtypes.get(column)
        expected = wanted if column == "tokens" else "|u1"
        if found != expected:
            raise refuse(where, f"dtypes.{column}", found, f"is not {expected!r}")


def _index_names(
    index: dict[str, Any], directory: str, field: str, where: object
) -> list[tuple[str, object]]:
    kind = index.get("kind")
    if not isinstance(kind, str) or kind not in INDEX_FILES:
        raise refuse(where, f"{field}.kind", kind, f"is not an index kind ({sorted(INDEX_FILES)})")
    for key in INDEX_COUNTS.get(kind, ()):
        _count(index.get(key), f"{field}.{key}", where)
    for key in ("row_dtype", "key_dtype") if kind == "sorted-int" else ("row_dtype",):
        if index.get(key) not in INDEX_DTYPES:
            raise refuse(where, f"{field}.{key}", index.get(key), f"is not one of {INDEX_DTYPES}")
    return [(f"{field}.dir", _join(directory, name)) for name in INDEX_FILES[kind]]


def dir_names(
    manifest: dict[str, Any], names: tuple[str, ...], where: object
) -> tuple[str, list[tuple[str, object]]]:
    """A format kept in one directory (``dir``; version 1: the top): its checked directory and
    (field, name) of its fixed files."""
    version = manifest.get("version")
    directory = check_name(manifest.get("dir", ""), "dir", where, directory=version == 1)
    return directory, [("dir", _join(directory, name)) for name in names]


Names = list[tuple[str, object]]  # (field, name) pairs


def token_part_names(manifest: dict[str, Any], where: object) -> Names:
    """A token corpus built in shards (version 3): the tokenizer, and each part's
    ``tokens.bin`` and ``tokens.off`` read in place (:mod:`lading.lm.parts`)."""
    parts = manifest.get("parts")
    if not isinstance(parts, list) or not parts:
        raise refuse(where, "parts", parts, "is not a list of the shards read in place")
    check_name(manifest.get("dir"), "dir", where)  # the snapshot's folder: its manifest only
    names: Names = []
    tokenizer = check_name(manifest.get("tokenizer_file"), "tokenizer_file", where)
    names.append(("tokenizer_file", tokenizer))
    for i, part in enumerate(parts):
        part = _dict(part, f"parts[{i}]", where)
        folder = check_name(part.get("dir"), f"parts[{i}].dir", where)
        _count(part.get("documents"), f"parts[{i}].documents", where)
        _count(part.get("tokens"), f"parts[{i}].tokens", where)
        names.append((f"parts[{i}].dir", _join(folder, TOKEN_FILES[0])))
        names.append((f"parts[{i}].dir", _join(folder, TOKEN_FILES[1])))
    return names


def layout_names(manifest: dict[str, Any], fmt_name: str, where: object) -> Names:
    """(field, name) of every file the layout of a ``fmt_name`` manifest makes a reader open."""
    if fmt_name == "lading.packed":
        return packed_names(manifest, where)
    if fmt_name == "lading.tokens":
        _count(manifest.get("documents"), "documents", where)
        if manifest.get("parts") is None:
            return dir_names(manifest, TOKEN_FILES, where)[1]
        return token_part_names(manifest, where)
    if fmt_name == "lading.offsets":
        _count(manifest.get("count"), "count", where)
        directory, names = dir_names(manifest, OFFSETS_FILES, where)
        index = _dict(manifest.get("index"), "index", where)
        return names + _index_names(index, directory, "index", where)
    return []


def check_layout(
    manifest: dict[str, Any], fmt_name: str, where: object, root: Path | None = None
) -> None:
    """Refuse a manifest whose layout names a file it does not list, or a name that may leave
    the directory; with ``root`` (a local directory), also one a symlink leads out of it.

    Raises:
        StoreFormatError: naming ``where``, the field and the value.
    """
    files = _dict(manifest.get("files"), "files", where)
    for field, name in layout_names(manifest, fmt_name, where):
        _listed(files, name, field, where, root)


_SNAPSHOT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def safe_snapshot_id(snapshot: object, where: object) -> str:
    """A snapshot id fit to be one folder or key name (``snap-20261126T061759Z-f2041710``,
    ``v1-…``): letters, digits, ``.``, ``_``, ``-``, at most 128.

    Raises:
        StoreFormatError: anything else, naming ``where`` and the field.
    """
    if not isinstance(snapshot, str) or not _SNAPSHOT.match(snapshot):
        raise refuse(
            where,
            "snapshot",
            snapshot,
            "is not a snapshot id (letters, digits, '.', '_' or "
            "'-', at most 128, e.g. snap-20261126T061759Z-f2041710)",
        )
    return snapshot
