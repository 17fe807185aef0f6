"""One segment of a language-model epoch: its plan under one layout, planned once, and the key
that names a batch of it, all a DataLoader worker needs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from lading.errors import EmptyEpochError
from lading.lm.bptt import jitter_of, seq_lengths
from lading.lm.stream import EpochStream
from lading.lm.windows import WindowReader
from lading.loading.order import Salt, generator
from lading.loading.plan import Plan, plan_shares
from lading.loading.reading import Reading
from lading.loading.runs import Runs
from lading.loading.segment import Segment
from lading.loading.state import Cursor


class SegmentBatchKey(NamedTuple):
    """Batch ``batch`` of segment ``segment`` of ``epoch`` (with the segment's base after an
    elastic resume): all a DataLoader worker needs to build it."""

    epoch: int
    segment: int
    batch: int
    base: tuple[tuple[int, ...], tuple[int, ...]] | None


@dataclass
class LMSegment:
    """One segment of an LM epoch under one layout: the core's segment (base, plan, take,
    batches: :class:`lading.loading.segment.Segment`) and what the LM reads it from."""

    core: Segment  # one reader per stream ("streams") or per rank ("windows")
    stream: EpochStream | None  # "streams" mode
    windows: WindowReader | None  # "windows" and "packed" modes
    n: int  # positions of the epoch: tokens of the cyclic stream ("streams") or windows
    seqs: list[int]  # "streams": the length of each batch
    whole: bool  # the segment is the whole epoch (no elastic resume before it)
    batches: int = field(init=False)  # the core's, as a field: read once per batch
    _shares: dict[int, Runs] = field(init=False, default_factory=dict)
    # batch -> its windows in order, kept as asked (a remote corpus's plan asks for every
    # batch, its build again): at most ORDERS_KEPT of them, then begun afresh
    orders: dict[tuple[int, int], Any] = field(init=False, default_factory=dict)

    # "streams": where each batch starts in every stream (``seqs`` summed, one int64 a batch
    # and one more): batch ``k``'s offset is asked once a batch, and summing the ``k``
    # lengths before it each time made an epoch of B batches cost O(B**2)
    _starts: npt.NDArray[np.int64] = field(init=False)

    def __post_init__(self) -> None:
        self.batches = self.core.batches
        self._starts = np.zeros(len(self.seqs) + 1, dtype=np.int64)
        np.cumsum(self.seqs, out=self._starts[1:])

    @property
    def base(self) -> Runs:
        return self.core.base

    @property
    def plan(self) -> Plan:
        return self.core.plan

    def offset(self, batch: int) -> int:
        """Stream position, within every stream, where ``batch`` starts ("streams"; past the
        last batch, where the segment ends)."""
        if not self.seqs:
            return self.core.read_after(batch)
        return int(self._starts[min(batch, len(self.seqs))])

    def offsets(self, batches: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """:meth:`offset` of each of ``batches`` ("streams"), at once."""
        return self._starts[np.minimum(batches, len(self.seqs))]

    def share(self, reader: int) -> Runs:
        """The epoch positions ``reader`` reads (kept: every batch of a window mode asks)."""
        if reader not in self._shares:
            self._shares[reader] = self.core.share(reader)
        return self._shares[reader]


def plan_windows(
    windows: WindowReader,
    cursor: Cursor,
    layout: Mapping[str, Any],
    reading: Reading,
    interleave: bool = True,
) -> LMSegment:
    """``cursor``'s segment of the epoch's ``windows`` dealt round-robin to ``layout``'s ranks
    (what is left of an interrupted segment, ``cursor.base``, instead of the whole epoch), or
    with ``interleave=False`` a run of consecutive positions to each rank (the locality
    shuffle: a rank's positions then hold the windows of buffers of its own)."""
    world, size = int(layout["world_size"]), int(layout["batch_size"])
    core = Segment.of(windows.n, world, cursor, reading, size, interleave=interleave)
    return LMSegment(core, None, windows, windows.n, [], cursor.base is None)


def plan_streams(
    stream: EpochStream, cursor: Cursor, layout: Mapping[str, Any], reading: Reading
) -> LMSegment:
    """``cursor``'s segment of the epoch ``stream`` cut into ``world_size x batch_size``
    streams of ``layout``, with each batch's (jittered) length: the shares are planned once,
    and the lengths drawn for them."""
    n = stream.total  # the epoch stream is a cycle: its last token predicts its first
    base = cursor.base_or_whole(n)
    streams = int(layout["world_size"]) * int(layout["batch_size"])
    plan = plan_shares(len(base), streams, reading.equalize, resumed=cursor.segment > 0)
    if plan.each < 1 and len(base):
        raise EmptyEpochError(
            f"{len(base)} tokens cannot fill {streams} streams "
            "(world_size x batch_size); use a smaller batch_size or equalize='pad'"
        )
    rng = generator(reading.seed, Salt.SEQ_LENGTHS, cursor.epoch, cursor.segment)
    seqs = seq_lengths(rng, plan.each, int(layout["bptt"]), jitter_of(layout["jitter"]))
    core = Segment.of_lengths(base, plan, seqs)
    return LMSegment(core, stream, None, n, seqs, cursor.base is None)
