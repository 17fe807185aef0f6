"""``Windows``: independent windows of ``seq_len + 1`` tokens of the epoch stream, shuffled.

Megatron/nanoGPT style, for transformers: the epoch stream is cut every ``seq_len`` tokens
(consecutive windows share one token, so every pair is predicted once), the windows are dealt
round-robin over the ranks by the core's planner and read in an order shuffled by ``(seed,
epoch)``: a keyed Feistel permutation computed per index, nothing per token.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import numpy.typing as npt

from lading.errors import EmptyEpochError
from lading.lm.batches import Batch, window_batch
from lading.lm.modes.base import Mode, check_flag, check_length, options_as
from lading.lm.segment import LMSegment, plan_segment
from lading.loading.order import feistel_permutation
from lading.loading.plan import check_epoch
from lading.loading.state import Cursor

if TYPE_CHECKING:
    from lading.lm.loader import LanguageModelLoader


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
    """

    mode: ClassVar[str] = "windows"
    _: KW_ONLY
    backwards: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        check_flag(self, "backwards", self.backwards)


class WindowsMode(Mode):
    """Windows dealt round-robin over the ranks, read in a shuffled order (packed's base)."""

    name = "windows"
    options: ClassVar[type] = Windows
    padded = False  # windows end in padding (packed documents)

    def length(self, lm: LanguageModelLoader) -> int:
        return options_as(lm, WindowShape).seq_len

    def backwards(self, lm: LanguageModelLoader) -> bool:
        shape = options_as(lm, WindowShape)
        return isinstance(shape, Windows) and shape.backwards

    def plan(self, lm: LanguageModelLoader, cursor: Cursor, layout: Mapping[str, Any]) -> LMSegment:
        """``cursor``'s segment under ``layout``: the epoch's windows dealt round-robin."""
        windows = lm._windows.of_epoch(cursor.epoch)
        return plan_segment(
            cursor, layout, None, windows, lm.equalize, lm.drop_partial_batch, lm.seed
        )

    def check_epoch(self, lm: LanguageModelLoader) -> None:
        windows = lm._windows.of_epoch(0).n
        if windows == 0 and not self.padded:
            seq_len = self.length(lm)
            raise EmptyEpochError(
                "an epoch of 0 batches on every rank: the corpus holds no window of seq_len + 1 "
                f"= {seq_len + 1} tokens; use a smaller seq_len"
            )
        world, size = lm.world.world_size, lm.batch_size
        check_epoch(
            windows, world, lm.equalize, size, lm.drop_partial_batch,
            items="windows", readers_are="world_size",
        )  # fmt: skip

    def build(
        self,
        lm: LanguageModelLoader,
        seg: LMSegment,
        cursor: Cursor,
        batch: int,
        x: npt.NDArray[np.int64],
    ) -> Batch:
        """Batch ``batch`` of ``seg``: this rank's next windows, in the epoch's order."""
        assert seg.windows is not None
        shape = options_as(lm, WindowShape)
        share = seg.base.within(seg.plan.positions(lm.world.rank))
        lo = batch * lm.batch_size
        slots = share.slice(lo, min(lo + lm.batch_size, seg.core.take)).positions()
        order = feistel_permutation(slots, seg.n, lm.seed, cursor.epoch) if lm.shuffle else slots
        return window_batch(
            seg.windows,
            order,
            x,
            shape.seq_len,
            packed=self.padded,
            boundaries=shape.boundaries,
            eod_mask_loss=shape.eod_mask_loss,
        )

    def fingerprint(self, lm: LanguageModelLoader) -> dict[str, Any]:
        """The window length, under the key saved states have always used."""
        return {"bptt": self.length(lm)}
