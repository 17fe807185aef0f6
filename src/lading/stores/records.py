"""A shard's ``shard.json`` checked before a merge uses it: names inside the shard, types right.

A shard of a parallel build is written by another process, maybe on another node, maybe by
another job sharing the build directory; its ``shard.json`` is input to the merge like a
manifest to a reader. Every file it names is a checked relative name inside the shard's own
directory and listed in its ``files`` (:mod:`lading.disk.names`); every field the merge reads
has the type it expects. Anything else is one :class:`~lading.errors.StoreFormatError` naming
the ``shard.json`` and the field, before a byte of the shard is read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from lading.disk.names import check_name, inside, refuse
from lading.stores.layout import field_column

_COUNTS = ("rows", "skipped", "duplicates_dropped")


def check_shard_record(record: object, where: Path, base: Path) -> dict[str, Any]:
    """``record`` (the parsed ``shard.json`` at ``where`` of the shard in ``base``), checked.

    Raises:
        StoreFormatError: naming ``where``, the field and its value.
    """
    if not isinstance(record, dict):
        raise refuse(where, "shard.json", type(record).__name__, "is not a JSON object")
    for key in _COUNTS:
        value = record.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise refuse(where, key, value, "is not a count (a whole number >= 0)")
    if not isinstance(record.get("int_ids"), bool):
        raise refuse(where, "int_ids", record.get("int_ids"), "is not true or false")
    if not isinstance(record.get("seconds"), (int, float)):
        raise refuse(where, "seconds", record.get("seconds"), "is not a number")
    files = _object(record, "files", where)
    for name, info in files.items():
        inside(base, name, "a name in files", where)
        if not isinstance(info, dict) or not isinstance(info.get("size"), int):
            raise refuse(where, f"files.{name}", info, "has no size")
    fields = record.get("fields")
    if not isinstance(fields, list) or not all(isinstance(f, str) for f in fields):
        raise refuse(where, "fields", fields, "is not a list of field names")
    try:
        wanted = ["text", "ids", *(field_column(f) for f in fields)]
    except ValueError as e:
        raise refuse(where, "fields", fields, f"holds a bad name ({e})") from None
    columns, dtypes = _object(record, "columns", where), _object(record, "dtypes", where)
    for column in [*wanted, *columns]:
        names = columns.get(column)
        if not isinstance(names, dict):
            raise refuse(where, f"columns.{column}", names, "does not name its data and offsets")
        for key in ("data", "offsets"):
            _listed(names.get(key), f"columns.{column}.{key}", files, where, base)
        _dtype(dtypes.get(column), f"dtypes.{column}", where)
    if record.get("tokenizer") is not None:
        _listed(record["tokenizer"], "tokenizer", files, where, base)
    tokens = record.get("tokens")
    if tokens is not None and (not isinstance(tokens, dict) or "tokens" not in columns):
        raise refuse(where, "tokens", tokens, "does not describe a tokens column")
    stats = record.get("input_stats", [])
    if not isinstance(stats, list) or not all(_stat(x) for x in stats):
        raise refuse(where, "input_stats", stats, "is not a list of [path, size, mtime, inode]")
    for key in ("skip_examples", "fingerprints"):
        if not isinstance(record.get(key, []), list):
            raise refuse(where, key, record.get(key), "is not a list")
    if not all(isinstance(f, dict) for f in record.get("fingerprints", [])):
        raise refuse(where, "fingerprints", record.get("fingerprints"), "is not a list of objects")
    return record


def _stat(entry: object) -> bool:
    return (
        isinstance(entry, list)
        and len(entry) == 4
        and isinstance(entry[0], str)
        and all(isinstance(x, int) and not isinstance(x, bool) for x in entry[1:])
    )


def _object(record: dict[str, Any], key: str, where: Path) -> dict[str, Any]:
    value = record.get(key)
    if not isinstance(value, dict):
        raise refuse(where, key, value, "is not a JSON object")
    return value


def _listed(name: object, field: str, files: dict[str, Any], where: Path, base: Path) -> None:
    checked = check_name(name, field, where)
    if checked not in files:
        raise refuse(where, field, name, "is not in the shard's file list")
    inside(base, checked, field, where)


def _dtype(value: object, field: str, where: Path) -> None:
    try:
        dtype = np.dtype(value) if isinstance(value, str) else None
    except (TypeError, ValueError):
        dtype = None
    ok = dtype is not None and dtype.kind == "u" and dtype.itemsize <= 4
    if not ok:
        raise refuse(where, field, value, "is not an unsigned integer dtype (|u1, <u2, <u4)")
