"""What a remote store's manifest says: its snapshot, which files hold which rows of a column,
and which files are staged to the node (the rest are read by ranged GETs).

A store's columns are ragged (``.bin`` data + ``.off`` offsets, see :mod:`lading.disk.ragged`),
in one or several shards. Staged once per node, memory-mapped and shared by every process:
``meta.json``, the id index, every shard's offsets files, the ``ids`` column and the
tokenizer: 8 B a document per offsets file (``text`` and ``ids``, plus ``tokens`` and each
field), the ids' own bytes and 4-40 B of index (26 B a document for ids ``0..n-1``, 94 for
``msmarco_passage_<i>``: benchmarks/staged_index_size.py, one-process builds; a store merged
from shards under string ids stages each shard's ``ids.keys``, the ids at a fixed width, and
a 7 B ``hash-ids`` index in place of the 56 B ``hash`` one). Read by ranged GETs: the data
files of the payload columns, ``text``, ``tokens`` and ``field.*``. Neither: the merged
offsets (``*.goff``) of a store merged before merges stopped writing them, which only a local
store's lookups read.

The shard layout is the packed store's own (``lading.stores.layout.shard_files`` where this
lading has it); a store of format version 1 (every file at the top of the directory, one
shard) is described here the same way.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from lading.disk.meta import META_FILE
from lading.disk.names import check_name, safe_snapshot_id
from lading.disk.snapshot import decode_manifest
from lading.errors import (
    LadingError,
    RemoteNotFoundError,
    RemotePermanentError,
    StoreFormatError,
    StoreNotFoundError,
)
from lading.remote.objects import RemoteReadError
from lading.stores.layout import FORMAT_NAME, field_column

PAYLOAD_PREFIXES = ("text", "tokens", "field.")


@dataclass(frozen=True)
class Part:
    """One shard of one column: store rows ``first .. first + rows - 1``.

    ``data`` and ``offsets`` are paths relative to the store; ``dtype`` is the numpy dtype of
    one item of ``data`` (``|u1`` for UTF-8 bytes; offsets count items).
    """

    first: int
    rows: int
    data: str
    offsets: str
    dtype: str


MAX_BYTES = 1 << 50  # 1 PiB: no file of a store is larger; a bigger "size" is garbage
_DTYPES = {"|u1", "<u2", "<u4", "<i4", "<i8", "<u8", "|i1", "<i2"}


def parse(raw: bytes, where: str) -> dict[str, Any]:
    """A packed store's manifest from the bytes of its ``meta.json``, checked, with its
    ``snapshot`` id (a version 1 manifest's is ``v1-`` and its SHA-256, as on local disk).

    Everything the remote path uses is checked here, before a byte is staged: the snapshot
    id (a folder of the cache), every file name (relative, inside the store: see
    :func:`lading.disk.names.check_name`), sizes and checksums, the row count, and each
    name the layout uses (listed in the file list).

    Raises:
        StoreFormatError: not JSON, another format, a version this lading cannot read, or a
            field that is missing, of the wrong type or out of range (named).
    """
    meta = decode_manifest(raw, where, FORMAT_NAME)
    if not meta.get("snapshot"):
        meta["snapshot"] = "v1-" + hashlib.sha256(raw).hexdigest()[:16]
    check(meta, where)
    return meta


def _number(value: object, where: str, field: str, top: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= top:
        raise StoreFormatError(
            f"{where}: {field} is {repr(value)[:80]}, expected an integer 0..{top}; "
            "the manifest is damaged, rebuild the store"
        )
    return value


def check(meta: dict[str, Any], where: str) -> None:
    """Refuse a manifest whose fields the remote path uses are unsafe or malformed (see
    :func:`parse`); one :class:`StoreFormatError` naming the field."""
    safe_snapshot_id(meta["snapshot"], where)
    _number(meta.get("count"), where, "count", 1 << 48)
    if not isinstance(meta.get("fields", []), list) or not all(
        isinstance(f, str) for f in meta.get("fields", [])
    ):
        raise StoreFormatError(f"{where}: fields is not a list of names; rebuild the store")
    files = meta["files"]
    for name, info in files.items():
        check_name(name, "files", where)
        if not isinstance(info, dict):
            raise StoreFormatError(f"{where}: files[{name!r}] is not an object; rebuild the store")
        _number(info.get("size"), where, f"files[{name!r}].size", MAX_BYTES)
        for key in ("crc32", "spot_crc32"):
            if key in info:
                _number(info[key], where, f"files[{name!r}].{key}", 0xFFFFFFFF)
    layout = columns(meta)
    for needed in ("ids", "text"):
        if needed not in layout:
            raise StoreFormatError(
                f"{where}: shards hold no {needed!r} column; the manifest is damaged, rebuild "
                "the store"
            )
    for column, parts in layout.items():
        held = sum(p.rows if isinstance(p.rows, int) else 0 for p in parts)
        if held != meta["count"]:
            raise StoreFormatError(
                f"{where}: the shards of column {column!r} hold {held} rows, count says "
                f"{meta['count']}; the manifest is damaged, rebuild the store"
            )
        for i, part in enumerate(parts):
            field = f"shards[{i}].columns.{column}"
            for kind, name in (("data", part.data), ("offsets", part.offsets)):
                if check_name(name, f"{field}.{kind}", where) not in files:
                    raise StoreFormatError(
                        f"{where}: {field}.{kind} names {name!r}, which its file list does "
                        "not hold; the manifest is damaged, rebuild the store"
                    )
            _number(part.rows, where, f"shards[{i}].rows", 1 << 48)
            if part.dtype not in _DTYPES:
                raise StoreFormatError(
                    f"{where}: dtype of column {column} is {repr(part.dtype)[:40]}, expected "
                    f"one of {sorted(_DTYPES)}; rebuild the store"
                )
    index = meta.get("index")
    if not isinstance(index, dict):
        raise StoreFormatError(f"{where}: index is not an object; rebuild the store")
    if index.get("dir", ""):
        check_name(index["dir"], "index.dir", where)
    if meta.get("tokens") and meta.get("tokenizer") is not None:
        check_name(meta["tokenizer"], "tokenizer", where)


def columns(meta: dict[str, Any]) -> dict[str, list[Part]]:
    """For each column, the shards that hold its rows, in row order."""
    try:
        from lading.stores import layout

        shard_files = getattr(layout, "shard_files", None)
        if shard_files is not None:
            return {
                name: [Part(c.first, c.rows, c.data, c.offsets, c.dtype) for c in parts]
                for name, parts in shard_files(meta).items()
            }
        names = ["text", "ids", *(field_column(f) for f in meta["fields"])]
        tokens = meta.get("tokens")
        types = {name: "|u1" for name in names}
        if tokens:
            names.append("tokens")
            types["tokens"] = tokens["dtype"]
        count = int(meta["count"])
        return {n: [Part(0, count, f"{n}.bin", f"{n}.off", types[n])] for n in names}
    except (KeyError, TypeError, AttributeError, ValueError) as e:
        raise StoreFormatError(
            f"the store's meta.json has no usable shard layout ({type(e).__name__}: "
            f"{str(e)[:100]}); rebuild the store"
        ) from None


def is_payload(column: str) -> bool:
    """Whether a column's data is read by ranged GETs (not staged)."""
    return column.startswith(PAYLOAD_PREFIXES)


def payload_files(meta: dict[str, Any]) -> list[str]:
    """The payload columns' data files: what ranged GETs read (never staged)."""
    return sorted(
        {p.data for name, parts in columns(meta).items() if is_payload(name) for p in parts}
    )


def staged_files(meta: dict[str, Any]) -> list[str]:
    """Files staged to the node: every file the manifest lists but the payload's data and
    the merged offsets of a store built in shards (``*.goff``, ``global_offsets``: 8 B a
    document per text/tokens column, read by a local store's lookups only; the remote
    reader reads each shard's own offsets, staged with it)."""
    skipped = set(payload_files(meta))
    spans = meta.get("global_offsets") or {}
    if isinstance(spans, dict):
        skipped |= {name for name in spans.values() if isinstance(name, str)}
    return sorted(name for name in meta["files"] if name not in skipped)


def payload_bytes(meta: dict[str, Any]) -> int:
    """Bytes of the payload's data files (what the node cache's cap is measured against)."""
    files = meta["files"]
    return sum(
        int(files[p.data]["size"])
        for name, parts in columns(meta).items()
        if is_payload(name)
        for p in parts
    )


def no_store(url: str, endpoint: str, error: Exception) -> LadingError:
    """The one-line error of an open whose manifest is not there: which bucket or object."""
    endpoint = endpoint or "the default endpoint"
    if isinstance(error, RemoteNotFoundError) and error.no_bucket:
        return error  # the bucket: named, with its endpoint and fix (a bucket named
        # "bucket-1" said nothing of the store missing in it)
    if not isinstance(error, RemoteNotFoundError):  # access denied, a gone object, ...
        if isinstance(error, RemotePermanentError):
            return error
        return RemoteReadError(f"GET {url}/{META_FILE} (endpoint {endpoint}): {error}")
    return StoreNotFoundError(
        f"no store at {url}: {url}/{META_FILE} does not exist (endpoint {endpoint}); check the "
        "URL, or build a store there with `lading build SOURCE " + url + "`"
    )
