"""A hash index that keeps no keys: candidates are checked against the shards' own id keys.

What a merge writes for string ids (issue 49 item 2: a merge writes only what spans shards,
<= 2 % of the shards' bytes). The ``hash`` index (:mod:`lading.stores.hashindex`) keeps every
id again beside its table: 32 B of table and the id rounded up to 8 bytes a document, 56 B
for ``msmarco_passage_<i>`` ids, 13.95 % of real MS MARCO passages' shards. A shard built for a
merge (``build_shard``, the Ray datasink) writes its ids as fixed-width keys itself
(``ids.keys`` beside ``ids.bin``: each id zero-padded to the shard's longest rounded up to 8,
row order), in parallel with the other shards; the merge's index then holds only where each
id's row is, sorted by hash:

- ``index.entries``: one record per id, ordered by bucket then row: a 16-bit tag (the hash's
  top 16 bits) and the row (``row_dtype``: int32 while rows fit), packed, 6 bytes a record.
- ``index.buckets``: ``buckets + 1`` first records (``row_dtype``), bucket ``b``'s records
  being ``entries[buckets[b]:buckets[b + 1]]``. A bucket holds 4 ids on average
  (``_LOAD``), so 1 byte a document.

7 bytes a document in all. A lookup hashes the id as the ``hash`` index does (the same
function; zero words add nothing to it, so a key hashes alike at any width it fits), picks its
bucket from the hash's low 32 bits (Lemire's multiply-shift), reads the bucket's start and its
records (about 24 bytes: one cache line, sometimes two), takes each row whose tag matches, and
compares that row's key in its shard's ``ids.keys`` with the query: an id with the right tag
but other bytes is passed over, so a collision never returns the wrong document. No bucket
overflows into another, so an absent id costs one bucket's records.

Measured at 1M MS MARCO passages (benchmarks/RESULTS.md, "Merges that copy no payload"): the
lookup runs at ~0.86x the ``hash`` kind's speed (the bucket start is one more dependent read)
and ``get_many`` of the merged store at 0.93-0.97x a one-process build's. Tried and dropped:
checking candidates against the ragged ``ids`` column (its offsets, then its bytes: two reads
where ``ids.keys`` is one; ``get_many`` at 0.76x), and fixed 64-byte lines of 10 records
filled to 9 with no bucket starts (full lines spill into the next, as in the ``hash`` kind:
0.79x the ``hash`` kind's lookups, the spills and the scan of 10 tags costing more than the
start's read).

The keys are given as :class:`IdKeys`: one buffer and one width per shard, rows numbered over
the shards.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from lading.disk import MappedFile, write_file
from lading.errors import StoreFormatError
from lading.stores.hashindex import bound_finder, hash_words, query_words, word_multipliers
from lading.stores.layout import shards

_LOAD = 4  # ids per bucket on average: 1 B a document of bucket starts, ~24 B read a lookup
_LOW = np.uint64(0xFFFFFFFF)
_TAG_SHIFT = np.uint64(48)


@dataclass(frozen=True)
class IdKeys:
    """The shards' id keys: each shard's ``ids.keys`` (a buffer of ``rows * width`` bytes) and
    its width, and the first row of each shard then the row count (``len(keys) + 1``)."""

    keys: tuple[Any, ...]
    widths: tuple[int, ...]
    starts: npt.NDArray[np.int64]

    def __post_init__(self) -> None:
        if not len(self.keys) == len(self.widths) == len(self.starts) - 1 or not self.keys:
            raise ValueError(
                f"{len(self.keys)} key files, {len(self.widths)} widths and "
                f"{len(self.starts) - 1} shards"
            )


def keys_file(ids_data: str) -> str:
    """Where a shard keeps its id keys, beside its ``ids`` column's data (``ids.bin``)."""
    stem = ids_data[: -len(".bin")] if ids_data.endswith(".bin") else ids_data
    return stem + ".keys"


def shard_keys(root: Path, manifest: dict[str, Any]) -> IdKeys:
    """Map every shard's ``ids.keys`` under ``root`` (a store, or a remote store's staged copy).

    Raises:
        StoreFormatError: a shard's keys are not listed in the manifest, or their size is not
            its rows times a width of whole 8-byte words.
    """
    keys, widths, starts = [], [], [0]
    for shard in shards(manifest):
        name = keys_file(shard["columns"]["ids"]["data"])
        rows = int(shard["rows"])
        if name not in manifest.get("files", {}):
            raise StoreFormatError(
                f"{root}: the index reads {name}, which the manifest does not list; "
                "rebuild the store"
            )
        mapped = MappedFile(root / name, True)
        size = len(mapped.buffer)
        width = size // rows if rows else 8
        if rows and (size % rows or width % 8 or width < 8):
            raise StoreFormatError(
                f"{root / name}: {size} bytes are not {rows} keys of whole 8-byte words; "
                "rebuild the store"
            )
        keys.append(mapped.buffer)
        widths.append(width)
        starts.append(starts[-1] + rows)
    return IdKeys(tuple(keys), tuple(widths), np.array(starts, dtype=np.int64))


def entry_dtype(row_dtype: np.dtype[Any]) -> np.dtype[Any]:
    """One packed record: the tag, then the row (no padding between them)."""
    return np.dtype([("tag", "<u2"), ("row", np.dtype(row_dtype).newbyteorder("<"))])


def _bucket(h: npt.NDArray[np.uint64], n_buckets: int) -> npt.NDArray[np.int64]:
    """Bucket of each hash in ``[0, n_buckets)`` from its low 32 bits, as the ``hash`` kind."""
    return (((h & _LOW) * np.uint64(n_buckets)) >> np.uint64(32)).astype(np.int64)


def write_hash_ids_index(
    directory: Path, words: npt.NDArray[np.uint64], row_dtype: np.dtype[Any]
) -> tuple[dict[str, Any], dict[str, dict[str, int]]]:
    """Write buckets and entries for unique keys ``words`` (``(count, width/8)`` uint64, in
    store row order); return the meta entry and the files written."""
    count = len(words)
    rows_t = np.dtype(row_dtype)
    if count >= np.iinfo(rows_t).max:
        raise ValueError(f"{count} ids do not fit rows of {rows_t}")
    n_buckets = max(1, -(-count // _LOAD))
    h = hash_words(words)
    bucket = _bucket(h, n_buckets)
    order = np.argsort(bucket, kind="stable")  # by bucket, then row
    entries = np.empty(count, dtype=entry_dtype(rows_t))
    entries["tag"] = (h[order] >> _TAG_SHIFT).astype(np.uint16)
    entries["row"] = order
    del h, order
    starts = np.zeros(n_buckets + 1, dtype=rows_t)
    np.cumsum(np.bincount(bucket, minlength=n_buckets), out=starts[1:])
    del bucket
    files = {
        "index.buckets": write_file(
            directory / "index.buckets", starts.astype(rows_t.newbyteorder("<"))
        ),
        "index.entries": write_file(directory / "index.entries", entries),
    }
    meta = {
        "kind": "hash-ids",
        "row_dtype": rows_t.newbyteorder("<").str,
        "width": int(words.shape[1] * 8) if words.ndim == 2 and count else 8,
        "buckets": n_buckets,
    }
    return meta, files


class HashIdsIndex:
    """Reads an index written by :func:`write_hash_ids_index`, checking candidates' keys in
    ``ids`` (:func:`shard_keys`)."""

    def __init__(self, directory: Path, meta: dict[str, Any], ids: IdKeys) -> None:
        self.width = int(meta["width"])
        self._n_buckets = int(meta["buckets"])
        rows_t = np.dtype(meta["row_dtype"])
        self._row_size = rows_t.itemsize
        self._ids = ids
        self._starts = ids.starts
        self._count = int(self._starts[-1])
        self._buckets_file = MappedFile(directory / "index.buckets", True)
        self._entries_file = MappedFile(directory / "index.entries", True)
        self._entries = self._entries_file.array(entry_dtype(rows_t))
        self._buckets = self._buckets_file.array(rows_t)
        if (
            self.width < 8
            or self.width % 8
            or self._n_buckets < 1
            or len(self._buckets) != self._n_buckets + 1
            or len(self._entries) != self._count
            or len(self._entries_file.buffer) % self._entries.itemsize
        ):
            raise StoreFormatError(
                f"{directory}: index.buckets ({len(self._buckets_file.buffer)} bytes) and "
                f"index.entries ({len(self._entries_file.buffer)} bytes) do not match "
                f"{self._n_buckets} buckets and {self._count} ids; rebuild the store"
            )
        self._path = directory / "index.entries"
        self._keys = [
            np.frombuffer(k, dtype="<u8").reshape(-1, w // 8) for k, w in zip(ids.keys, ids.widths)
        ]
        for p, (keys, rows) in enumerate(zip(self._keys, np.diff(self._starts).tolist())):
            if len(keys) != rows:
                raise StoreFormatError(
                    f"{directory}: shard {p}'s id keys hold {len(keys)} rows, it has {rows}; "
                    "rebuild the store"
                )
        self._widths = np.array(ids.widths, dtype=np.int64).tobytes()

    def _damaged(self, problem: str) -> StoreFormatError:
        return StoreFormatError(f"{self._path}: {problem}; rebuild the store")

    def native_finder(self) -> Callable[[Sequence[str | int]], tuple[bytearray, int]] | None:
        """The C helper's lookup bound to this index (None without the helper): a batch of ids
        -> (int64 rows as bytes, -1 where absent; the first absent position or -1)."""
        factors = word_multipliers(self.width // 8).tobytes()
        index = (self._buckets_file.buffer, self._entries_file.buffer, self._row_size)
        keys = (self._ids.keys, self._widths, self._starts.tobytes())
        args = (*index, self._n_buckets, self.width, factors, *keys)
        return bound_finder("hash_ids_rows", args, self._damaged)

    def rows(self, ids: Sequence[str | int]) -> npt.NDArray[np.int64]:
        """Rows of a batch of ids in request order; -1 for an absent id."""
        words, fits = query_words(ids, self.width)
        h = hash_words(words)
        bucket = _bucket(h, self._n_buckets)
        tag = (h >> _TAG_SHIFT).astype(np.uint16)
        lo = self._buckets[bucket].astype(np.int64)
        hi = self._buckets[bucket + 1].astype(np.int64)
        bad = np.flatnonzero(fits & ((lo > hi) | (hi > len(self._entries)) | (lo < 0)))
        if len(bad):
            b = bad[0]
            raise self._damaged(
                f"bucket {int(bucket[b])}'s records ({int(lo[b])}..{int(hi[b])}) are not within "
                f"the {len(self._entries)} entries"
            )
        # every record of every query's bucket, flattened: (query, record) pairs
        sizes = np.where(fits, hi - lo, 0)
        query = np.repeat(np.arange(len(ids)), sizes)
        record = np.arange(int(sizes.sum())) - np.repeat(np.cumsum(sizes) - sizes, sizes)
        record += np.repeat(lo, sizes)
        entries = self._entries[record]
        hit = entries["tag"] == tag[query]
        query, rows = query[hit], entries["row"][hit].astype(np.int64)
        outside = rows[(rows < 0) | (rows >= self._count)]
        if len(outside):
            raise self._damaged(f"a record names row {outside[0]}, outside the {self._count} ids")
        same = self._same_ids(rows, words[query]) if len(rows) else np.zeros(0, bool)
        out = np.full(len(ids), -1, dtype=np.int64)
        # the first matching record of each query wins, as in the helper: write in reverse
        out[query[same][::-1]] = rows[same][::-1]
        return out

    def _same_ids(
        self, rows: npt.NDArray[np.int64], words: npt.NDArray[np.uint64]
    ) -> npt.NDArray[np.bool_]:
        """Whether each row's key in its shard's ``ids.keys`` is the query ``words``."""
        out = np.zeros(len(rows), dtype=bool)
        part = np.searchsorted(self._starts, rows, side="right") - 1
        for p in np.unique(part).tolist():
            mine = np.flatnonzero(part == p)
            keys = self._keys[p]
            w = keys.shape[1]
            stored = keys[rows[mine] - self._starts[p]]
            query = words[mine]
            # a key is zero-padded to its shard's width: a longer query is another id
            fits = ~query[:, w:].any(axis=1) if query.shape[1] > w else np.ones(len(mine), bool)
            common = min(w, query.shape[1])
            same = (stored[:, :common] == query[:, :common]).all(axis=1)
            if w > common:
                same &= ~stored[:, common:].any(axis=1)
            out[mine] = fits & same
        return out
