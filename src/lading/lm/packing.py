"""Packing documents into fixed windows without cutting them: best-fit decreasing.

A window holds ``capacity = seq_len + 1`` tokens (inputs are its first ``seq_len``, labels its
last ``seq_len``, as in windows mode). Documents that fit are never cut: they are packed whole,
back to back, and what a window cannot fill is padding. A document longer than a window is
split into pieces of ``capacity`` tokens that overlap by one token (starts ``0, seq_len,
2 * seq_len …``), so every (input, target) pair inside it is predicted exactly once; its last,
shorter piece is packed like a document.

Best-fit decreasing (OLMo-core's packer, the classic bin-packing heuristic): pieces sorted
longest first, each put into the open window whose free room is the smallest that still holds
it, or a new window. Pieces of equal length are taken in an order drawn from ``seed``
(:data:`Salt.PACK_ORDER`), so the packing depends on the seed and the documents only; each epoch
then reads the windows in its own order. Everything kept is a few integers per piece: memory
is O(documents + tokens / seq_len), never O(tokens).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from lading.lm.narrow import all_documents, narrow
from lading.loading.order import Salt, permutation

CHUNK = 1 << 16  # pieces turned into Python ints at a time (not a list of every piece)


@dataclass(frozen=True)
class Packing:
    """Windows of pieces: window ``w`` holds pieces ``ptr[w] … ptr[w+1]-1`` in order; piece
    ``p`` is ``length[p]`` tokens of document ``document[p]`` (an index into the packed
    document list) from offset ``start[p]``. Each array has the narrowest integer dtype that
    holds its values (:func:`~lading.lm.narrow.narrow`): read them as ``int(a[i])`` or
    ``a.astype(np.int64)`` before arithmetic."""

    capacity: int
    ptr: npt.NDArray[np.signedinteger[Any]]
    document: npt.NDArray[np.signedinteger[Any]]
    start: npt.NDArray[np.signedinteger[Any]]
    length: npt.NDArray[np.signedinteger[Any]]

    @property
    def windows(self) -> int:
        return len(self.ptr) - 1

    @property
    def tokens(self) -> int:
        """Token slots holding document tokens (a token shared by two pieces counts twice)."""
        return int(self.length.sum())

    def stats(self) -> dict[str, Any]:
        """Windows, pieces, documents split, tokens and padding (the fraction of slots)."""
        slots = self.windows * self.capacity
        padding = slots - self.tokens
        return {
            "windows": self.windows,
            "capacity": self.capacity,
            "pieces": len(self.length),
            "split_documents": int(np.unique(self.document[self.start > 0]).size),
            "tokens": self.tokens,
            "padding": padding,
            "padding_fraction": padding / slots if slots else 0.0,
        }


def split_pieces(
    lengths: npt.NDArray[np.int64], capacity: int
) -> tuple[
    npt.NDArray[np.signedinteger[Any]],
    npt.NDArray[np.signedinteger[Any]],
    npt.NDArray[np.signedinteger[Any]],
]:
    """(document, start, length) of every piece: documents longer than ``capacity`` are cut
    into pieces of ``capacity`` tokens overlapping by one; empty documents have none. Each in
    its narrowest dtype (:func:`~lading.lm.narrow.narrow`)."""
    if capacity < 2:
        raise ValueError(f"a packed window needs at least 2 tokens, got capacity {capacity}")
    stride = capacity - 1
    lengths = np.asarray(lengths, dtype=np.int64)
    count = np.where(lengths > capacity, -(-(lengths - 1) // stride), (lengths > 0).astype(int))
    document = np.repeat(all_documents(len(lengths)), count)
    first = np.cumsum(count) - count
    start = np.arange(len(document), dtype=np.int64)
    start -= np.repeat(first, count)
    start *= stride
    del count, first
    length = narrow(np.minimum(capacity, lengths[document] - start))
    return document, narrow(start), length


def pack(lengths: npt.ArrayLike, capacity: int, seed: int) -> Packing:
    """Best-fit-decreasing packing of documents of ``lengths`` into windows of ``capacity``."""
    document, start, length = split_pieces(np.asarray(lengths, dtype=np.int64), capacity)
    tie = permutation(len(length), seed, Salt.PACK_ORDER)
    order = tie[np.argsort(-length[tie], kind="stable")]  # longest first, ties by the seed
    del tie
    bin_of = np.empty(len(length), dtype=np.int32 if len(length) < 2**31 else np.int64)
    free: dict[int, list[int]] = {}  # room left -> open windows with that room
    rooms: list[int] = []  # the keys of ``free``, sorted
    bins = 0
    for piece, size in _pairs(order, length[order]):
        at = bisect.bisect_left(rooms, size)
        if at < len(rooms):  # the best fit: the smallest room that holds the piece
            room = rooms[at]
            target = free[room].pop()
            if not free[room]:
                del free[room]
                rooms.pop(at)
        else:
            room, target, bins = capacity, bins, bins + 1
        bin_of[piece] = target
        left = room - size
        if left > 0:
            if left not in free:
                free[left] = []
                bisect.insort(rooms, left)
            free[left].append(target)
    # pieces of a window in packing order (longest first); a stable sort keeps it
    by_bin = order[np.argsort(bin_of[order], kind="stable")]
    ptr = np.zeros(bins + 1, dtype=np.int64)
    np.cumsum(np.bincount(bin_of, minlength=bins), out=ptr[1:])
    del bin_of, order
    return Packing(
        capacity,
        narrow(ptr, np.int32),
        narrow(document[by_bin], np.int32),
        narrow(start[by_bin]),
        narrow(length[by_bin]),
    )


def _pairs(
    order: npt.NDArray[np.int64], sizes: npt.NDArray[np.signedinteger[Any]]
) -> Iterator[tuple[int, int]]:
    """(piece, size) of ``order`` and ``sizes`` as Python ints, converted ``CHUNK`` at a time:
    a list of every piece's ints (~70 B each) is freed but kept by the allocator after."""
    for at in range(0, len(order), CHUNK):
        yield from zip(order[at : at + CHUNK].tolist(), sizes[at : at + CHUNK].tolist())
