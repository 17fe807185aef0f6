"""``Windows``: independent windows of ``seq_len + 1`` tokens of the epoch stream, shuffled.

Megatron/nanoGPT style, for transformers: the epoch stream is cut every ``seq_len`` tokens
(consecutive windows share one token, so every pair is predicted once), the windows are dealt
round-robin over the ranks by the core's planner and read in an order shuffled by ``(seed,
epoch)``: a keyed Feistel permutation computed per index, nothing per token.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from lading.errors import EmptyEpochError
from lading.lm.batches import Batch, window_batch
from lading.lm.modes.base import EpochView, Mode, check_flag, check_length
from lading.lm.segment import LMSegment, SegmentBatchKey, plan_windows
from lading.lm.stream import EpochStream
from lading.lm.windows import EpochWindows, WindowReader, window_reads
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
    """

    mode: ClassVar[str] = "windows"
    _: KW_ONLY
    backwards: bool = False
    shuffle_documents: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        check_flag(self, "backwards", self.backwards)
        check_flag(self, "shuffle_documents", self.shuffle_documents)


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

    def view(self, data: EpochWindows, epoch: int) -> WindowReader:
        return data.of_epoch(epoch)

    def plan(
        self, view: EpochView, cursor: Cursor, layout: Mapping[str, Any], reading: Reading
    ) -> LMSegment:
        """``cursor``'s segment under ``layout``: the epoch's windows dealt round-robin."""
        assert not isinstance(view, EpochStream)
        return plan_windows(view, cursor, layout, reading)

    def check_epoch(self, first: LMSegment, reading: Reading) -> None:
        if first.n == 0 and not self.padded:
            raise EmptyEpochError(
                "an epoch of 0 batches on every rank: the corpus holds no window of seq_len + 1 "
                f"= {self.length() + 1} tokens; use a smaller seq_len"
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
        """The windows of batch ``key.batch`` of ``seg``: this rank's next, in the epoch's order."""
        share, size = seg.share(reading.rank), reading.batch_size
        lo = key.batch * size
        slots = share.slice(lo, min(lo + size, seg.core.take)).positions()
        if not reading.shuffle:
            return slots
        return feistel_permutation(slots, seg.n, reading.seed, key.epoch)

    def reads(
        self, seg: LMSegment, key: SegmentBatchKey, reading: Reading
    ) -> npt.NDArray[np.int64] | None:
        """``[k, 3]``: (corpus, first token, end token) of what batch ``key`` reads."""
        assert seg.windows is not None
        return window_reads(seg.windows, self.order(seg, key, reading), self.length() + 1)

    def fingerprint(self) -> dict[str, Any]:
        """The window length, ``seq_len`` (states before saved it as ``bptt``), and
        ``shuffle_documents`` where it is off (states before it read documents permuted)."""
        found: dict[str, Any] = {"seq_len": self.length()}
        if not self.shuffles_documents():
            found["shuffle_documents"] = False
        return found

    def saved_fingerprint(self, saved: Mapping[str, Any]) -> dict[str, Any]:
        """A state saved when the window length was kept under ``bptt``, read as ``seq_len``."""
        found = dict(saved)
        if "bptt" in found and "seq_len" not in found:
            found["seq_len"] = found.pop("bptt")
        return found
