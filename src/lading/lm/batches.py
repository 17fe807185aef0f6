"""How a planned segment of an LM epoch becomes batches: stream rows read in chunks, one stream
batch at a time (after an elastic resume, or in a DataLoader worker), or a batch of windows.

Every batch is a view of an array filled for it (or for a chunk of batches) that the loader never
writes again while a batch of it is alive: the caller owns what it is handed, as with a
DataLoader. The modes plan (:mod:`lading.lm.modes`); these functions read; the one loader
counts what it hands out.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import numpy as np
import numpy.typing as npt
import torch

from lading.lm.boundaries import IGNORE_INDEX, DocumentBatch, document_batch
from lading.lm.segment import LMSegment
from lading.lm.windows import WindowReader

Batch = tuple[torch.Tensor, torch.Tensor] | DocumentBatch


def chunk_view(view: npt.NDArray[np.int64]) -> torch.Tensor:
    """A tensor over ``view``, a slice of an array the loader filled once and never reuses
    (a chunk of stream, or one batch's windows): the caller owns it."""
    return torch.from_numpy(view)


def chunked_streams(
    seg: LMSegment, first: int, first_stream: int, chunk: tuple[int, int]
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Batches ``first …`` of whole-epoch streams ``first_stream …`` (one per row), read
    ``chunk`` (rows, columns) at a time."""
    rows, length, stream = chunk[0], seg.plan.each, seg.stream
    assert stream is not None
    buf = np.empty((0, 0), dtype=np.int64)  # the chunk being read; none yet
    # the labels: the chunk shifted by one column, a copy of its own. A y over the chunk
    # itself would end on the next batch's first column (y[y == eos] = -100 changed the next
    # batch's x, and only without workers)
    ybuf = np.empty((0, 0), dtype=np.int64)
    spare: npt.NDArray[np.int64] | None = None  # the chunk before it, to recycle if free
    yspare: npt.NDArray[np.int64] | None = None  # its labels
    # a chunk is free when its reference count is that of an array held by one local name
    # here (measured, not assumed: the count's baseline differs between Python versions);
    # every live batch adds one (its tensor keeps a view whose base is the chunk). Recycling
    # a free chunk spares the page faults of a new one
    probe = np.empty(0, dtype=np.int64)
    free = sys.getrefcount(probe)
    offset = seg.offset(first)  # stream position of the next batch
    base, filled = offset, 0  # buffer column 0 holds stream position `base`
    for seq in seg.seqs[first : seg.batches]:
        if offset - base + seq + 1 > filled:
            # batches handed out are views of their chunk: a chunk is written again only
            # when no batch of it is alive any more (the caller kept none), else a new one
            keep = filled - (offset - base) if filled else 0
            fresh = spare if spare is not None and sys.getrefcount(spare) == free else None
            if fresh is None:
                fresh = np.empty(chunk, dtype=np.int64)
            yfresh = yspare if yspare is not None and sys.getrefcount(yspare) == free else None
            if yfresh is None:
                yfresh = np.empty(chunk, dtype=np.int64)
            if keep > 0:
                fresh[:, :keep] = buf[:, offset - base : filled]
            spare, buf = (buf if buf.size else None), fresh
            yspare, ybuf = (ybuf if ybuf.size else None), yfresh
            fresh = yfresh = None  # only `buf`, `ybuf` and the spares may refer to chunks now
            want = min(chunk[1], length + 1 - offset)
            for row in range(rows):
                start = (first_stream + row) * length + offset + keep
                stream.read(start, buf[row, keep:want])
            ybuf[:, : want - 1] = buf[:, 1:want]
            base, filled = offset, want
        col = offset - base
        offset += seq
        # views of this chunk and of its labels, which no later batch overwrites or shares
        # (numpy slicing + from_numpy measured faster than slicing a torch view)
        yield chunk_view(buf[:, col : col + seq]), chunk_view(ybuf[:, col : col + seq])


def stream_batch(
    seg: LMSegment, batch: int, first_stream: int, x: npt.NDArray[np.int64]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Batch ``batch`` of ``seg``'s streams ``first_stream …``, read row by row into ``x``
    (``[rows, seq + 1]``); after an elastic resume, through the segment's base runs."""
    seq, offset, length, stream = seg.seqs[batch], seg.offset(batch), seg.plan.each, seg.stream
    assert stream is not None
    y = None if seg.whole else np.empty_like(x)
    for row in range(len(x)):
        begin = (first_stream + row) * length + offset
        if y is None:  # the whole epoch: stream positions are epoch-stream positions
            stream.read(begin, x[row, : seq + 1])
            continue
        filled = 0  # after an elastic resume the next position is not always the next token
        while filled < seq:  # at most one wrap: the fill is shorter than one stream
            at = (begin + filled) % len(seg.base)
            runs = seg.base.slice(at, at + seq - filled)
            for start, stop in zip(runs.starts.tolist(), runs.stops.tolist()):
                stream.read(start, x[row, filled : filled + stop - start])
                stream.read(start + 1, y[row, filled : filled + stop - start])
                filled += stop - start
    if y is None:
        return chunk_view(x[:, :seq]), chunk_view(x[:, 1 : seq + 1])
    return chunk_view(x[:, :seq]), chunk_view(y[:, :seq])


def window_batch(
    windows: WindowReader,
    order: npt.NDArray[np.int64],
    x: npt.NDArray[np.int64],
    seq_len: int,
    *,
    packed: bool,
    boundaries: bool,
    eod_mask_loss: bool,
) -> Batch:
    """The windows ``order`` (one per row) of ``seq_len + 1`` tokens, read into ``x``: an
    ``(x, y)`` pair, or a :class:`DocumentBatch` with ``boundaries``. Labels nobody should
    score (padding of packed windows; with ``eod_mask_loss`` a next document's first token)
    are ``IGNORE_INDEX``, which ``cross_entropy`` skips."""
    rows, width = len(order), seq_len + 1
    padded = boundaries or packed  # packed windows end in padding
    document_ids = np.empty((rows, width), dtype=np.int64) if padded else None
    windows.read_many(order, x[:rows, :width], document_ids)
    if boundaries:
        assert document_ids is not None
        return document_batch(x[:rows, :width], document_ids, eod_mask_loss)
    y = x[:rows, 1:width]
    if document_ids is not None:
        unscored = document_ids[:, 1:] < 0  # padding
        if eod_mask_loss:  # and, as in the boundaries batch, a next document's start
            unscored |= document_ids[:, 1:] != document_ids[:, :-1]
        y = np.where(unscored, IGNORE_INDEX, y)
    return chunk_view(x[:rows, :seq_len]), chunk_view(y)
