"""Bucketed hash table over fixed-width byte keys: one cache line and one key per lookup.

Why not binary search over sorted keys: with a million string ids, ``np.searchsorted`` over
``S<width>`` keys touches ~20 cache lines per id (0.47M lookups/s measured). Plain linear
probing was tried next: its rare long chains (46 slots at 1M ids) cost a whole vectorised round
per step for the batch. Here a table slot is a uint64 — high 32 bits a tag (the hash's top
bits), low 32 bits row + 1 (0: empty) — and 8 slots make a 64-byte bucket. An id's bucket is
read whole (one cache line), tags pick the candidate, and the id's stored key confirms it, so a
collision can never return the wrong document. Buckets hold 2 ids on average (32 bytes of
table per id); a full bucket spills into the next, and ``max_spill`` (measured at build) bounds
how far a lookup of an absent id looks.

Files: ``index.table`` (``n_buckets * 8`` uint64) and ``index.keys`` (every id as ``width``
zero-padded bytes, row order, read as ``width/8`` little-endian uint64 words). The hash is a
64-bit multiply-xorshift over the words with murmur3's finaliser, computed by numpy on whole
batches: defined here, not by Python's ``hash`` (salted per process). The C helper
(:mod:`lading.disk.native`) computes the same hash bit for bit and reads the same files; it is
the route where it is built (tests/stores/test_lookup.py checks both routes agree). Stored ids
hold no NUL (sources refuse them), so zero padding is unambiguous; a query holding one is absent.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from lading.disk import MappedFile, native, write_file
from lading.errors import StoreFormatError

_SEED = np.uint64(0x9E3779B97F4A7C15)
_MUL = np.uint64(0xFF51AFD7ED558CCD)
_FIN = np.uint64(0xC4CEB9FE1A85EC53)
_SHIFT = np.uint64(33)


def word_multipliers(words: int) -> npt.NDArray[np.uint64]:
    """One odd 64-bit multiplier per key word, fixed forever (part of the format).

    The first 64 (ids up to 512 bytes) were the only ones until longer ids failed to build;
    drawing more from the same generator keeps those 64 as they were (PCG64 draws in order).
    """
    count = max(64, words)
    drawn = np.random.default_rng(0x1AD1).integers(0, 2**63, count, dtype=np.uint64)
    return drawn * np.uint64(2) + np.uint64(1)


_WORD_MULTIPLIERS = word_multipliers(64)


def id_key(doc_id: object) -> int | str | None:
    """What a query id stands for: an ``int`` or numpy integer is its value (``np.int64(7)`` is
    7); a ``str`` is itself; another int is ``str(doc_id)`` (``True`` is ``"True"``, not 1);
    None for an object that is no id (None, a float, bytes, numpy's ``bool_``:
    :func:`lading.stores.base.is_id`), which no lookup finds, as ``in`` says."""
    if type(doc_id) is int or isinstance(doc_id, np.integer):
        return int(doc_id)
    if isinstance(doc_id, str):
        return doc_id
    return str(doc_id) if isinstance(doc_id, int) else None


def key_width(longest: int) -> int:
    """Bytes per key: the longest id rounded up to whole 8-byte words."""
    return max(8, -(-longest // 8) * 8)


def hash_words(words: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """64-bit hashes of keys given as an ``(n, width/8)`` uint64 matrix.

    A multiply-sum of the words with odd constants (wrapping mod 2**64), then murmur3's fmix64
    to spread every input bit over the output: 7 numpy calls for any width.
    """
    multipliers = _WORD_MULTIPLIERS if words.shape[1] <= 64 else word_multipliers(words.shape[1])
    h = (words * multipliers[: words.shape[1]]).sum(axis=1, dtype=np.uint64)
    h ^= _SEED
    h ^= h >> _SHIFT
    h *= _MUL  # wraps modulo 2**64, as intended
    h ^= h >> _SHIFT
    h *= _FIN
    h ^= h >> _SHIFT
    return h


def query_words(
    ids: Sequence[str | int], width: int
) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.bool_]]:
    """Keys of a batch of ids as uint64 words, and which ids can be in an index of ``width``.

    One spare word catches longer ids: they cannot match and are reported as not fitting
    (numpy would otherwise cut them down to ``width`` bytes, and maybe onto another id). An id
    holding a NUL does not fit either: keys are zero-padded, and no stored id holds one (sources
    refuse them), so ``"a\\x00"`` must not read as ``"a"``. An object that is no id
    (:func:`id_key` None) does not fit.
    """
    dtype = f"S{width + 8}"
    no_id: list[int] = []
    try:
        joined = "".join(ids)  # type: ignore[arg-type]  # TypeError unless all are str
        fixed = np.array(ids, dtype=dtype)  # numpy encodes ASCII itself, ~2x faster than encode
    except (UnicodeEncodeError, TypeError):
        keys = [id_key(i) for i in ids]
        texts = ["" if k is None else str(k) for k in keys]
        joined = "".join(texts)
        # a lone surrogate is no stored id: its bytes (surrogatepass) match nothing
        fixed = np.array([t.encode("utf-8", "surrogatepass") for t in texts], dtype=dtype)
        ids = texts
        no_id = [i for i, k in enumerate(keys) if k is None]
    words = fixed.view("<u8").reshape(len(ids), width // 8 + 1)
    fits: npt.NDArray[np.bool_] = words[:, -1] == 0
    if "\x00" in joined:
        fits &= np.fromiter(("\x00" not in str(i) for i in ids), bool, len(ids))
    if no_id:
        fits[no_id] = False
    return words[:, :-1], fits


SLOTS = 8  # uint64 slots per bucket: one 64-byte cache line
_LOAD = 2  # ids per bucket on average; P(a bucket of Poisson(2) overflows 8) ~ 0.1%
_LOW = np.uint64(0xFFFFFFFF)
_TAG_SHIFT = np.uint64(32)


def bucket_of(h: npt.NDArray[np.uint64], n_buckets: int) -> npt.NDArray[np.int64]:
    """Bucket of each hash in ``[0, n_buckets)`` (Lemire's multiply-shift, no modulo)."""
    return (((h & _LOW) * np.uint64(n_buckets)) >> _TAG_SHIFT).astype(np.int64)


def write_hash_index(
    directory: Path, words: npt.NDArray[np.uint64], row_dtype: np.dtype[Any]
) -> tuple[dict[str, Any], dict[str, dict[str, int]]]:
    """Write table and keys for unique keys ``words`` (row order); return meta and file entries."""
    count = len(words)
    if count >= 2**32 - 1:
        raise ValueError(f"{count} ids: the hash index stores row + 1 in 32 bits")
    n_buckets = max(1, -(-count // _LOAD))
    h = hash_words(words)
    bucket = bucket_of(h, n_buckets)
    tag = (h >> _TAG_SHIFT).astype(np.uint32)
    del h
    table = np.zeros((n_buckets, SLOTS), dtype=np.uint64)
    fill = np.zeros(n_buckets, dtype=np.int64)
    # ~75 bytes per id at the peak (table 32, order 8, bucket 8, rank 8, tag 4, temporaries):
    # no entry array (computed where it is stored), no copy of every row index on the first pass
    order = np.argsort(bucket, kind="stable")
    spill = 0
    while len(order):
        # rank each pending id among those aiming at the same bucket, in row order
        target = bucket[order]
        starts = np.flatnonzero(np.r_[True, target[1:] != target[:-1]])
        slot = np.arange(len(order)) - np.repeat(starts, np.diff(np.r_[starts, len(order)]))
        del starts
        slot += fill[target]
        fits = slot < SLOTS
        placed = order[fits]
        table[target[fits], slot[fits]] = (tag[placed].astype(np.uint64) << _TAG_SHIFT) | (
            placed.astype(np.uint64) + np.uint64(1)
        )
        fill += np.bincount(target[fits], minlength=n_buckets)
        pending = order[~fits]
        del target, slot, fits, placed, order
        if len(pending):
            spill += 1
            bucket[pending] = (bucket[pending] + 1) % n_buckets
            pending = pending[np.argsort(bucket[pending], kind="stable")]
        order = pending
    del bucket, tag, fill  # before writing: the peak is the table plus the keys
    files = {
        "index.table": write_file(directory / "index.table", np.ascontiguousarray(table, "<u8")),
        "index.keys": write_file(directory / "index.keys", np.ascontiguousarray(words, "<u8")),
    }
    meta = {
        "kind": "hash",
        "row_dtype": np.dtype(row_dtype).str,
        "width": int(words.shape[1] * 8) if words.ndim == 2 else 8,
        "buckets": n_buckets,
        "max_spill": spill,
    }
    return meta, files


def bound_finder(
    name: str, args: tuple[Any, ...], damaged: Callable[[str], StoreFormatError]
) -> Callable[[Sequence[str | int]], tuple[bytearray, int]] | None:
    """The C helper's lookup ``name`` with ``args`` after each batch (None without the helper);
    a file the helper finds damaged is raised as ``damaged(its message)``."""
    c = native.NATIVE
    if c is None:
        return None
    lookup = getattr(c, name)

    def find(ids: Sequence[str | int]) -> tuple[bytearray, int]:
        try:
            found: tuple[bytearray, int] = lookup(ids, *args)
        except c.Damaged as e:
            raise damaged(str(e)) from None
        return found

    return find


class HashIndex:
    """Reads a table written by :func:`write_hash_index`."""

    def __init__(self, directory: Path, meta: dict[str, Any]) -> None:
        self.width = int(meta["width"])
        self.max_spill = int(meta["max_spill"])
        self._buckets = int(meta["buckets"])
        self._table_file = MappedFile(directory / "index.table", True)
        self._keys_file = MappedFile(directory / "index.keys", True)
        table, keys = len(self._table_file.buffer), len(self._keys_file.buffer)
        if (
            self.width < 8
            or self.width % 8
            or table != self._buckets * SLOTS * 8
            or keys % self.width
        ):
            raise StoreFormatError(
                f"{directory}: index.table ({table} bytes) and index.keys ({keys} bytes) do not "
                f"match {self._buckets} buckets of {SLOTS} slots and keys of {self.width} bytes; "
                "rebuild the store"
            )
        if not 0 <= self.max_spill < self._buckets:  # a build spills at most buckets - 1 times
            raise StoreFormatError(
                f"{directory}: the hash index's max_spill {self.max_spill} is not below its "
                f"{self._buckets} buckets (a lookup would go round the table for ever); "
                "rebuild the store"
            )
        self._table = self._table_file.array("<u8").reshape(self._buckets, SLOTS)
        self._keys = self._keys_file.array("<u8").reshape(-1, self.width // 8)

    def _damaged(self, problem: str) -> StoreFormatError:
        return StoreFormatError(f"{self._table_file.path}: {problem}; rebuild the store")

    def native_finder(self) -> Callable[[Sequence[str | int]], tuple[bytearray, int]] | None:
        """The C helper's lookup bound to this table (None without the helper): a batch of ids
        -> (int64 rows as bytes, -1 where absent; the first absent position or -1)."""
        table, keys = self._table_file.buffer, self._keys_file.buffer
        factors = word_multipliers(self.width // 8).tobytes()
        args = (table, keys, self.width, self._buckets, self.max_spill, factors)
        return bound_finder("hash_rows", args, self._damaged)

    def rows(self, ids: Sequence[str | int]) -> npt.NDArray[np.int64]:
        """Rows of a batch of ids in request order; -1 for an absent id."""
        words, fits = query_words(ids, self.width)
        h = hash_words(words)
        bucket = bucket_of(h, self._buckets)
        tag = h >> _TAG_SHIFT
        # fast path, one pass for the whole batch: the first slot whose tag matches
        entries = self._table[bucket]
        candidates = (entries >> _TAG_SHIFT) == tag[:, None]
        first = candidates.argmax(axis=1)
        picked = np.take_along_axis(entries, first[:, None], axis=1)[:, 0]
        rows = (picked & _LOW).astype(np.int64) - 1  # -1 (empty) reads the last key: masked
        # slot 0 where no tag matched: not a candidate (its key may still be the query's, in a
        # damaged table, and the C helper would not see it)
        rows[(picked >> _TAG_SHIFT) != tag] = -1
        if int(rows.max(initial=-1)) >= len(self._keys):  # a damaged slot with the query's tag
            raise self._damaged(f"a slot names a row past the {len(self._keys)} keys")
        ok = fits & (rows >= 0) & (self._keys[rows] == words).all(axis=1)
        out = np.where(ok, rows, -1)
        if ok.all():
            return out
        return self._slow(out, np.flatnonzero(~ok & fits), words, bucket, tag)

    def _slow(
        self,
        out: npt.NDArray[np.int64],
        active: npt.NDArray[np.int64],
        words: npt.NDArray[np.uint64],
        bucket: npt.NDArray[np.int64],
        tag: npt.NDArray[np.uint64],
    ) -> npt.NDArray[np.int64]:
        """Every candidate of every bucket an id may have spilled to: absent ids end here."""
        for _ in range(self.max_spill + 1):
            if not len(active):
                break
            entries = self._table[bucket[active]]  # (k, 8): one cache line per id
            hit_q, hit_s = np.nonzero((entries >> _TAG_SHIFT) == tag[active, None])
            rows = (entries[hit_q, hit_s] & _LOW).astype(np.int64) - 1
            good = rows >= 0
            hit_q, rows = hit_q[good], rows[good]
            if len(rows) and int(rows.max()) >= len(self._keys):
                raise self._damaged(f"a slot names a row past the {len(self._keys)} keys")
            match = (self._keys[rows] == words[active[hit_q]]).all(axis=1)
            out[active[hit_q[match]]] = rows[match]
            # only an id whose bucket is full can live further on
            full = (entries[:, -1] & _LOW) != 0
            active = active[full & (out[active] < 0)]
            bucket[active] = (bucket[active] + 1) % self._buckets
        return out
