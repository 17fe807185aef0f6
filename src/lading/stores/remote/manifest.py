"""What a remote store's manifest says: its snapshot, which files hold which rows of a column,
and which files are staged to the node (the rest are read by ranged GETs).

A store's columns are ragged (``.bin`` data + ``.off`` offsets, see :mod:`lading.disk.ragged`),
in one or several shards. Staged once per node, memory-mapped and shared by every process:
``meta.json``, the id index, every offsets file, the ``ids`` column and the tokenizer, ~20
bytes a document (8 per offsets file, ~8 of id, 4-8 of index). Read by ranged GETs: the data
files of the payload columns, ``text``, ``tokens`` and ``field.*``.

The shard layout is the packed store's own (``lading.stores.layout.shard_files`` where this
lading has it); a store of format version 1 (every file at the top of the directory, one
shard) is described here the same way.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from lading.disk.snapshot import decode_manifest
from lading.errors import StoreFormatError
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


def parse(raw: bytes, where: str) -> dict[str, Any]:
    """A packed store's manifest from the bytes of its ``meta.json``, checked, with its
    ``snapshot`` id (a version 1 manifest's is ``v1-`` and its SHA-256, as on local disk).

    Raises:
        StoreFormatError: not JSON, another format, a version this lading cannot read.
    """
    meta = decode_manifest(raw, where, FORMAT_NAME)
    if not meta.get("snapshot"):
        meta["snapshot"] = "v1-" + hashlib.sha256(raw).hexdigest()[:16]
    return meta


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
    except (KeyError, TypeError) as e:
        raise StoreFormatError(f"the store's meta.json lacks {e}; rebuild the store") from None


def is_payload(column: str) -> bool:
    """Whether a column's data is read by ranged GETs (not staged)."""
    return column.startswith(PAYLOAD_PREFIXES)


def staged_files(meta: dict[str, Any]) -> list[str]:
    """Files staged to the node: every file the manifest lists but the payload's data."""
    fetched = {p.data for name, parts in columns(meta).items() if is_payload(name) for p in parts}
    return sorted(name for name in meta["files"] if name not in fetched)


def payload_bytes(meta: dict[str, Any]) -> int:
    """Bytes of the payload's data files (what the node cache's cap is measured against)."""
    files = meta["files"]
    return sum(
        int(files[p.data]["size"])
        for name, parts in columns(meta).items()
        if is_payload(name)
        for p in parts
    )
