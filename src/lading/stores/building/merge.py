"""Shards into a snapshot: the global id index over every shard, and the manifest to commit.

A one-process build hands its one shard over in memory; ``lading merge`` reads each shard's
``shard.json`` and its ids. Shards are checked to fit together (the same tokenizer, token
dtype and build) and ids to be unique over the whole store: with ``duplicates="error"`` a
duplicate across shards is refused naming both shards; with ``"first"``/``"last"`` the merge
keeps the earliest/latest row in source order (shards are dealt in source order), as a
one-process build does, and the shards that lose rows get compacted columns written into the
snapshot's own directory (shards are never rewritten). A field that some shards lack gets empty
rows there too (padding columns).

Nothing else is written: every shard's columns, offsets included, are read in place
(:class:`lading.stores.shards.ShardedColumn`), so a merge writes the id index, any padding or
compacted columns, and the manifest (benchmarks/RESULTS.md, "Merges that copy no payload").
Under string ids the index keeps no ids of its own (``hash-ids``, 7 B a document: it reads
candidates' keys from the ``ids.keys`` each shard's worker wrote), and the store is then format
version 3. Shards without keys (an older lading's) get the ``hash`` index, keys and all.
Stores merged before this also carry ``<column>.goff`` (every row's offsets over all shards);
they are still read through them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lading._version import __version__
from lading.disk import (
    OFFSET_DTYPE,
    MappedFile,
    RaggedWriter,
    column_files,
    current_version,
    write_file,
)
from lading.errors import DuplicateIdError, StoreFormatError
from lading.sources.tsv_blocks import Column, int_values
from lading.stores.building.shardset import check_shard_files, shard_record
from lading.stores.building.writer import (
    Duplicates,
    _all_distinct_small_ints,
    unique_rows,
)
from lading.stores.hashids import keys_file
from lading.stores.index import bytes_keys, manifest_version, warn_if_wide, write_index
from lading.stores.layout import FORMAT_NAME, field_column
from lading.stores.records import check_shard_record

_KEY_CHUNK = 1 << 20  # ids parsed per numpy pass when a merge reads a shard's ids back


@dataclass
class Shard:
    """A finished shard: where it is (relative to the store), its record, its keys if known."""

    dir: str
    record: dict[str, Any]
    keys: np.ndarray | None = None
    source: Any = None  # what it read, for the manifest and for messages
    home: Path | None = None  # where its files are now, if not yet at ``root / dir``

    def base(self, root: Path) -> Path:
        """The directory its files are in: ``root / dir``, or a scratch one not committed yet."""
        return self.home if self.home is not None else root / self.dir


def read_shard(root: Path, rel: str) -> Shard:
    """The shard in ``root/rel`` as its worker described it (``shard.json``).

    Raises:
        StoreFormatError: the shard is not finished (no ``shard.json``) or its files differ.
    """
    path, record = shard_record(root, rel)
    record = check_shard_record(record, path, root / rel)  # names inside, types right
    check_shard_files(root, rel, path, record["files"])
    return Shard(rel, record, source=record.get("source"))


def shard_keys(root: Path, shard: Shard, as_bytes: bool) -> np.ndarray:
    """Index keys of a shard's rows: int64 ids, or (``as_bytes``) fixed-width bytes."""
    if shard.keys is not None and (not as_bytes or shard.keys.dtype.kind == "S"):
        return shard.keys
    files = shard.record["columns"]["ids"]
    data = MappedFile(shard.base(root) / files["data"]).buffer
    offsets = MappedFile(shard.base(root) / files["offsets"]).array(OFFSET_DTYPE)
    if as_bytes:  # (their width, the store's, is checked once: global_keys)
        return bytes_keys(data, offsets, where=None)
    out = np.empty(len(offsets) - 1, dtype=np.int64)
    for lo in range(0, len(out), _KEY_CHUNK):
        hi = min(lo + _KEY_CHUNK, len(out))
        a, b = int(offsets[lo]), int(offsets[hi])
        lengths = np.diff(offsets[lo : hi + 1].astype(np.int64)).astype(np.int64)
        values = int_values(Column(bytes(data[a:b]), lengths))
        if values is None:
            raise StoreFormatError(
                f"{root / shard.dir}: its shard.json says integer ids; it has others"
            )
        out[lo:hi] = values
    return out


def global_keys(root: Path, shards: list[Shard]) -> tuple[np.ndarray, bool]:
    """Every shard's keys, in store row order, and whether they are all integers."""
    is_int = all(s.record["int_ids"] for s in shards)
    parts = [shard_keys(root, s, not is_int) for s in shards]
    if not is_int:
        width = max(p.dtype.itemsize for p in parts)
        if len(parts) > 1:  # (one shard's writer warned of its own keys)
            warn_if_wide(parts, [s.dir for s in shards], width)
        parts = [p if p.dtype.itemsize == width else p.astype(f"S{width}") for p in parts]
    return (parts[0] if len(parts) == 1 else np.concatenate(parts)), is_int


def check_unique(keys: np.ndarray, shards: list[Shard]) -> None:
    """Refuse an id held by two shards, naming both (each shard checked its own already)."""
    if len(shards) < 2 or len(keys) < 2:
        return
    if keys.dtype == np.int64 and _all_distinct_small_ints(keys):
        return
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    same = np.flatnonzero(ordered[1:] == ordered[:-1])
    if not len(same):
        return
    first, again = int(order[same[0]]), int(order[same[0] + 1])
    starts = np.cumsum([0] + [s.record["rows"] for s in shards])
    a, b = (int(np.searchsorted(starts, r, side="right")) - 1 for r in (first, again))
    key = ordered[same[0]]
    shown = key.rstrip(b"\0").decode("utf-8") if isinstance(key, bytes) else str(key)
    raise DuplicateIdError(
        f"duplicate id {shown!r} in shard {a} (its row {first - starts[a]}, read from "
        f"{_describe(shards[a])}) and shard {b} (its row {again - starts[b]}, read from "
        f"{_describe(shards[b])}): ids must be unique over the store",
        "Remove the duplicate from the source, or build every shard with duplicates='first' "
        "or 'last' to keep one",
    )


def drop_duplicates(
    root: Path, tmp: Path, snapshot: str, shards: list[Shard], keys: np.ndarray, keep: str
) -> tuple[list[Shard], np.ndarray]:
    """Keep one row of each id held by several shards, as a one-process build keeps it
    (``keep``: ``"first"``, the earliest row in store order, which is source order, or
    ``"last"``); ``"error"`` refuses naming both shards (:func:`check_unique`).

    Each shard dropped its own duplicates as ``keep`` says already, so keeping the first (last)
    over the shards' survivors is keeping the first (last) over the source. A shard that loses
    rows is replaced by a copy of its kept rows written into ``tmp/dedup-<i>-of-<n>`` (its
    files are never rewritten: a reader may have them open). Returns (shards, keys) kept.
    """
    if keep == "error" or len(shards) < 2:
        check_unique(keys, shards)
        return shards, keys
    policy: Duplicates = "first" if keep == "first" else "last"
    mask = unique_rows(keys, np.zeros(0, dtype=np.int64), policy, None)
    if mask is None:
        return shards, keys
    starts = np.cumsum([0] + [s.record["rows"] for s in shards])
    out = []
    for i, shard in enumerate(shards):
        mine = mask[starts[i] : starts[i + 1]]
        if mine.all():
            out.append(shard)
            continue
        name = f"dedup-{i:05d}-of-{len(shards):05d}"
        out.append(_compacted(root, tmp / name, f"{snapshot}/{name}", shard, mine))
    return out, keys[mask]


def _compacted(root: Path, where: Path, rel: str, shard: Shard, keep: np.ndarray) -> Shard:
    """``shard`` with only the rows in ``keep``: its columns copied into ``where``."""
    where.mkdir()
    record = dict(shard.record)
    rows = np.flatnonzero(keep)
    files: dict[str, Any] = {}
    for column, names in record["columns"].items():
        size = np.dtype(record["dtypes"][column]).itemsize
        data = MappedFile(shard.base(root) / names["data"]).array(np.uint8)
        offsets = MappedFile(shard.base(root) / names["offsets"]).array(OFFSET_DTYPE)
        out = RaggedWriter(where, column, size)
        for row in rows.tolist():
            out.append(data[int(offsets[row]) * size : int(offsets[row + 1]) * size].tobytes())
        files.update(out.finish())
        del data, offsets
    if _has_keys(record):  # the kept rows' id keys, for a hash-ids index
        name = keys_file(record["columns"]["ids"]["data"])
        keys = MappedFile(shard.base(root) / name).array(np.uint8)
        width = len(keys) // max(1, len(keep))
        kept_keys = keys.reshape(len(keep), width)[rows] if len(keep) else keys
        files[name] = write_file(where / name, np.ascontiguousarray(kept_keys))
        del keys, kept_keys
    if record.get("tokenizer"):  # the tokenizer stays with shard 0's files: copy it
        raw = (shard.base(root) / record["tokenizer"]).read_bytes()
        files[record["tokenizer"]] = write_file(where / record["tokenizer"], raw)
    dropped = len(keep) - len(rows)
    record.update(
        rows=len(rows), files=files, duplicates_dropped=record["duplicates_dropped"] + dropped
    )
    return Shard(rel, record, None, shard.source, where)


def _has_keys(record: dict[str, Any]) -> bool:
    """Whether a shard wrote its ids as fixed-width keys (string ids, built for a merge)."""
    return keys_file(record["columns"]["ids"]["data"]) in record["files"]


def _describe(shard: Shard) -> str:
    """Where a shard's rows came from: its files (and byte ranges), or the Ray write task
    that wrote it (a Ray sink's shard has no file: ``{"ray_task": n}``)."""
    source = shard.source
    if isinstance(source, list) and source:
        return ", ".join(
            f"ray write task {p['ray_task']}"
            if "ray_task" in p and p.get("path") is None
            else f"{p.get('path')}" + (f" bytes {p['start']}..{p['end']}" if "start" in p else "")
            for p in source
        )
    return str(source or shard.dir)


def check_compatible(shards: list[Shard]) -> None:
    """Shards of one store share the tokenizer and its dtype."""
    first = shards[0].record
    for i, shard in enumerate(shards[1:], start=1):
        for key in ("tokens",):
            if shard.record.get(key) != first.get(key):
                raise StoreFormatError(
                    f"shard {i} ({shard.dir}) has {key} {shard.record.get(key)!r}, shard 0 "
                    f"{first.get(key)!r}: every shard of a store is built with the same options"
                )


def pad_fields(
    tmp: Path, snapshot: str, shards: list[Shard], n: int
) -> tuple[list[str], dict[str, Any]]:
    """The fields of the store (sorted union); each shard's field columns, empty rows written
    into ``tmp`` (the snapshot's directory) for shards that lack one. Returns (fields, {shard
    index: {column: files}} for the padding) plus the padding files' entries."""
    fields = sorted(set().union(*(s.record["fields"] for s in shards)))
    padding: dict[str, Any] = {}
    for i, shard in enumerate(shards):
        for name in fields:
            column = field_column(name)
            if column in shard.record["columns"]:
                continue
            where = tmp / f"pad-{i:05d}-of-{n:05d}"
            where.mkdir(exist_ok=True)
            writer = RaggedWriter(where, column)
            writer.pad_to(shard.record["rows"])
            for file, info in writer.finish().items():
                padding[f"{snapshot}/{where.name}/{file}"] = (i, column, info)
    return fields, padding


def _tokenizer_file(shards: list[Shard]) -> str | None:
    """The tokenizer kept with the tokens: the first shard's that wrote one."""
    for shard in shards:
        if shard.record.get("tokenizer"):
            return f"{shard.dir}/{shard.record['tokenizer']}"
    return None


def manifest_of(
    root: Path,
    tmp: Path,
    snapshot: str,
    shards: list[Shard],
    build: dict[str, Any],
) -> dict[str, Any]:
    """Write the global index (and any padding) into ``tmp`` and return the manifest that
    commits ``shards`` as snapshot ``snapshot`` (``tmp`` becomes ``root/snapshot``)."""
    check_compatible(shards)
    keys, is_int = global_keys(root, shards)
    keep = str(build.get("duplicates") or "error")
    shards, keys = drop_duplicates(root, tmp, snapshot, shards, keys, keep)
    # shards that wrote their id keys: the index checks candidates there rather than keep them
    kept = all(_has_keys(s.record) for s in shards)
    index_meta, index_files = write_index(tmp, keys, is_int, ids_kept=kept)
    del keys
    files: dict[str, Any] = {f"{snapshot}/{name}": info for name, info in index_files.items()}
    fields, padding = pad_fields(tmp, snapshot, shards, len(shards))
    listed = []
    for i, shard in enumerate(shards):
        record = shard.record
        columns = {
            name: {k: f"{shard.dir}/{v}" for k, v in where.items()}
            for name, where in record["columns"].items()
        }
        for path, (j, column, _) in padding.items():
            if j == i:
                base = path.rsplit("/", 1)[0]
                data, offsets = column_files(column)
                columns[column] = {"data": f"{base}/{data}", "offsets": f"{base}/{offsets}"}
        files.update({f"{shard.dir}/{name}": info for name, info in record["files"].items()})
        listed.append(
            {"dir": shard.dir, "rows": record["rows"], "source": shard.source, "columns": columns}
        )
    files.update({path: info for path, (_, _, info) in padding.items()})
    first = shards[0].record
    dtypes = {"text": "|u1", "ids": "|u1", **{field_column(f): "|u1" for f in fields}}
    if first.get("tokens"):
        dtypes["tokens"] = first["tokens"]["dtype"]
    return {
        "format": FORMAT_NAME,
        "version": manifest_version(index_meta, current_version(FORMAT_NAME)),
        "lading_version": __version__,
        "snapshot": snapshot,
        "build_id": build.pop("build_id"),
        "count": sum(s.record["rows"] for s in shards),
        "fields": fields,
        "dtypes": dtypes,
        "index": {**index_meta, "dir": snapshot},
        "tokens": first.get("tokens"),
        "tokenizer": _tokenizer_file(shards),
        "source": build.pop("source"),
        "sources": build.pop("sources"),
        "shards": listed,
        "build": {
            **build,
            "skipped": sum(s.record["skipped"] for s in shards),
            "skip_examples": [e for s in shards for e in s.record["skip_examples"]][:10],
            "duplicates_dropped": sum(s.record["duplicates_dropped"] for s in shards),
            "shard_seconds": [s.record["seconds"] for s in shards],
        },
        "files": files,
    }
