"""The packed store's files on disk: which file holds which column of which shard.

A store (format ``lading.packed`` version 2) is a directory of immutable files and one manifest
(the shared machinery, commit and reading, is :mod:`lading.disk.snapshot`)::

    meta.json                                   the manifest of the current snapshot
    snap-<id>/manifest.json                     the same JSON, kept while the snapshot is
    snap-<id>/index.*                           the global id index (:mod:`lading.stores.index`)
    snap-<id>/shard-00000-of-00001/text.bin     a one-process build's one shard
    build-<id>/shard-00002-of-00004/text.bin    shard 2 of 4, written by its own worker
    build-<id>/shard-00000-of-00004/tokenizer.json

A shard holds rows ``[first, first + rows)`` of the store as ragged columns
(:mod:`lading.disk.ragged`): ``text`` and ``ids`` (UTF-8), ``field.<name>`` (UTF-8),
``tokens`` (token ids, uint16 or uint32, offsets counted in tokens), each ``<column>.bin`` +
``<column>.off``. Shards are in row order: global row ``r`` is local row ``r - first`` of the
shard whose range holds it, and the id index maps ids to global rows. A shard built for a merge
under string ids also holds ``ids.keys`` (its ids as fixed-width keys, read by a ``hash-ids``
index: :mod:`lading.stores.hashids`). A field that one shard
lacks is padded with empty rows in the snapshot's own directory. Each shard's offsets are read
in place (:mod:`lading.stores.shards`). Stores merged before 2026-11-30 also hold, for ``text``
and ``tokens``, ``<column>.goff``: ``count + 1`` uint64 offsets over the shards' data laid end
to end, listed in ``global_offsets``; they are still read through them, and merges no longer
write them (8 B a document a column, most of what a merge wrote).

The manifest (``meta.json``) has: ``format``, ``version``, ``snapshot`` (unique per commit),
``committed_at``, ``build_id``, ``count``, ``fields``, ``dtypes`` (per column), ``index`` (its
``dir``, ``kind``, dtypes), ``tokens`` (tokenizer info) and ``tokenizer`` (the file), ``source``
and ``sources`` (fingerprints of the inputs, taken before they were read), ``shards`` (each with
``dir``, ``rows``, what it read, and ``columns``: name -> ``{"data", "offsets"}`` paths),
``global_offsets`` (column -> its ``.goff`` path: only in stores merged before 2026-11-30),
``build`` (options and report), ``files`` (every file: relative path -> ``size``, ``crc32``,
``spot_crc32``) and ``history`` (replaced snapshots still kept). :func:`shard_files` reads the
column layout out of it without opening anything (for readers of object storage).

Every path-valued field (``shards[i].columns``, ``shards[i].dir``, ``index.dir``,
``global_offsets``, ``tokenizer``) is checked on every read, local or remote, before a file
is opened: a relative name inside the store, listed in ``files`` (:mod:`lading.disk.names`,
which also lists the index files of each index kind: a new kind adds its files there).

Nothing is pickled. Version 1 (every file at the top, one shard, ``meta.json`` listing names)
is still read, as one snapshot. Version 3 is version 2 with an index of a kind version 2 did
not have (:data:`lading.stores.index.VERSION_3_KINDS`): ``hash-ids`` (ids not kept in the
index, read from the ``ids`` column: what a merge of shards under string ids writes) or
``runs`` (integer ids in runs of consecutive values, 24 B a run).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from lading.disk import column_files

FORMAT_NAME = "lading.packed"
_FIELD_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")


def field_column(name: str) -> str:
    """Column name of an extra field, checked to be a safe file name."""
    if not _FIELD_NAME.match(name):
        raise ValueError(
            f"field name {name!r} cannot name a file; use letters, digits, '_', '-' or '.'"
        )
    return f"field.{name}"


def shard_name(i: int, n: int) -> str:
    """Directory name of shard ``i`` of ``n``: ``shard-00002-of-00004``."""
    return f"shard-{i:05d}-of-{n:05d}"


@dataclass(frozen=True)
class ShardColumn:
    """Where one shard keeps one column.

    Attributes:
        shard: the shard's number.
        first: the store row of the shard's first row.
        rows: rows in the shard.
        data: path of the ``.bin`` file, relative to the store.
        offsets: path of the ``.off`` file (``rows + 1`` little-endian uint64 offsets).
        dtype: numpy dtype string of one item of ``data`` (``|u1`` for UTF-8 bytes).
    """

    shard: int
    first: int
    rows: int
    data: str
    offsets: str
    dtype: str


def shards(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """The manifest's shard list; a version 1 manifest's single shard made explicit."""
    if manifest.get("version") != 1:
        listed: list[dict[str, Any]] = manifest["shards"]
        return listed
    names = ["text", "ids", *(field_column(f) for f in manifest["fields"])]
    if manifest.get("tokens"):
        names.append("tokens")
    columns = {}
    for name in names:
        data, offsets = column_files(name)
        columns[name] = {"data": data, "offsets": offsets}
    return [{"dir": "", "rows": manifest["count"], "columns": columns}]


def dtypes(manifest: dict[str, Any]) -> dict[str, str]:
    """numpy dtype string of each column's items."""
    if "dtypes" in manifest:
        found: dict[str, str] = manifest["dtypes"]
        return found
    out = {"text": "|u1", "ids": "|u1", **{field_column(f): "|u1" for f in manifest["fields"]}}
    if manifest.get("tokens"):
        out["tokens"] = manifest["tokens"]["dtype"]
    return out


def shard_files(manifest: dict[str, Any]) -> dict[str, list[ShardColumn]]:
    """For each column, which data and offsets file of which shard hold which rows.

    Reads the manifest only (a ``meta.json`` loaded as a dict, from disk or object storage).
    """
    types = dtypes(manifest)
    out: dict[str, list[ShardColumn]] = {}
    first = 0
    for i, shard in enumerate(shards(manifest)):
        for name, files in shard["columns"].items():
            column = ShardColumn(
                i, first, shard["rows"], files["data"], files["offsets"], types[name]
            )
            out.setdefault(name, []).append(column)
        first += shard["rows"]
    return out


def index_dir(manifest: dict[str, Any]) -> str:
    """Directory (relative to the store) that holds the id index files."""
    return str(manifest["index"].get("dir", ""))


def tokenizer_file(manifest: dict[str, Any]) -> str | None:
    """Path (relative to the store) of the tokenizer kept with the tokens, or None."""
    if not manifest.get("tokens"):
        return None
    return str(manifest.get("tokenizer", "tokenizer.json"))


def column_bytes(manifest: dict[str, Any], column: str) -> int:
    """Bytes of a column's data over every shard (``text``: the store's text size)."""
    files = manifest["files"]
    return sum(int(files[c.data]["size"]) for c in shard_files(manifest).get(column, []))
