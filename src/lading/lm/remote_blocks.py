"""Whole blocks a reader holds under the locality shuffle, read once from the node cache.

Under ``Windows(..., block_tokens=B)`` a batch's windows come from the ``block_buffer`` blocks
of its buffer, and the next ~``per_block * block_buffer / batch`` batches read the same
blocks. Read a batch at a time, each batch looked its ranges up in the node cache, copied
them and checked the regions' generations: two ledger transactions and a copy a batch for
bytes the previous batch had just copied (0.036 s of client CPU a million tokens at a 10 %
cap, where litdata, which holds its chunks, spends 0.025). :class:`HeldBlocks` reads each block
whole, once, at the step of the first batch that needs it (one read of the cache, checked as
every read is) and serves the batches after it from that copy, as Mosaic's and litdata's
readers serve from the shards they hold.

A reader (one building thread: the loader's read-ahead thread, or the main thread with
``read_ahead=0``; each DataLoader worker its own) holds at most ``2 * block_buffer + 2``
blocks' tokens, the least recently used ranges dropped first: the blocks of a buffer, the
next buffer's where a batch spans two, and a block cut in two by a shard's end. Counted in
tokens, not ranges: a block of a ``documents=`` split is one range a run of its documents in
``tokens.bin`` (one a document, where every other document is left out), and a count of
ranges dropped the blocks after each batch (a review: 3.6x the bytes used fetched, 1.5x the
GETs of the exact shuffle, at a 5 % cap). Held arrays are never written, so a view of one
that a mode hands out stays what it was.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import numpy as np

from lading.lm.remote import RemoteTokens

Ranges = Any  # [k, 3] int64 rows: (file, first token, end token)


class _Held:
    """One thread's held ranges (least recently used first) and their tokens."""

    def __init__(self) -> None:
        self.ranges: OrderedDict[tuple[int, int, int], np.ndarray] = OrderedDict()
        self.tokens = 0


class HeldBlocks:
    """The blocks each building thread of one loader holds (see the module doc): ``buffer``
    blocks of ``block_tokens`` a buffer."""

    def __init__(self, buffer: int, block_tokens: int) -> None:
        self.capacity = (2 * max(1, buffer) + 2) * (block_tokens + 1)  # tokens
        self._local = threading.local()  # a thread's own: no lock, nothing shared

    def _held(self) -> _Held:
        held = getattr(self._local, "held", None)
        if held is None:
            held = self._local.held = _Held()
        return held

    def fetched(
        self, remote: dict[int, RemoteTokens], blocks: Ranges, step: int
    ) -> dict[int, tuple[list[int], list[int], list[np.ndarray]]]:
        """``id(tokens) -> (starts, ends, arrays)`` of ``blocks`` (the whole blocks a batch
        reads, ``(file, a, b)`` rows), sorted by start: the held ones as they are, the others
        read now (one call of each file's cache, at ``step``) and held."""
        mine = self._held()
        held = mine.ranges
        rows = sorted({(int(p), int(a), int(b)) for p, a, b in np.asarray(blocks).tolist()})
        missing: dict[int, list[tuple[int, int, int]]] = {}
        for row in rows:
            if row in held:
                held.move_to_end(row)
            else:
                missing.setdefault(row[0], []).append(row)
        got: dict[tuple[int, int, int], np.ndarray] = {}
        for part, wanted in missing.items():
            arrays = remote[part].read([(a, b) for _, a, b in wanted], step)
            got.update(zip(wanted, arrays))
        out: dict[int, tuple[list[int], list[int], list[np.ndarray]]] = {}
        for row in rows:
            array = got.get(row)
            if array is None:
                array = held[row]
            else:
                held[row] = array
                mine.tokens += row[2] - row[1]
            starts, ends, arrays = out.setdefault(id(remote[row[0]]), ([], [], []))
            starts.append(row[1])
            ends.append(row[2])
            arrays.append(array)
        keep = sum(b - a for _, a, b in rows)  # this batch's ranges, the most recent: they stay
        while mine.tokens > max(self.capacity, keep):
            (_, a, b), _ = held.popitem(last=False)
            mine.tokens -= b - a
        return out
