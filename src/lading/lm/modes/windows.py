"""``Windows``: independent windows of ``seq_len + 1`` tokens of the epoch stream, shuffled.

Megatron/nanoGPT style, for transformers: the epoch stream is cut every ``seq_len`` tokens
(consecutive windows share one token, so every pair is predicted once), the windows are dealt
round-robin over the ranks by the core's planner (under the locality shuffle, a run of
positions to each rank) and read in an order shuffled by ``(seed, epoch)``: a keyed Feistel
permutation computed per index, nothing per token.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from lading.errors import EmptyEpochError
from lading.lm.batches import Batch, window_batch
from lading.lm.blocks import block_order
from lading.lm.corpus import TokenCorpus
from lading.lm.modes.base import EpochView, ManyReads, Mode, check_flag, check_length
from lading.lm.segment import LMSegment, SegmentBatchKey, plan_windows
from lading.lm.stream import EpochStream
from lading.lm.windows import (
    EpochWindows,
    StreamWindows,
    TokenMixture,
    WindowReader,
    indexed_window_reads,
    window_reads,
)
from lading.loading.order import feistel_permutation
from lading.loading.reading import Reading
from lading.loading.state import Cursor


@dataclass(frozen=True)
class WindowShape:
    """What both window modes read: the window length and what a batch says of documents.

    Args:
        seq_len: (input, target) pairs per window; a window holds ``seq_len + 1`` tokens.
        boundaries: yield :class:`~lading.lm.boundaries.DocumentBatch` es (position ids
            restarting at each document, ``cu_seqlens``, document ids, a loss mask) instead of
            ``(x, y)``.
        eod_mask_loss: do not score labels that start another document (the default, as
            transformers' ``DataCollatorWithFlattening``; False scores end-of-text -> the next
            document's first token, Megatron's default). Batches that know their documents
            obey it: ``boundaries=True`` (the loss mask) and packed ``(x, y)`` (labels
            ``IGNORE_INDEX``); plain windows ``(x, y)`` score every label.
    """

    mode: ClassVar[str]
    seq_len: int
    _: KW_ONLY
    boundaries: bool = False
    eod_mask_loss: bool = True

    def __post_init__(self) -> None:
        check_length(self, "seq_len", self.seq_len, "the tokens a window predicts")
        check_flag(self, "boundaries", self.boundaries)
        check_flag(self, "eod_mask_loss", self.eod_mask_loss)


@dataclass(frozen=True)
class Windows(WindowShape):
    """Independent windows of the epoch stream (``LanguageModelLoader(..., Windows(512))``).

    Args:
        seq_len, boundaries, eod_mask_loss: as for every window mode (:class:`WindowShape`).
        backwards: read the epoch stream from its end to its start (a backward LM).
        shuffle_documents: with the loader's ``shuffle=True``, permute the documents before
            cutting the epoch stream into windows (the default: each epoch's windows are cut
            anew). ``False`` keeps the corpus's stored document order, so that every window
            is one contiguous range of ``tokens.bin`` (one ranged GET of a remote corpus,
            however many documents it spans), and shuffles the windows only: the same windows
            every epoch in another order, as Mosaic's and litdata's token loaders read.
        block_tokens: 0 (the default) shuffles the windows exactly, over the whole epoch.
            ``> 0`` (with ``shuffle_documents=False``) shuffles that keep locality: blocks of
            about ``block_tokens`` tokens of consecutive windows, the blocks permuted, the
            windows shuffled across a buffer of ``block_buffer`` blocks
            (:mod:`lading.lm.blocks`): a remote corpus fetches each block whole, once an
            epoch a node cache (one GET, at most a region of the node cache: ``cache_bytes /
            16`` up to 16 MiB), at the price of batches drawn from ``block_buffer`` blocks at
            a time. Each rank reads a run of the epoch's positions, so the blocks of buffers
            of its own (the exact shuffle deals windows round-robin): ranks on nodes of their
            own fetch their share of the corpus each.
        block_buffer: blocks whose windows are shuffled together (``block_tokens > 0``).
    """

    mode: ClassVar[str] = "windows"
    _: KW_ONLY
    backwards: bool = False
    shuffle_documents: bool = True
    block_tokens: int = 0
    block_buffer: int = 4

    def __post_init__(self) -> None:
        super().__post_init__()
        check_flag(self, "backwards", self.backwards)
        check_flag(self, "shuffle_documents", self.shuffle_documents)
        if self.block_tokens != 0:
            check_length(self, "block_tokens", self.block_tokens, "tokens a shuffled block")
        check_length(self, "block_buffer", self.block_buffer, "blocks shuffled together")
        if self.block_tokens and self.shuffle_documents:
            raise ValueError(
                f"Windows(block_tokens={self.block_tokens}) reads blocks of the stored "
                "document order: pass shuffle_documents=False with it (a block of permuted "
                "documents is no range of tokens.bin)"
            )


ORDERS_KEPT = 1 << 16  # batches' window orders a segment keeps (8 windows: ~6 MiB)
ORDERS_RUN = 64  # batches whose orders a build that finds none computes at once


class WindowsMode(Mode):
    """Windows dealt round-robin over the ranks, read in a shuffled order (packed's base)."""

    name = "windows"
    options: ClassVar[type] = Windows
    padded = False  # windows end in padding (packed documents)

    def __init__(self, shape: WindowShape) -> None:
        self.shape = shape

    def length(self) -> int:
        return self.shape.seq_len

    def backwards(self) -> bool:
        return isinstance(self.shape, Windows) and self.shape.backwards

    def shuffles_documents(self) -> bool:
        return not isinstance(self.shape, Windows) or self.shape.shuffle_documents

    def per_block(self) -> int:
        """Windows a block of the locality shuffle holds (0: the exact global shuffle)."""
        shape = self.shape
        if not isinstance(shape, Windows) or not shape.block_tokens:
            return 0
        return max(1, shape.block_tokens // shape.seq_len)

    def check(self, corpus: TokenCorpus | TokenMixture) -> None:
        if self.per_block() and isinstance(corpus, TokenMixture):
            raise ValueError(
                "Windows(block_tokens=...) shuffles blocks of one corpus; a TokenMixture "
                "draws each corpus's windows itself: pass block_tokens=0 (the default)"
            )

    def view(self, data: EpochWindows, epoch: int) -> WindowReader:
        return data.of_epoch(epoch)

    def plan(
        self, view: EpochView, cursor: Cursor, layout: Mapping[str, Any], reading: Reading
    ) -> LMSegment:
        """``cursor``'s segment under ``layout``: the epoch's windows dealt round-robin; under
        the locality shuffle a run of positions to each rank, so that each reads the blocks
        of buffers of its own (dealt round-robin, every rank read windows of every block, and
        ranks on nodes of their own fetched the whole corpus each: W times the bytes used)."""
        assert not isinstance(view, EpochStream)
        return plan_windows(view, cursor, layout, reading, interleave=not self.per_block())

    def check_epoch(self, first: LMSegment, reading: Reading) -> None:
        if first.n == 0 and not self.padded:
            raise EmptyEpochError(
                "an epoch of 0 batches on every rank: the documents read (the corpus, or those "
                f"documents= chose) hold no window of seq_len + 1 = {self.length() + 1} tokens; "
                "use a smaller seq_len, or more documents"
            )
        reading.refuse_empty(first.n, "windows")

    def build(
        self, seg: LMSegment, key: SegmentBatchKey, x: npt.NDArray[np.int64], reading: Reading
    ) -> Batch:
        """Batch ``key.batch`` of ``seg``: this rank's next windows, in the epoch's order."""
        assert seg.windows is not None
        shape = self.shape
        return window_batch(
            seg.windows,
            self.order(seg, key, reading),
            x,
            shape.seq_len,
            packed=self.padded,
            boundaries=shape.boundaries,
            eod_mask_loss=shape.eod_mask_loss,
        )

    def order(
        self, seg: LMSegment, key: SegmentBatchKey, reading: Reading
    ) -> npt.NDArray[np.int64]:
        """The windows of batch ``key.batch`` of ``seg``: this rank's next, in the epoch's order
        (kept in ``seg.orders``: a remote corpus's plan asks for each batch, its build again).
        One not kept is computed with the next :data:`ORDERS_RUN` batches' in one numpy pass
        (a batch's alone, 8 windows through the Feistel network in Python integers, was ~60 %
        of a local build under the locality shuffle: bench_lm_orders.py)."""
        at = (reading.rank, key.batch)
        found = seg.orders.get(at)
        if found is None:
            if len(seg.orders) + ORDERS_RUN > ORDERS_KEPT:
                seg.orders.clear()
            stop = min(key.batch + ORDERS_RUN, seg.core.batches)
            self.plan_orders(seg, list(range(key.batch, stop)), key.epoch, reading)
            found = seg.orders.get(at)
            if found is None:
                found = seg.orders[at] = self._order(seg, key, reading)
        return found

    def _order(
        self, seg: LMSegment, key: SegmentBatchKey, reading: Reading
    ) -> npt.NDArray[np.int64]:
        share, size = seg.share(reading.rank), reading.batch_size
        lo = key.batch * size
        slots = share.slice(lo, min(lo + size, seg.core.take)).positions()
        return self._shuffled(seg, slots, key.epoch, reading)

    def _shuffled(
        self, seg: LMSegment, slots: npt.NDArray[np.int64], epoch: int, reading: Reading
    ) -> npt.NDArray[np.int64]:
        """The windows at positions ``slots`` of ``seg``'s share, in ``epoch``'s order (each
        position's window computed alone: a batch's or many at once give the same)."""
        if not reading.shuffle:
            return slots
        per = self.per_block()
        if per:
            assert isinstance(self.shape, Windows)
            buffer = self.shape.block_buffer
            return block_order(slots, seg.n, per, buffer, reading.seed, epoch)
        return feistel_permutation(slots, seg.n, reading.seed, epoch)

    def orders_of(
        self, seg: LMSegment, batches: list[int], epoch: int, reading: Reading
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """The windows of ``batches`` of ``seg`` (distinct) in their orders, computed at once
        (numpy over all their positions), and each window's batch as its index in
        ``batches``."""
        size = reading.batch_size
        want = np.asarray(batches, dtype=np.int64)
        first, last = int(want.min()), int(want.max())
        lo, hi = first * size, min((last + 1) * size, seg.core.take)
        positions = seg.share(reading.rank).slice(lo, hi).positions()
        slots = self._shuffled(seg, positions, epoch, reading)
        index = np.full(last - first + 1, -1, dtype=np.int64)
        index[want - first] = np.arange(len(want), dtype=np.int64)
        where = index[(lo + np.arange(hi - lo, dtype=np.int64)) // size - first]
        keep = where >= 0
        return slots[keep], where[keep]

    def fetches(
        self, seg: LMSegment, key: SegmentBatchKey, reading: Reading
    ) -> npt.NDArray[np.int64] | None:
        """What a remote corpus fetches for batch ``key``: the blocks of its windows whole
        under the locality shuffle (each block's stream range, ``per_block`` windows and the
        token the last one shares with the next), else what it reads (:meth:`reads`)."""
        if not self.per_block() or not reading.shuffle:
            return self.reads(seg, key, reading)
        found = self.fetches_many(seg, [key], reading)
        return None if found is None else found[1]

    def fetches_many(
        self, seg: LMSegment, keys: list[SegmentBatchKey], reading: Reading
    ) -> ManyReads | None:
        """:meth:`fetches` of batches ``keys`` at once: each batch's blocks once, their stream
        ranges found together."""
        per = self.per_block()
        windows = seg.windows
        if not keys or not per or not reading.shuffle or not isinstance(windows, StreamWindows):
            return self.reads_many(seg, keys, reading)
        order, where = self.orders_of(seg, [k.batch for k in keys], keys[0].epoch, reading)
        blocks = order // per
        span = int(blocks.max()) + 1 if len(blocks) else 1
        pairs = np.unique(where * span + blocks)  # (batch, block), each once
        where, blocks = pairs // span, pairs % span
        width = per * windows.bptt
        starts = blocks * width
        total = windows.stream.total
        last = starts + width + 1 > total  # the short last block ends with the stream
        pieces = windows.stream.pieces(starts[~last], width + 1)
        whiches, found = [where[~last][pieces[:, 0]]], [pieces]
        for j, start in zip(where[last].tolist(), starts[last].tolist()):
            found.append(windows.stream.pieces([start], total - start))
            whiches.append(np.full(len(found[-1]), j, dtype=np.int64))
        rows = np.concatenate(found)
        rows[:, 0] = 0
        return np.concatenate(whiches), rows

    def plan_orders(self, seg: LMSegment, batches: list[int], epoch: int, reading: Reading) -> None:
        """The window orders of ``batches`` of ``seg`` computed at once (numpy over all their
        positions) into ``seg.orders``, where :meth:`order` finds them: what a remote
        corpus's plan of a whole epoch costs, not a Feistel network a batch."""
        todo = sorted({b for b in batches if (reading.rank, b) not in seg.orders})
        if not todo or len(todo) + len(seg.orders) > ORDERS_KEPT:
            return
        slots, where = self.orders_of(seg, todo, epoch, reading)
        bounds = np.searchsorted(where, np.arange(len(todo) + 1)).tolist()
        for j, b in enumerate(todo):
            seg.orders[reading.rank, b] = slots[bounds[j] : bounds[j + 1]]

    def reads(
        self, seg: LMSegment, key: SegmentBatchKey, reading: Reading
    ) -> npt.NDArray[np.int64] | None:
        """``[k, 3]``: (corpus, first token, end token) of what batch ``key`` reads."""
        assert seg.windows is not None
        return window_reads(seg.windows, self.order(seg, key, reading), self.length() + 1)

    def reads_many(
        self, seg: LMSegment, keys: list[SegmentBatchKey], reading: Reading
    ) -> ManyReads | None:
        """:meth:`reads` of batches ``keys`` at once: their windows' orders and ranges computed
        together, nothing a batch."""
        assert seg.windows is not None
        if not keys:
            return np.empty(0, dtype=np.int64), np.empty((0, 3), dtype=np.int64)
        order, where = self.orders_of(seg, [k.batch for k in keys], keys[0].epoch, reading)
        found = indexed_window_reads(seg.windows, order, self.length() + 1)
        return None if found is None else (where[found[0]], found[1])

    def fingerprint(self) -> dict[str, Any]:
        """The window length, ``seq_len`` (states before saved it as ``bptt``), and
        ``shuffle_documents`` where it is off (states before it read documents permuted)."""
        found: dict[str, Any] = {"seq_len": self.length()}
        if not self.shuffles_documents():
            found["shuffle_documents"] = False
        if self.per_block():
            assert isinstance(self.shape, Windows)
            found["block_shuffle"] = [self.per_block(), self.shape.block_buffer]
            found["block_deal"] = "runs"  # (states before dealt round-robin: refused)
        return found

    def saved_fingerprint(
        self, saved: Mapping[str, Any], layout: Mapping[str, Any]
    ) -> dict[str, Any]:
        """A state saved when the window length was kept under ``bptt``, read as ``seq_len``;
        one of the locality shuffle saved when its windows were dealt round-robin is refused
        (its positions name other windows), but on one rank (the two deals are one there)."""
        found = dict(saved)
        if "bptt" in found and "seq_len" not in found:
            found["seq_len"] = found.pop("bptt")
        if "block_shuffle" in found and "block_deal" not in found:
            one = layout.get("world_size") == 1
            found["block_deal"] = "runs" if one else "round-robin (an older lading)"
        return found
