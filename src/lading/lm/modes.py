"""The LM loader's three ways of reading an epoch, registered by name (``mode=``).

Everything a mode decides lives in its class: what it refuses, how long a batch row can be,
how a segment of the epoch is planned, whether an epoch has a batch at all, how one batch is
read, and what it adds to the loader's layout and fingerprint. The loader
(:class:`lading.lm.LanguageModelLoader`) keeps the cursor, the state and the DataLoader
workers, the same for all three, and asks its mode for the rest.

- ``"streams"``: the epoch stream cut into ``world_size x batch_size`` contiguous streams, one
  per batch row, read on with BPTT continuity (jittered sequence lengths);
- ``"windows"``: independent windows of ``bptt + 1`` tokens in a shuffled order, dealt to ranks;
- ``"packed"``: windows into which whole documents were packed, the rest padding.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from lading.errors import EmptyEpochError
from lading.lm.batches import Batch, stream_batch, window_batch
from lading.lm.bptt import Jitter, max_seq
from lading.lm.segment import LMSegment, plan_segment
from lading.lm.windows import TokenMixture
from lading.loading.order import feistel_permutation
from lading.loading.plan import check_epoch
from lading.loading.state import Cursor

if TYPE_CHECKING:
    from lading.lm.corpus import TokenCorpus
    from lading.lm.loader import LanguageModelLoader


class Mode:
    """What differs between the ways of reading an epoch (the base: windows)."""

    name = "windows"
    bulk = False  # whole-epoch batches read many at a time in-process (streams)

    def check(self, corpus: TokenCorpus | TokenMixture, boundaries: bool, backwards: bool) -> None:
        """Refuse settings this mode cannot serve (ValueError naming the fix)."""

    def max_seq(self, bptt: int, jitter: Jitter) -> int:
        """The longest batch row, in (input, target) pairs."""
        return bptt

    def plan(self, lm: LanguageModelLoader, cursor: Cursor, layout: Mapping[str, Any]) -> LMSegment:
        """``cursor``'s segment under ``layout``: the epoch's windows dealt round-robin."""
        windows = lm._windows.of_epoch(cursor.epoch)
        return plan_segment(
            cursor, layout, None, windows, lm.equalize, lm.drop_partial_batch, lm.seed
        )

    def check_epoch(self, lm: LanguageModelLoader) -> None:
        """Refuse settings whose first epoch has no batch, as every lading loader does."""
        windows = lm._windows.of_epoch(0).n
        if windows == 0 and not self.padded:
            raise EmptyEpochError(
                "an epoch of 0 batches on every rank: the corpus holds no window of bptt + 1 = "
                f"{lm.bptt + 1} tokens; use a smaller bptt"
            )
        world, size = lm.world.world_size, lm.batch_size
        check_epoch(
            windows, world, lm.equalize, size, lm.drop_partial_batch,
            items="windows", readers_are="world_size",
        )  # fmt: skip

    padded = False  # windows end in padding (packed documents)

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
        share = seg.base.within(seg.plan.positions(lm.world.rank))
        lo = batch * lm.batch_size
        slots = share.slice(lo, min(lo + lm.batch_size, seg.core.take)).positions()
        order = feistel_permutation(slots, seg.n, lm.seed, cursor.epoch) if lm.shuffle else slots
        return window_batch(
            seg.windows,
            order,
            x,
            lm.bptt,
            packed=self.padded,
            boundaries=lm.boundaries,
            eod_mask_loss=lm.eod_mask_loss,
        )

    def layout(self, lm: LanguageModelLoader) -> dict[str, Any]:
        """What this mode adds to who reads what (another value: an elastic resume)."""
        return {}

    def fingerprint(self, lm: LanguageModelLoader) -> dict[str, Any]:
        """What this mode adds to what fixes the data and its order."""
        return {"bptt": lm.bptt}

    def packing_stats(self, lm: LanguageModelLoader) -> dict[str, Any]:
        raise ValueError(f"packing_stats() is for mode='packed', this loader is {self.name!r}")


class Packed(Mode):
    """Windows of whole documents packed best-fit decreasing; the rest of a window padding."""

    name = "packed"
    padded = True

    def check(self, corpus: TokenCorpus | TokenMixture, boundaries: bool, backwards: bool) -> None:
        if backwards:
            raise ValueError("mode='packed' does not read backwards; use mode='windows'")

    def packing_stats(self, lm: LanguageModelLoader) -> dict[str, Any]:
        """Windows, pieces, tokens and padding, summed over a mixture's corpora."""
        return lm._windows.packing_stats()


class Streams(Mode):
    """``world_size x batch_size`` streams of the epoch, read on: BPTT continuity."""

    name = "streams"
    bulk = True

    def check(self, corpus: TokenCorpus | TokenMixture, boundaries: bool, backwards: bool) -> None:
        if boundaries or isinstance(corpus, TokenMixture):
            raise ValueError(
                "boundaries= and TokenMixture need independent windows: use mode='windows' "
                "or mode='packed' (streams carry an RNN state across documents)"
            )

    def max_seq(self, bptt: int, jitter: Jitter) -> int:
        return max_seq(bptt, jitter)

    def plan(self, lm: LanguageModelLoader, cursor: Cursor, layout: Mapping[str, Any]) -> LMSegment:
        """``cursor``'s segment: the epoch stream cut into streams, each batch's length drawn."""
        stream = lm._stream(cursor.epoch)
        return plan_segment(
            cursor, layout, stream, None, lm.equalize, lm.drop_partial_batch, lm.seed
        )

    def check_epoch(self, lm: LanguageModelLoader) -> None:
        seg = lm._current()  # raises itself when the tokens cannot fill the streams
        if seg.batches == 0:
            raise EmptyEpochError(
                f"an epoch of 0 batches on every rank: {seg.n} tokens give each of "
                f"{seg.plan.readers} streams (world_size x batch_size) {seg.plan.each}, "
                "too few for one batch; use a smaller batch_size or fewer processes"
            )

    def build(
        self,
        lm: LanguageModelLoader,
        seg: LMSegment,
        cursor: Cursor,
        batch: int,
        x: npt.NDArray[np.int64],
    ) -> Batch:
        return stream_batch(seg, cursor, batch, lm.world.rank * lm.batch_size, x)

    def layout(self, lm: LanguageModelLoader) -> dict[str, Any]:
        jitter = list(lm.jitter) if isinstance(lm.jitter, tuple) else lm.jitter
        return {"bptt": lm.bptt, "jitter": jitter}

    def fingerprint(self, lm: LanguageModelLoader) -> dict[str, Any]:
        return {}


REGISTERED: dict[str, Mode] = {mode.name: mode for mode in (Streams(), Mode(), Packed())}


def mode_named(name: str) -> Mode:
    """The registered mode ``name``, or a ValueError listing them."""
    if name not in REGISTERED:
        raise ValueError(f"unknown mode {name!r}; choose from {sorted(REGISTERED)}")
    return REGISTERED[name]
