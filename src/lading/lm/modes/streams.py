"""``Streams``: the epoch stream cut into ``world_size x batch_size`` streams, read on.

Row ``r`` of batch ``t+1`` starts where row ``r`` of batch ``t`` ended, so an RNN's hidden
state carries over (the point of the fastai thread). Sequence lengths vary per batch
(:mod:`lading.lm.bptt`), drawn from ``(seed, epoch)``, the same on every rank. In-process, many
batches of stream are read at a time (``chunk_batches``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from lading.errors import EmptyEpochError
from lading.lm.batches import Batch, stream_batch
from lading.lm.bptt import Jitter, check_jitter, max_seq
from lading.lm.corpus import TokenCorpus
from lading.lm.modes.base import EpochView, ManyReads, Mode, check_flag, check_length
from lading.lm.segment import LMSegment, SegmentBatchKey, plan_streams
from lading.lm.stream import EpochStream
from lading.lm.windows import EpochWindows, TokenMixture
from lading.loading.reading import Reading
from lading.loading.state import Cursor


@dataclass(frozen=True)
class Streams:
    """BPTT streams with continuity across batches (``LanguageModelLoader(..., Streams(70))``).

    Args:
        bptt: the target sequence length of a batch (fastai's default is 70).
        jitter: how lengths vary around ``bptt``: ``"fastai"`` (``bptt`` with probability
            0.95, else ``bptt / 2``, then ``max(5, int(normal(that, 5)))``, capped at
            ``bptt + 25``), a uniform ``(low, high)`` range, or ``None`` (fixed).
        backwards: read every stream from its end to its start (a backward LM).
        chunk_batches: how many batches of stream an in-process read holds between refills
            (memory ``batch_size x chunk_batches x (bptt + 25)`` tokens, no effect on batches).
    """

    mode: ClassVar[str] = "streams"
    bptt: int
    _: KW_ONLY
    jitter: Jitter = "fastai"
    backwards: bool = False
    chunk_batches: int = 128

    def __post_init__(self) -> None:
        check_length(self, "bptt", self.bptt, "the target tokens per batch row; fastai uses 70")
        check_jitter(self.jitter)
        check_flag(self, "backwards", self.backwards)
        check_length(self, "chunk_batches", self.chunk_batches, "batches read at a time")


class StreamsMode(Mode):
    """``world_size x batch_size`` streams of the epoch, read on: BPTT continuity."""

    name = "streams"
    options = Streams
    bulk = True

    def __init__(self, shape: Streams) -> None:
        self.shape = shape

    def check(self, corpus: TokenCorpus | TokenMixture) -> None:
        if isinstance(corpus, TokenMixture):
            raise ValueError(
                "a TokenMixture needs independent windows: pass Windows(seq_len) or "
                "Packed(seq_len) as sequence= (streams carry an RNN state across documents)"
            )

    def length(self) -> int:
        return self.shape.bptt

    def backwards(self) -> bool:
        return self.shape.backwards

    def max_seq(self) -> int:
        return max_seq(self.shape.bptt, self.shape.jitter)

    def chunk_batches(self) -> int:
        return self.shape.chunk_batches

    def view(self, data: EpochWindows, epoch: int) -> EpochStream:
        return data.stream(epoch)

    def plan(
        self, view: EpochView, cursor: Cursor, layout: Mapping[str, Any], reading: Reading
    ) -> LMSegment:
        """``cursor``'s segment: the epoch stream cut into streams, each batch's length drawn."""
        assert isinstance(view, EpochStream)
        return plan_streams(view, cursor, layout, reading)

    def check_epoch(self, first: LMSegment, reading: Reading) -> None:
        if first.batches == 0:  # planning raised already when the tokens cannot fill streams
            raise EmptyEpochError(
                f"an epoch of 0 batches on every rank: {first.n} tokens give each of "
                f"{first.plan.readers} streams (world_size x batch_size) {first.plan.each}, "
                "too few for one batch; use a smaller batch_size or fewer processes"
            )

    def build(
        self, seg: LMSegment, key: SegmentBatchKey, x: npt.NDArray[np.int64], reading: Reading
    ) -> Batch:
        return stream_batch(seg, key.batch, reading.rank * reading.batch_size, x)

    def reads(
        self, seg: LMSegment, key: SegmentBatchKey, reading: Reading
    ) -> npt.NDArray[np.int64] | None:
        """The pieces of each row's stream read (the whole epoch's streams; after an elastic
        resume, None: the rows read through the segment's base runs)."""
        stream = seg.stream
        if stream is None or not seg.whole:
            return None
        first = reading.rank * reading.batch_size
        begins = (first + np.arange(reading.batch_size)) * seg.plan.each + seg.offset(key.batch)
        found = stream.pieces(begins, seg.seqs[key.batch] + 1)
        found[:, 0] = 0  # one corpus
        return found

    def reads_many(
        self, seg: LMSegment, keys: list[SegmentBatchKey], reading: Reading
    ) -> ManyReads | None:
        """:meth:`reads` of batches ``keys`` at once (a remote corpus plans every batch of
        this epoch and the next at each epoch's start): one :meth:`EpochStream.pieces` call
        a distinct batch length, not one a batch (~26 us each: ~50 s of a 900k-batch epoch's
        two plans before its first batch)."""
        stream = seg.stream
        if stream is None or not seg.whole:
            return None
        if not keys:
            return np.empty(0, dtype=np.int64), np.empty((0, 3), dtype=np.int64)
        batch = np.fromiter((k.batch for k in keys), np.int64, len(keys))
        rows = reading.batch_size
        first = reading.rank * rows
        streams = (first + np.arange(rows, dtype=np.int64)) * seg.plan.each
        width = np.asarray(seg.seqs, dtype=np.int64)[batch] + 1  # tokens a row reads
        whiches, found = [], []
        for n in np.unique(width).tolist():
            mine = np.flatnonzero(width == n)
            begins = seg.offsets(batch[mine])[:, None] + streams[None, :]
            pieces = stream.pieces(begins.ravel(), n)
            whiches.append(mine[pieces[:, 0] // rows])
            found.append(pieces)
        out = np.concatenate(found)
        out[:, 0] = 0  # one corpus
        return np.concatenate(whiches), out

    def layout(self) -> dict[str, Any]:
        """The length and its jitter: another on resume replans the rest (elastic)."""
        jitter = self.shape.jitter
        return {
            "bptt": self.shape.bptt,
            "jitter": list(jitter) if isinstance(jitter, tuple) else jitter,
        }
