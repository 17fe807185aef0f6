"""Which ranges of an epoch a remote LM loader sends through the node cache, and which around it.

An epoch of any LM mode reads each range of ``tokens.bin`` once (a window's pieces), so a
range's next read is the next epoch's. A cap under the corpus cannot keep what it fetches
until then, but for the ranges the next epoch reads first: those, up to a budget of the cap,
go through the node cache (and this epoch's own first reads, which the plan before kept);
every other range is fetched around it for the loader that reads it
(:mod:`lading.remote.cache.around`). Ranges are token positions of one file, as numpy arrays:
an epoch of a 4B-token corpus is ~250k batches.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from lading.remote.ranges import Need

Kept = tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]  # starts, the largest end up to each


def by_start(
    *ranges: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]],
) -> Kept:
    """``ranges`` as ``(starts, the largest end up to each)``, sorted by start: what
    :func:`split_kept` looks ranges up in."""
    a, b = (np.concatenate(x) for x in zip(*ranges))
    order = np.argsort(a, kind="stable")
    return a[order], np.maximum.accumulate(b[order]) if len(a) else b


def split_kept(needs: list[Need], kept: Kept, size: int) -> tuple[list[Need], list[Need]]:
    """``needs`` (byte ranges of one file) as (those no kept range overlaps by more than its
    first or last token: fetched around the cache; the others: through it)."""
    starts, ends = kept
    if not len(starts):
        return needs, []
    lo = np.array([n.start for n in needs], dtype=np.int64) // size + 1
    hi = np.array([n.end for n in needs], dtype=np.int64) // size - 1
    at = np.searchsorted(starts, hi, side="left") - 1  # the last kept range starting before hi
    inside = ((at >= 0) & (ends[np.maximum(at, 0)] > lo)).tolist()
    return [n for n, k in zip(needs, inside) if not k], [n for n, k in zip(needs, inside) if k]
