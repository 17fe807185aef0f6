"""A shuffle of windows that keeps locality: blocks of consecutive windows, each read whole
once an epoch, windows shuffled across a buffer of blocks (``Windows(..., block_tokens=B)``).

The exact global shuffle of windows (:func:`~lading.loading.order.feistel_permutation` over
all ``n``) reads each window from anywhere in the corpus: from object storage, one GET of one
window's bytes a window. Mosaic's ``py1e`` and litdata's chunk shuffles trade randomness for
large reads; this is that trade, as an option, with the same exact resume and ``len()`` as
the global shuffle (it is another bijection of the epoch's positions, computed per index):

- the epoch's ``n`` windows are cut into blocks of ``per_block`` consecutive windows (the
  last one shorter), and the full blocks permuted by ``(seed, epoch)``, the short one last;
- positions ``[g * buffer * per_block, (g + 1) * buffer * per_block)`` hold the windows of
  permuted blocks ``g * buffer …`` (a *buffer* of blocks), shuffled among themselves by
  ``(seed, epoch, g)``.

So the windows read together come from ``buffer`` blocks at a time: each block is one range
of ``tokens.bin`` (over the stored document order, ``shuffle_documents=False``), fetched once
an epoch; a window is as likely to follow any window of its buffer, and the buffers' order
and content change every epoch. What it costs in randomness is measured in
``benchmarks/bench_remote_lm.py`` (the windows' spread within a batch).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from lading.loading.order import feistel_keyed, feistel_permutation, round_keys_of

_BLOCKS, _BUFFER = 1, 2  # second key of the blocks' order and of a buffer's window order


def block_order(
    positions: npt.NDArray[np.int64], n: int, per_block: int, buffer: int, seed: int, epoch: int
) -> npt.NDArray[np.int64]:
    """The window at each of ``positions`` (of ``[0, n)``) under the block shuffle above.

    Every buffer's windows are permuted under the buffer's own round keys, all buffers at once
    (one Feistel pass over the positions, :func:`~lading.loading.order.feistel_keyed`): an
    epoch's plan costs O(positions) whatever the number of buffers (a buffer at a time, a
    mask over every position a buffer, took 4.5 s for 400k windows of 12-window blocks)."""
    at = np.asarray(positions, dtype=np.int64)
    full = n // per_block  # full blocks; a short one (if any) is block ``full``, kept last
    span = buffer * per_block  # positions a buffer holds
    group, offset = np.divmod(at, span)
    inner = np.empty_like(at)
    last = (n - 1) // span  # the last buffer may be short: a permutation of its own size
    short = group == last if n - last * span < span else np.zeros(len(at), dtype=bool)
    if short.any():
        size = n - last * span
        inner[short] = feistel_permutation(offset[short], size, seed, epoch, _BUFFER, last)
    rest = ~short
    if rest.any():
        inner[rest] = _buffers(offset[rest], group[rest], span, seed, epoch)
    slot, within = np.divmod(inner, per_block)
    block = slot + group * buffer  # the permuted block's place
    if full:
        real = block < full
        block[real] = feistel_permutation(block[real], full, seed, epoch, _BLOCKS)
    return block * per_block + within


def _buffers(
    offset: npt.NDArray[np.int64], group: npt.NDArray[np.int64], span: int, seed: int, epoch: int
) -> npt.NDArray[np.int64]:
    """Each ``offset`` permuted within its full buffer ``group`` (of ``span`` windows)."""
    if len(offset) <= 64:  # a batch: Python integers, a buffer at a time (faster there)
        out = np.empty_like(offset)
        for g in np.unique(group).tolist():
            mine = group == g
            out[mine] = feistel_permutation(offset[mine], span, seed, epoch, _BUFFER, g)
        return out
    groups, which = np.unique(group, return_inverse=True)
    keys = np.array([round_keys_of(seed, epoch, _BUFFER, g) for g in groups.tolist()])
    return feistel_keyed(offset, span, keys.astype(np.uint64).T[:, which])
