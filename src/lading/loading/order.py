"""Epoch orders: every random draw of a loader comes from ``(seed, salt, *key)``, salts named.

A loader must make the same draw on every rank and in every DataLoader worker, so nothing here
reads global random state: each draw seeds a fresh ``numpy`` generator from the run's seed, a
:class:`Salt` naming what is drawn, and the integers that place the draw (epoch, reader,
chunk, …). Two draws with different salts are independent even when the rest of their keys
agree, which magic numbers scattered over six modules could not promise.
"""

from __future__ import annotations

import functools
from enum import IntEnum
from typing import Any

import numpy as np
import numpy.typing as npt


class Salt(IntEnum):
    """What a random draw is for; part of its seed. Never renumber: checkpoints depend on it."""

    SAMPLE_ORDER = 1  # map-style datasets: the epoch's permutation of items
    DOCUMENT_ORDER = 2  # language models: the epoch's permutation of documents
    SEQ_LENGTHS = 3  # language models: BPTT lengths of an epoch's batches
    WINDOW_ORDER = 4  # language models: Feistel round keys of the window order
    PIECE_ORDER = 5  # parquet: the epoch's order of row groups
    CHUNK_ORDER = 6  # parquet: row order inside one shuffled chunk of one reader
    NEGATIVES = 7  # IR training groups: negatives of one item in one epoch
    HOLDOUT = 8  # a split of items fixed for the whole run (validation documents)
    ROW_ORDER = 9  # training loops: order of rows inside a rank's batch
    RESEED = 10  # training loops: a rank's fresh dropout stream after an elastic resume
    PACK_ORDER = 11  # packed language models: order of equal-length documents before packing
    MIXTURE_ORDER = 12  # token mixtures: which windows of a corpus a mixture epoch takes


def generator(seed: int, salt: Salt, *key: int) -> np.random.Generator:
    """A generator for the draw ``salt`` at ``key`` (e.g. epoch, reader, chunk) of run ``seed``."""
    return np.random.default_rng([int(seed), int(salt), *(int(k) for k in key)])


def permutation(
    n: int, seed: int, salt: Salt, *key: int, shuffle: bool = True
) -> npt.NDArray[np.int64]:
    """``0 … n-1`` permuted by the draw ``(seed, salt, *key)``, or in order without ``shuffle``."""
    if not shuffle:
        return np.arange(n, dtype=np.int64)
    return generator(seed, salt, *key).permutation(n).astype(np.int64)


def epoch_order(n: int, seed: int, epoch: int, shuffle: bool = True) -> npt.NDArray[np.int64]:
    """The global order of ``n`` items of a map-style dataset in ``epoch``: any world size."""
    return permutation(n, seed, Salt.SAMPLE_ORDER, epoch, shuffle=shuffle)


_MASK32 = np.uint64(0xFFFFFFFF)
FEISTEL_ROUND = "fmix32"  # the round function (:func:`_mixed`), in LM states: another, other orders


@functools.lru_cache(maxsize=4096)
def _round_keys(seed: int, *key: int) -> tuple[int, int, int, int]:
    """The four round keys of the Feistel network keyed by ``(seed, *key)``, kept: a batch
    asks for the same few keys again and again (a mixture: one per corpus and pass)."""
    keys = generator(seed, Salt.WINDOW_ORDER, *key).integers(0, 2**32, 4, dtype=np.uint64)
    a, b, c, d = (int(k) for k in keys)
    return a, b, c, d


def _mixed(right: npt.NDArray[np.uint64], key: npt.NDArray[np.uint64] | np.uint64) -> Any:
    """The Feistel round function: ``right`` and the round's ``key`` through MurmurHash3's
    32-bit finaliser, whose every output bit depends on every input bit (the rounds keep the
    low bits: a round that only multiplied left them a function of ``right``'s low bits, and
    orders of a few dozen positions came out near the identity, or the same two epochs)."""
    f = (right * np.uint64(0x9E3779B1) + key) & _MASK32
    f = ((f ^ (f >> np.uint64(16))) * np.uint64(0x85EBCA6B)) & _MASK32
    f = ((f ^ (f >> np.uint64(13))) * np.uint64(0xC2B2AE35)) & _MASK32
    return f ^ (f >> np.uint64(16))


def _domain(n: int) -> tuple[int, int]:
    """(half, mask): the Feistel network permutes ``[0, 4**half)``, the smallest >= n."""
    bits = max(2, (max(n, 2) - 1).bit_length())
    bits += bits % 2
    return bits // 2, (1 << (bits // 2)) - 1


def feistel_value(value: int, n: int, seed: int, *key: int) -> int:
    """:func:`feistel_permutation` at one index, in Python integers: a few microseconds, where
    numpy's per-call overhead costs a few hundred (the same arithmetic, the same result)."""
    half, mask = _domain(n)
    keys = _round_keys(int(seed), *(int(k) for k in key))
    for _ in range(1000):  # each pass leaves a value outside with probability < 3/4
        left, right = value >> half, value & mask
        for k in keys:
            f = (right * 0x9E3779B1 + k) & 0xFFFFFFFF  # the round function: _mixed
            f = ((f ^ (f >> 16)) * 0x85EBCA6B) & 0xFFFFFFFF
            f = ((f ^ (f >> 13)) * 0xC2B2AE35) & 0xFFFFFFFF
            left, right = right, (left ^ f ^ (f >> 16)) & mask
        value = (left << half) | right
        if value < n:
            return value
    raise RuntimeError("cycle walking did not converge")  # pragma: no cover


def feistel_permutation(
    index: npt.NDArray[np.int64], n: int, seed: int, *key: int
) -> npt.NDArray[np.int64]:
    """A keyed bijection of ``[0, n)`` evaluated at ``index``: shuffles without an n-array.

    A 4-round Feistel network permutes ``[0, 4**k)`` (the smallest power of 4 >= n); values
    landing outside ``[0, n)`` are fed through again (cycle walking) until they land inside.
    Orders of billions of windows therefore cost nothing until a window is asked for. A batch
    of indices (up to 64) is permuted in Python integers (:func:`feistel_value`), faster there
    than numpy; more, in numpy.
    """
    if len(index) <= 64:
        values = [feistel_value(int(i), n, seed, *key) for i in index.tolist()]
        return np.array(values, dtype=np.int64)
    return feistel_keyed(index, n, np.array(round_keys_of(seed, *key), dtype=np.uint64))


def round_keys_of(seed: int, *key: int) -> tuple[int, int, int, int]:
    """The four round keys :func:`feistel_permutation` uses for ``(seed, *key)``."""
    return _round_keys(int(seed), *(int(k) for k in key))


def feistel_keyed(
    index: npt.NDArray[np.int64], n: int, keys: npt.NDArray[np.uint64]
) -> npt.NDArray[np.int64]:
    """:func:`feistel_permutation` of ``[0, n)`` at ``index``, in numpy, under the round keys
    ``keys`` (4, from :func:`round_keys_of`) or, ``[4, len(index)]``, each index under its own
    (``keys[:, i]``): many permutations of one size evaluated side by side (the locality
    shuffle's buffers) cost one pass over the indices, not one a permutation."""
    half_, mask_ = _domain(n)
    half, mask = np.uint64(half_), np.uint64(mask_)
    result = np.asarray(index).astype(np.uint64)
    todo = np.arange(len(result))
    for _ in range(1000):  # each pass leaves a value outside with probability < 3/4
        if not len(todo):
            return result.astype(np.int64)
        x = result[todo]
        round_keys = keys if keys.ndim == 1 else keys[:, todo]
        left, right = x >> half, x & mask
        for k in round_keys:
            left, right = right, (left ^ _mixed(right, k)) & mask
        x = (left << half) | right
        result[todo] = x
        todo = todo[x >= np.uint64(n)]
    raise RuntimeError("cycle walking did not converge")  # pragma: no cover
