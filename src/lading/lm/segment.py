"""One segment of a language-model epoch: its plan under one layout, and the key that names a
batch of it, which is all a DataLoader worker needs to build that batch."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from lading.errors import EmptyEpochError
from lading.lm.bptt import jitter_of, seq_lengths
from lading.lm.stream import EpochStream
from lading.lm.windows import WindowSource
from lading.loading.order import Salt, generator
from lading.loading.plan import Plan, plan_shares
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
    windows: WindowSource | None  # "windows" and "packed" modes
    n: int  # positions of the epoch: tokens of the cyclic stream ("streams") or windows
    seqs: list[int]  # "streams": the length of each batch
    batches: int = field(init=False)  # the core's, as a field: read once per batch

    def __post_init__(self) -> None:
        self.batches = self.core.batches

    @property
    def base(self) -> Runs:
        return self.core.base

    @property
    def plan(self) -> Plan:
        return self.core.plan

    def offset(self, batch: int) -> int:
        """Stream position, within every stream, where ``batch`` starts ("streams")."""
        return self.core.read_after(batch)


def plan_segment(
    cursor: Cursor,
    layout: Mapping[str, Any],
    stream: EpochStream | None,
    windows: WindowSource | None,
    equalize: str,
    drop_partial_batch: bool,
    seed: int,
) -> LMSegment:
    """The plan of ``cursor``'s segment under ``layout``: of the epoch's ``stream`` cut into
    ``world_size x batch_size`` streams, with each batch's (jittered) length; or of its
    ``windows`` dealt round-robin to the ranks. What is left of an interrupted segment
    (``cursor.base``) is planned instead of the whole epoch."""
    world_size, batch_size = int(layout["world_size"]), int(layout["batch_size"])
    if windows is not None:
        core = Segment.of(
            windows.n,
            world_size,
            cursor,
            equalize=equalize,
            batch_size=batch_size,
            drop_partial_batch=drop_partial_batch,
            interleave=True,
        )
        return LMSegment(core, None, windows, windows.n, [])
    assert stream is not None
    n = stream.total  # the epoch stream is a cycle: its last token predicts its first
    base = cursor.base_or_whole(n)
    streams = world_size * batch_size
    each = plan_shares(len(base), streams, equalize, resumed=cursor.segment > 0).each
    if each < 1 and len(base):
        raise EmptyEpochError(
            f"{len(base)} tokens cannot fill {streams} streams "
            "(world_size x batch_size); use a smaller batch_size or equalize='pad'"
        )
    rng = generator(seed, Salt.SEQ_LENGTHS, cursor.epoch, cursor.segment)
    seqs = seq_lengths(rng, each, int(layout["bptt"]), jitter_of(layout["jitter"]))
    core = Segment.of_lengths(n, streams, cursor, equalize=equalize, lengths=seqs)
    return LMSegment(core, stream, None, n, seqs)
