"""One segment of a language-model epoch: its plan under one layout, and the key that names a
batch of it, which is all a DataLoader worker needs to build that batch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from lading.lm.stream import EpochStream
from lading.lm.windows import WindowSource
from lading.loading.plan import Plan
from lading.loading.runs import Runs


class SegmentBatchKey(NamedTuple):
    """Batch ``batch`` of segment ``segment`` of ``epoch`` (with the segment's base after an
    elastic resume): all a DataLoader worker needs to build it."""

    epoch: int
    segment: int
    batch: int
    base: tuple[tuple[int, ...], tuple[int, ...]] | None


@dataclass
class Segment:
    """The plan of one segment of an epoch under one layout."""

    stream: EpochStream | None  # "streams" mode
    windows: WindowSource | None  # "windows" and "packed" modes
    n: int  # positions of the epoch: tokens of the cyclic stream ("streams") or windows
    base: Runs  # the positions this segment reads
    plan: Plan  # one reader per stream ("streams") or per rank ("windows")
    seqs: list[int]  # "streams": the length of each batch
    batches: int

    def offset(self, batch: int) -> int:
        """Stream position, within every stream, where ``batch`` starts ("streams")."""
        return sum(self.seqs[:batch])
