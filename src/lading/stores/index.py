"""Id → row lookup over memory-mapped arrays, vectorised for batches of ids.

Five kinds, chosen at build time from the ids themselves (and, for string ids, by who writes
the index: a one-process build or a merge of shards):

- ``runs``: canonical non-negative integer ids that, in row order, make at most one run of
  consecutive values per :data:`RUN_IDS` ids (MS MARCO's pids ``0..n-1`` in file order: one).
  ``index.runs`` keeps each run's first id, its row and its length, 24 B a run; a lookup is a
  binary search over runs that stay in the CPU's cache. A merge of shards writes ~0 B a
  document where the ``dense`` table took 4 (4.3 % of the shards of 90-byte passages).
- ``dense``: every id is a canonical non-negative integer and the largest is below
  ``8 * count + 65536`` (MS MARCO passages: ids 0..8,841,822 for 8,841,823 rows; ids ``7i+3``).
  One array ``index.dense`` maps id → row (-1 for holes): a lookup is one array read. int32 rows
  cost 4 bytes per id slot, so at most 32 bytes per id: what the hash table alone takes per
  id. (Up to 4 slots per id before, so ids ``7i+3`` took the binary search: at 1M ids, in one
  process beside a dict, get_many ran at 1.10x the dict's docs/s through the search and 1.50x
  through the table, median of 9 repeats; benchmarks/bench_index.py has both kinds.)
- ``sorted-int``: canonical integer ids too sparse for a direct array (the TREC DL pool: 28,606
  ids up to 8.8M). ``index.keys`` is the sorted int64 ids, ``index.rows`` their rows;
  ``np.searchsorted`` (or the C helper's binary search, a batch at a time) finds a batch in
  O(batch · log count).
- ``hash``: any other ids (``D123``, ``msmarco_doc_31_726131``): an open-addressing hash
  table over the ids as fixed-width bytes (see :mod:`lading.stores.hashindex`). DESIGN.md first
  named sorted byte keys with ``np.searchsorted`` here; at a million ids that costs ~20 cache
  misses per lookup (0.47M docs/s measured), the table about two.
- ``hash-ids``: what a merge of shards writes for such ids (see :mod:`lading.stores.hashids`):
  the same hash, but no keys kept: a candidate's key is read from its shard's ``ids.keys``
  (written by the shard's own worker), so the merge writes 7 B a document (the ``hash``
  kind's 32 B plus the id again made a merge write 14 % of real passages' shards). The reader
  hands it those keys.

"Canonical" integer means ASCII digits without a leading zero ("0" itself excepted), at most 18
digits, so that ``"007"`` and ``"7"`` stay different ids, as they are in the source. A query id
is an ``int`` or a numpy integer (its value), or a ``str``; another int (a bool) is looked up
as ``str(id)``; an object that is no id (None, a float, bytes) is absent, as ``in`` says
(:func:`~lading.stores.hashindex.id_key`).

Two routes give the same rows: the C helper (:mod:`lading.disk.native`, one call a batch) where
it was built, else numpy (a handful of calls a batch).
"""

from __future__ import annotations

import mmap
from array import array
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from lading.disk import MappedFile, SpillArray, native, write_file
from lading.errors import StoreFormatError
from lading.sources.tsv_blocks import Column, int_values
from lading.stores.hashids import HashIdsIndex, IdKeys, write_hash_ids_index
from lading.stores.hashindex import HashIndex, id_key, key_width, write_hash_index

INDEX_KINDS: tuple[str, ...] = ("dense", "hash", "hash-ids", "runs", "sorted-int")
RUN_IDS = 1024  # ids a run must hold on average for the runs kind (<= 0.03 B an id)
# kinds a reader of version 2 of lading.packed or lading.offsets does not know: a manifest whose
# index is one says version 3, which such a reader refuses naming the upgrade
VERSION_3_KINDS = ("hash-ids", "runs")

_MAX_INT_DIGITS = 18  # < 2**63, so every canonical id fits int64
_DENSE_SLACK = 65536
DENSE_SLOTS_PER_ID = 8  # id slots per id a dense table may have (see the module docstring)
_POWERS_OF_TEN = 10 ** np.arange(_MAX_INT_DIGITS, dtype=np.int64)  # digits(v) = #powers <= v

IdLike = str | int
# a batch of ids -> (int64 rows as bytes, -1 where absent; position of the first absent or -1)
Finder = Callable[[Sequence[IdLike]], tuple[bytearray, int]]


def manifest_version(index: dict[str, Any], version: int) -> int:
    """The version a manifest of a format written at ``version`` says for this ``index``."""
    return max(version, 3) if index["kind"] in VERSION_3_KINDS else version


def canonical_int(doc_id: str) -> int | None:
    """The integer ``doc_id`` spells canonically, or None.

    ``"7"`` → 7; ``"07"``, ``" 7"``, ``"x"`` → None.
    """
    if (
        doc_id.isascii()
        and doc_id.isdigit()
        and len(doc_id) <= _MAX_INT_DIGITS
        and (doc_id[0] != "0" or len(doc_id) == 1)
    ):
        return int(doc_id)
    return None


class IntIdCollector:
    """Collects integer ids while a build streams, until the first non-integer id.

    With ``spill``, the values go to that scratch file instead of RAM (a build's memory then
    does not grow with the row count); the caller deletes it with ``spill.discard()``.
    """

    def __init__(self, spill: SpillArray | None = None) -> None:
        self.values: array[int] | SpillArray | None = spill if spill is not None else array("q")

    def keys(self) -> npt.NDArray[np.int64]:
        """The ids collected, in row order, as an int64 array of their own (not a map)."""
        if self.values is None:
            raise ValueError("the ids are not all integers")
        if isinstance(self.values, SpillArray):
            return np.array(self.values.view(), dtype=np.int64)
        return np.frombuffer(self.values, dtype=np.int64).copy()

    def add(self, doc_id: str) -> None:
        """Record one id (in row order); the first that is not an integer ends the collecting."""
        value = None if self.values is None else canonical_int(doc_id)
        if value is not None:
            self.values.append(value)  # type: ignore[union-attr]
        elif self.values is not None:
            self._give_up()

    def add_many(self, ids: Column) -> None:
        """Record a block's ids (in row order)."""
        if self.values is None:
            return
        values = int_values(ids)
        if values is None:
            self._give_up()
        elif isinstance(self.values, SpillArray):
            self.values.extend(values)
        else:
            self.values.frombytes(values.astype(np.int64).tobytes())

    def _give_up(self) -> None:
        if isinstance(self.values, SpillArray):
            self.values.discard()
        self.values = None


def row_dtype(count: int) -> np.dtype[Any]:
    """int32 rows while they fit (half the bytes of int64), else int64."""
    return np.dtype("<i4") if count < 2**31 - 1 else np.dtype("<i8")


def bytes_keys(
    ids_bin: bytes | memoryview | mmap.mmap,
    ids_off: npt.NDArray[np.uint64],
    where: str | None = "",
) -> np.ndarray:
    """Fixed-width ``S<width>`` keys of a ragged UTF-8 id column, scattered in numpy.

    The width is a whole number of 8-byte words, so the keys also read as uint64 words. Built
    in 32Ki-row chunks without a Python object per id: the result (``width`` bytes per id,
    77 MB for MS MARCO's 3.2M document ids) is the only allocation that grows with the count.
    One id far longer than the rest warns (:class:`~lading.errors.LongIdWarning`), its row
    named with ``where`` (``" of shard-00002-of-00008"``; None: no warning, the caller checks
    the keys it puts together, :func:`warn_if_wide`).
    """
    count = len(ids_off) - 1
    lengths = np.diff(ids_off)
    longest = int(lengths.max()) if count else 1
    width = key_width(longest)
    if where is not None and wide_keys(count, width, int(ids_off[-1]) if count else 0):
        row = int(lengths.argmax())
        a, b = int(ids_off[row]), int(ids_off[row + 1])
        start = bytes(memoryview(ids_bin)[a : min(b, a + 24)])
        warn_long_id(start, b - a, f"row {row}{where}", count, width, int(ids_off[-1]))
    keys = np.zeros(count, dtype=f"S{width}")
    table = keys.view(np.uint8).reshape(count, width)
    data = np.frombuffer(ids_bin, dtype=np.uint8)
    chunk = 1 << 15  # rows: the scatter's index arrays take ~24 bytes per id byte
    for lo in range(0, count, chunk):
        hi = min(lo + chunk, count)
        bounds = ids_off[lo : hi + 1].astype(np.int64)
        lengths = np.diff(bounds)
        first, last = int(bounds[0]), int(bounds[-1])
        rows = np.repeat(np.arange(lo, hi), lengths)
        cols = np.arange(last - first) - np.repeat(bounds[:-1] - first, lengths)
        table[rows, cols] = data[first:last]
    return keys


_WIDE_KEYS_BYTES = 4 << 20  # keys this large, and ...
_WIDE_KEYS_TIMES = 16  # ... this many times the ids' own bytes: one id widens them all


def wide_keys(count: int, width: int, id_bytes: int) -> bool:
    """Whether ``count`` keys of ``width`` bytes are far more than the ids' own ``id_bytes``
    (one id widens them all)."""
    return count > 0 and count * width > max(_WIDE_KEYS_BYTES, _WIDE_KEYS_TIMES * id_bytes)


def warn_long_id(
    start: bytes, length: int, row: str, count: int, width: int, id_bytes: int
) -> None:
    """Warn that the id of ``row`` (its first bytes ``start``, ``length`` bytes in all) sets
    the width of ``count`` keys that hold ``id_bytes`` of ids."""
    import warnings

    from lading.errors import LongIdWarning

    shown = start[:24].decode("utf-8", "replace")
    warnings.warn(
        LongIdWarning(
            f"the id of {row} ({shown!r}{'…' if length > 24 else ''}, {length:,} bytes) sets "
            f"the width of every id's index key: {count * width:,} bytes of keys for "
            f"{count:,} ids that hold {id_bytes:,}, in the index and in the build's memory; an "
            "id that long is likely a text in the id column: check that row, or shorten it"
        ),
        stacklevel=3,
    )


def warn_if_wide(parts: Sequence[np.ndarray], names: Sequence[str], width: int) -> None:
    """Warn (:func:`warn_long_id`) where ``parts``, every shard's ``S<width>`` keys (a merge
    puts them together, each named by ``names``), are far wider than their ids."""
    count = sum(len(p) for p in parts)
    if count * width <= _WIDE_KEYS_BYTES:
        return  # (the ids' lengths are counted only where the keys are large)
    lengths = [np.char.str_len(p) for p in parts]
    id_bytes = sum(int(n.sum()) for n in lengths)
    if not wide_keys(count, width, id_bytes):
        return
    at = max(range(len(parts)), key=lambda i: int(lengths[i].max()) if len(parts[i]) else -1)
    row = int(lengths[at].argmax())
    key = bytes(parts[at][row])
    warn_long_id(key, len(key), f"row {row} of {names[at]}", count, width, id_bytes)


def write_index(
    directory: Path, keys: np.ndarray, is_int: bool, ids_kept: bool = False
) -> tuple[dict[str, Any], dict[str, dict[str, int]]]:
    """Write the index of unique ``keys`` (row order); return its meta entry and file entries.

    ``ids_kept``: every shard wrote its id keys (``ids.keys``) for a reader to check against,
    so string ids get the ``hash-ids`` kind, which keeps none of its own (a merge's choice: it
    writes what spans shards only)."""
    count = len(keys)
    rows_t = row_dtype(count)
    runs = id_runs(keys) if is_int else None
    if runs is not None:
        files = {"index.runs": write_file(directory / "index.runs", runs)}
        return {"kind": "runs", "runs": runs.shape[1], "row_dtype": rows_t.str}, files
    if is_int and (
        count == 0 or (keys.min() >= 0 and keys.max() < DENSE_SLOTS_PER_ID * count + _DENSE_SLACK)
    ):
        size = int(keys.max()) + 1 if count else 0
        table = np.full(size, -1, dtype=rows_t)
        table[keys] = np.arange(count, dtype=rows_t)
        files = {"index.dense": write_file(directory / "index.dense", table)}
        return {"kind": "dense", "row_dtype": rows_t.str}, files
    if not is_int:
        words = np.ascontiguousarray(keys).view("<u8").reshape(count, -1)
        if ids_kept:
            return write_hash_ids_index(directory, words, rows_t)
        return write_hash_index(directory, words, rows_t)
    order = np.argsort(keys, kind="stable")
    sorted_keys = np.ascontiguousarray(keys[order])
    files = {
        "index.keys": write_file(directory / "index.keys", sorted_keys),
        "index.rows": write_file(directory / "index.rows", order.astype(rows_t)),
    }
    meta = {"kind": "sorted-int", "key_dtype": sorted_keys.dtype.str, "row_dtype": rows_t.str}
    return meta, files


def id_runs(keys: npt.NDArray[np.int64]) -> npt.NDArray[np.int64] | None:
    """The runs of consecutive integer ``keys`` (unique, row order) as one ``(3, runs)`` int64
    array, sorted by first id: firsts, their rows, lengths; None where they make more than one
    run per :data:`RUN_IDS` ids (or hold a negative id), which the other kinds serve better."""
    count = len(keys)
    if count == 0 or int(keys.min()) < 0:
        return None
    starts = np.flatnonzero(np.diff(keys) != 1) + 1
    if len(starts) + 1 > max(1, count // RUN_IDS):
        return None
    rows = np.concatenate(([0], starts)).astype(np.int64)
    lengths = np.diff(np.concatenate((rows, [count]))).astype(np.int64)
    firsts = keys[rows].astype(np.int64)
    order = np.argsort(firsts, kind="stable")
    return np.ascontiguousarray(np.stack((firsts[order], rows[order], lengths[order])))


def _read_runs(
    directory: Path, meta: dict[str, Any], count: int | None
) -> tuple[MappedFile, npt.NDArray[np.int64]]:
    """``index.runs`` mapped and checked (a damaged file must not send a lookup to a row that
    no run gives): ``runs`` runs of firsts ascending, each past the end of the one before,
    rows and lengths positive, rows covering ``0..count`` once where ``count`` (the store's
    rows) is given, else from 0 without a gap."""
    mapped = MappedFile(directory / "index.runs", True)
    table = mapped.array(np.dtype("<i8"))
    runs = meta["runs"]
    where = directory / "index.runs"
    if len(table) != 3 * runs:
        raise StoreFormatError(
            f"{where}: holds {len(table)} int64, its manifest says {runs} runs (x3); rebuild "
            "the store"
        )
    firsts, rows, lengths = table.reshape(3, runs)
    by_row = np.argsort(rows, kind="stable")
    row_starts, row_ends = rows[by_row], (rows + lengths)[by_row]
    if runs and (
        int(firsts[0]) < 0
        or int(lengths.min()) <= 0
        or bool(np.any(firsts[1:] < (firsts + lengths)[:-1]))
        or int(row_starts[0]) != 0
        or bool(np.any(row_starts[1:] != row_ends[:-1]))
    ):
        raise StoreFormatError(
            f"{where}: its runs overlap, are out of order or leave rows out; rebuild the store"
        )
    covered = int(row_ends[-1]) if runs else 0
    if count is not None and covered != count:  # (no runs at all for rows too)
        raise StoreFormatError(
            f"{where}: its runs give rows 0..{covered}, the store has {count}; rebuild the store"
        )
    return mapped, table


class IdIndex:
    """Reads an index written by :func:`write_index`; finds the rows of ids.

    ``ids``: the shards' id keys, which a ``hash-ids`` index checks its candidates against
    (:func:`lading.stores.hashids.shard_keys`; the other kinds keep their own and ignore it).
    ``count``: the store's rows, where known: a ``runs`` index that gives a row past them is
    refused at open.
    """

    def __init__(
        self,
        directory: Path,
        meta: dict[str, Any],
        ids: IdKeys | None = None,
        count: int | None = None,
    ) -> None:
        self.kind: str = meta["kind"]
        if self.kind not in INDEX_KINDS:
            raise ValueError(f"unknown index kind {self.kind!r}; choose from {sorted(INDEX_KINDS)}")
        rows_t = np.dtype(meta["row_dtype"])
        c = native.NATIVE
        self._native: Finder | None = None
        if self.kind == "runs":
            mapped, self._runs = _read_runs(directory, meta, count)
            if c is not None:
                runs = mapped.buffer  # 3 x runs int64, checked
                self._native = lambda ids: c.runs_rows(ids, runs)
        elif self.kind == "dense":
            dense = MappedFile(directory / "index.dense", True)
            self._table = dense.array(rows_t)
            if c is not None:
                table, size = dense.buffer, rows_t.itemsize
                self._native = lambda ids: c.dense_rows(ids, table, size)
        elif self.kind in ("hash", "hash-ids"):
            if self.kind == "hash":
                self._hash: HashIndex | HashIdsIndex = HashIndex(directory, meta)
            elif ids is None:
                raise ValueError(f"{directory}: a hash-ids index is read with its shards' id keys")
            else:
                self._hash = HashIdsIndex(directory, meta, ids)
            self._native = self._hash.native_finder()
        else:
            keys = MappedFile(directory / "index.keys", True)
            rows = MappedFile(directory / "index.rows", True)
            self._keys = keys.array(np.dtype(meta["key_dtype"]))
            self._rows = rows.array(rows_t)
            if len(self._keys) != len(self._rows):
                raise StoreFormatError(
                    f"{directory}: index.keys holds {len(self._keys)} ids, index.rows "
                    f"{len(self._rows)} rows; rebuild the store"
                )
            if c is not None and self._keys.dtype == np.dtype("<i8"):
                found, at, size = keys.buffer, rows.buffer, rows_t.itemsize
                self._native = lambda ids: c.sorted_rows(ids, found, at, size)

    def row(self, doc_id: IdLike) -> int:
        """Row of one id, or -1 when absent."""
        if self._native is not None:
            raw, absent = self._native((doc_id,))
            return -1 if absent == 0 else int.from_bytes(raw, "little", signed=True)
        if self.kind in ("hash", "hash-ids"):
            return int(self._hash.rows([doc_id])[0])
        key = id_key(doc_id)
        value = key if isinstance(key, int) or key is None else canonical_int(key)
        if value is None or not 0 <= value < 10**_MAX_INT_DIGITS:
            return -1
        if self.kind == "runs":
            return int(self._runs_rows(np.array([value], dtype=np.int64))[0])
        if self.kind == "dense":  # a row < 0 (a damaged table) is absent, as in the C helper
            return max(-1, int(self._table[value])) if value < len(self._table) else -1
        pos = int(np.searchsorted(self._keys, value))
        if pos < len(self._keys) and int(self._keys[pos]) == value:
            return max(-1, int(self._rows[pos]))
        return -1

    def rows(self, ids: Sequence[IdLike]) -> npt.NDArray[np.int64]:
        """Rows of a batch of ids, in request order; -1 marks an absent id."""
        return self.lookup(ids)[0]

    def lookup(self, ids: Sequence[IdLike]) -> tuple[npt.NDArray[np.int64], int]:
        """Rows of a batch of ids (request order, -1 where absent) and the position of the first
        absent id (-1 when all are present), so a caller raises without another pass."""
        if self._native is not None:
            raw, absent = self._native(ids)
            return np.frombuffer(raw, np.int64), absent
        rows = self._numpy_rows(ids)
        missing = np.flatnonzero(rows < 0)
        if len(missing):
            rows[missing] = -1  # a row < 0 read from a damaged table is absent, as in the helper
        return rows, int(missing[0]) if len(missing) else -1

    def _numpy_rows(self, ids: Sequence[IdLike]) -> npt.NDArray[np.int64]:
        if self.kind in ("hash", "hash-ids"):
            return self._hash.rows(ids)
        query = _int_query(ids)
        if self.kind == "runs":
            return self._runs_rows(query)
        if self.kind == "dense":
            table = self._table
            # one reduction checks both ends: a negative id reads as a huge unsigned one
            if len(query) and int(query.view(np.uint64).max()) < len(table):
                return table[query].astype(np.int64)
            valid = (query >= 0) & (query < len(table))
            out = np.full(len(query), -1, dtype=np.int64)
            out[valid] = table[query[valid]]
            return out
        return self._search(self._keys, query)

    def _runs_rows(self, query: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """Rows of integer ``query`` keys (-1: not an id) in the runs; -1 where absent."""
        firsts, rows, lengths = self._runs.reshape(3, -1)
        if len(firsts) == 0:
            return np.full(len(query), -1, dtype=np.int64)
        run = np.searchsorted(firsts, query, side="right") - 1
        np.maximum(run, 0, out=run)
        off = query - firsts[run]
        inside = (query >= 0) & (off >= 0) & (off < lengths[run])
        return np.where(inside, rows[run] + off, -1)

    def _search(self, keys: np.ndarray, query: np.ndarray) -> npt.NDArray[np.int64]:
        """Rows of ``query`` in sorted ``keys``; -1 where absent."""
        if len(keys) == 0:
            return np.full(len(query), -1, dtype=np.int64)
        pos = np.searchsorted(keys, query)
        np.minimum(pos, len(keys) - 1, out=pos)
        out = self._rows[pos].astype(np.int64)
        out[keys[pos] != query] = -1
        return out


def _int_query(ids: Sequence[IdLike]) -> npt.NDArray[np.int64]:
    """int64 keys of a batch of ids; -1 for an id that is not a canonical integer.

    Fast paths (a few C-level passes each): all ids are ``str`` of ASCII digits and none starts
    with "0" (``int()`` alone would accept " 7", "+7", "7_0", "٧" and "07", which are other ids);
    or all are ``int``/numpy integers (``bool`` is neither: ``True`` is not the id 1).
    """
    n = len(ids)
    kinds = set(map(type, ids))
    try:
        if kinds == {str}:
            joined = "".join(ids)  # type: ignore[arg-type]
            if joined.isascii() and joined.isdigit() and "\t0" not in "\t" + "\t".join(ids):  # type: ignore[arg-type]
                return np.fromiter(map(int, ids), np.int64, n)
        elif kinds and all(k is int or issubclass(k, np.integer) for k in kinds):
            query = np.array(ids, dtype=np.int64)
            return np.where(query.view(np.uint64) < 10**_MAX_INT_DIGITS, query, -1)
    except (ValueError, OverflowError):
        pass  # an empty id, or more digits than int64 holds
    out = np.full(n, -1, dtype=np.int64)
    for i, doc_id in enumerate(ids):
        key = id_key(doc_id)
        value = key if isinstance(key, int) or key is None else canonical_int(key)
        if value is not None and 0 <= value < 10**_MAX_INT_DIGITS:
            out[i] = value
    return out
