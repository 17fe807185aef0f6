"""The token ranges batches read, joined as a read of the node cache takes them: numpy over a
whole plan at once (an epoch of a 4B-token corpus is ~250k batches), no Python object a range.

:func:`joined` is one batch's ranges with overlapping and touching ones joined (what
:meth:`~lading.lm.remote_reads.RemoteReads.build` reads), :func:`joined_many` the same for
every batch of a plan, and :func:`first_reads` the batches that read a held block first under
the locality shuffle (the plan's and the window's one read of it for each reader).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

Ranges = Any  # [k, 3] int64 rows: (file, first token, end token)


def joined_many(
    which: npt.NDArray[np.int64], a: npt.NDArray[np.int64], b: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """:func:`joined` of each batch's ranges ``[a, b)`` (``which``: the batch of each) at once:
    the batch, start and end of each joined range, by batch then start."""
    if not len(which):
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    order = np.lexsort((b, a, which))
    which, a, b = which[order], a[order], b[order]
    fresh = np.concatenate([[True], which[1:] != which[:-1]])  # a batch's first range
    # a running maximum of the ends within each batch: each batch's ranges moved past the
    # previous batch's (by the spans before it), so no batch's reach runs into the next
    group = np.cumsum(fresh) - 1
    low = a[fresh]
    span = np.maximum.reduceat(b, np.flatnonzero(fresh)) - low + 1
    shift = np.concatenate([[0], np.cumsum(span)[:-1]]) - low
    reach = np.maximum.accumulate(b + shift[group]) - shift[group]
    new = fresh.copy()
    new[1:] |= a[1:] > reach[:-1]
    last = np.concatenate([np.flatnonzero(new)[1:] - 1, [len(a) - 1]])
    return which[new], a[new], reach[last]


def first_reads(
    which: npt.NDArray[np.int64], a: npt.NDArray[np.int64], b: npt.NDArray[np.int64], readers: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Of the batches ``which`` reading each block ``[a, b)``, the first ``readers`` (a held
    block is read at the first batch of each reader, DataLoader workers taking batches in
    turn): the batch, start and end of each read, by block then batch."""
    if not len(which):
        return which, a, b
    order = np.lexsort((which, b, a))
    which, a, b = which[order], a[order], b[order]
    fresh = np.concatenate([[True], (a[1:] != a[:-1]) | (b[1:] != b[:-1])])
    first = np.maximum.accumulate(np.where(fresh, np.arange(len(a)), 0))
    keep = np.arange(len(a)) - first < readers
    return which[keep], a[keep], b[keep]


def joined(ranges: Ranges) -> tuple[list[int], list[int]]:
    """The ``(corpus, a, b)`` rows' ranges sorted, overlapping and touching ones joined: the
    starts and ends of what one batch reads of a corpus."""
    if not len(ranges):
        return [], []
    order = np.lexsort((ranges[:, 2], ranges[:, 1]))
    a, b = ranges[order, 1], ranges[order, 2]
    reach = np.maximum.accumulate(b)
    new = np.concatenate([[True], a[1:] > reach[:-1]])
    last = np.concatenate([np.flatnonzero(new)[1:] - 1, [len(a) - 1]])
    return a[new].tolist(), reach[last].tolist()
