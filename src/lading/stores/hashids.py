"""A hash index that keeps no keys: candidates are checked against the shards' own id keys.

What a merge writes for string ids (issue 49 item 2: a merge writes only what spans shards,
<= 2 % of the shards' bytes). The ``hash`` index (:mod:`lading.stores.hashindex`) keeps every
id again beside its table: 32 B of table and the id rounded up to 8 bytes a document, 56 B
for ``msmarco_passage_<i>`` ids, 13.95 % of real MS MARCO passages' shards. A shard built for a
merge (``build_shard``, the Ray datasink) writes its ids as fixed-width keys itself
(``ids.keys`` beside ``ids.bin``: each id zero-padded to the shard's longest rounded up to 8,
row order), in parallel with the other shards; the merge's index then holds only where each
id's row is:

- ``index.slots``: one slot of 6 bytes (int32 rows; 10 for int64) per ``1 / _LOAD`` ids:
  an 8-bit tag (the hash's top byte), how many slots the id sits past its home (``away``,
  255 meaning at least that) and the row (-1: empty). 7.1 B a document at ``_LOAD`` 0.85.
  Ids sorted by home slot (the hash's low 32 bits, Lemire's multiply-shift) each take the
  first free slot at or after their home (linear probing, laid out in home order: one
  running maximum places them all, no loop a collision). ``max_away`` (measured at build)
  bounds every search.

A lookup hashes the id as the ``hash`` index does (the same function; zero words add nothing
to it, so a key hashes alike at any width it fits) and reads slots from its home: a slot whose
tag matches has its row's key in its shard's ``ids.keys`` compared with the query, so a
collision never returns the wrong document; an empty slot, or one whose id sits nearer its own
home than this one is to the query's (ids are in home order), ends the search. A present id
sits 2.9 slots past its home on average (1M ids; 99 % within 15, the farthest 33), so a
search reads ~24 bytes of slots: one cache line, sometimes two, then one of keys, as the
``hash`` kind reads one line of table and one of keys.

Measured at 1M MS MARCO passages (benchmarks/RESULTS.md, "Merges that copy no payload"): the
lookup alone at ~0.9x the ``hash`` kind's speed, ``get_many`` of the merged store at ~0.95x a
one-process build's. Tried and dropped, each measured: checking candidates against the ragged
``ids`` column (its offsets, then its bytes: ``get_many`` at 0.76x); records grouped by bucket
behind a directory of bucket starts (7 B a document too, but the start is one more dependent
read: ``get_many`` at ~0.92x); fixed 64-byte lines of 10 records filled to 9 (full lines spill
into the next: the lookup at 0.79x the ``hash`` kind's).

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

from lading.disk import MappedFile, native, write_file
from lading.errors import StoreFormatError
from lading.stores.hashindex import (
    bound_finder,
    bucket_of,
    hash_words,
    query_words,
    word_multipliers,
)
from lading.stores.layout import shards

_LOAD = 0.85  # ids per home slot: 7.1 B a document; a present id's search reads ~4 slots
_FAR = 255  # the most an ``away`` byte says: a slot further from home reads as at least that
_TAG_SHIFT = np.uint64(56)


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


def slot_dtype(row_dtype: np.dtype[Any]) -> np.dtype[Any]:
    """One packed slot: an 8-bit tag, how far the slot is from its id's home (capped at
    ``_FAR``), then the row (-1: empty); 6 bytes for int32 rows."""
    rows_t = np.dtype(row_dtype).newbyteorder("<")
    return np.dtype([("tag", "u1"), ("away", "u1"), ("row", rows_t)])


def write_hash_ids_index(
    directory: Path, words: npt.NDArray[np.uint64], row_dtype: np.dtype[Any]
) -> tuple[dict[str, Any], dict[str, dict[str, int]]]:
    """Write the slots for unique keys ``words`` (``(count, width/8)`` uint64, in store row
    order); return the meta entry and the files written.

    Ids sorted by home (then row) take the first free slot at or after their home: slot
    ``i + max(home[j] - j for j <= i)`` for the ``i``-th, one running maximum for them all.
    """
    count = len(words)
    rows_t = np.dtype(row_dtype).newbyteorder("<")
    if count >= np.iinfo(rows_t).max:
        raise ValueError(f"{count} ids do not fit rows of {rows_t}")
    n_homes = max(1, int(np.ceil(count / _LOAD)))
    # ~34 bytes an id besides the keys at the peak (order, two int64 arrays, tags, the
    # slots): each array is dropped or reused as soon as the next is made
    h = hash_words(words)
    tags = (h >> _TAG_SHIFT).astype(np.uint8)
    home = bucket_of(h, n_homes)
    del h
    order = np.argsort(home, kind="stable")  # by home, then row
    gap = home[order]  # each id's home, in home order ...
    del home
    gap -= np.arange(count, dtype=np.int64)  # ... less its place in that order
    slot = np.maximum.accumulate(gap) if count else gap.copy()
    away = np.subtract(slot, gap, out=gap)  # slot - home
    slot += np.arange(count, dtype=np.int64)
    size = max(n_homes, int(slot[-1]) + 1 if count else 0)
    max_away = int(away.max()) if count else 0
    slots = np.zeros(size, dtype=slot_dtype(rows_t))
    slots["row"] = -1
    slots["tag"][slot] = tags[order]
    slots["away"][slot] = np.minimum(away, _FAR)
    slots["row"][slot] = order
    del tags, order, away, slot
    files = {"index.slots": write_file(directory / "index.slots", slots)}
    meta = {
        "kind": "hash-ids",
        "row_dtype": rows_t.str,
        "width": int(words.shape[1] * 8) if words.ndim == 2 and count else 8,
        "homes": n_homes,
        "max_away": max_away,
    }
    return meta, files


class HashIdsIndex:
    """Reads an index written by :func:`write_hash_ids_index`, checking candidates' keys in
    ``ids`` (:func:`shard_keys`)."""

    def __init__(self, directory: Path, meta: dict[str, Any], ids: IdKeys) -> None:
        self.width = int(meta["width"])
        self._homes = int(meta["homes"])
        self.max_away = int(meta["max_away"])
        rows_t = np.dtype(meta["row_dtype"])
        self._row_size = rows_t.itemsize
        self._ids = ids
        self._starts = ids.starts
        self._count = int(self._starts[-1])
        self._path = directory / "index.slots"
        self._slots_file = MappedFile(self._path, True)
        record = slot_dtype(rows_t).itemsize
        size = len(self._slots_file.buffer)
        if (
            self.width < 8
            or self.width % 8
            or self._row_size not in (4, 8)
            or self._homes < 1
            or size % record
            or size // record < self._homes
            or not 0 <= self.max_away < size // record
        ):
            raise StoreFormatError(
                f"{self._path}: {size} bytes do not hold slots of {record} bytes for "
                f"{self._homes} homes, ids at most {self.max_away} away and keys of "
                f"{self.width} bytes; rebuild the store"
            )
        self._slots = self._slots_file.array(slot_dtype(rows_t))
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
        index = (self._slots_file.buffer, self._row_size, self._homes, self.max_away)
        # every shard's keys held once for the finder's life (a tuple is a PyObject_GetBuffer
        # a shard a call: 2,000 shards, 2,000 a batch of 64 ids)
        held = (
            tuple(self._ids.keys) if native.NATIVE is None else native.NATIVE.Parts(self._ids.keys)
        )
        keys = (held, self._widths, self._starts.tobytes())
        args = (*index, self.width, factors, *keys)
        return bound_finder("hash_ids_rows", args, self._damaged)

    def rows(self, ids: Sequence[str | int]) -> npt.NDArray[np.int64]:
        """Rows of a batch of ids in request order; -1 for an absent id.

        Each id's slots from its home on, a step for the whole batch at a time: a slot that
        is empty, or whose id lives nearer its own home than this one is to the query's,
        ends the search (ids are laid out in the order of their homes)."""
        words, fits = query_words(ids, self.width)
        h = hash_words(words)
        home = bucket_of(h, self._homes)
        tag = (h >> _TAG_SHIFT).astype(np.uint8)
        out = np.full(len(ids), -1, dtype=np.int64)
        active = np.flatnonzero(fits)
        size = len(self._slots)
        for away in range(self.max_away + 1):
            at = home[active] + away
            active, at = active[at < size], at[at < size]
            if not len(active):
                break
            slots = self._slots[at]
            rows = slots["row"].astype(np.int64)
            ended = (rows < 0) | ((slots["away"] < away) & (slots["away"] < _FAR))
            hit = ~ended & (slots["tag"] == tag[active])
            found, queries = rows[hit], active[hit]
            if len(found) and (int(found.max()) >= self._count or int(found.min()) < 0):
                raise self._damaged(
                    f"a slot names row {int(found.max())}, outside the {self._count} ids"
                )
            same = self._same_ids(found, words[queries]) if len(found) else hit[hit]
            out[queries[same]] = found[same]
            active = active[~ended & (out[active] < 0)]
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
