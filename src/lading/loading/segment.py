"""One segment of an epoch: base → plan → take → batches → unread → consumed, written once.

An epoch is read in segments: the first plans all of its positions; an elastic resume starts a
new one over what the previous layout left unread (the *base*, :class:`~lading.loading.runs.Runs`
of epoch positions). A :class:`Segment` is that base planned over this layout's readers, with
how many positions each reader takes (its share, less a dropped partial batch) and so how many
batches it yields, how far it is after ``k`` batches, and what is left when it stops. Every
workload (map-style samples, parquet rows, LM windows) asks it instead of redoing the
arithmetic; a workload only says how many positions an epoch has and how a run of them becomes a
batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from lading.loading.plan import Plan, batch_count, plan_shares
from lading.loading.runs import Runs
from lading.loading.state import Cursor


class Evening(Protocol):
    """What a workload keeps of its loader keywords for positions that do not share out
    evenly over the readers (every workload has both: map-style, parquet, LM)."""

    @property
    def equalize(self) -> str:
        """``"pad"`` or ``"truncate"`` the shares to equal sizes."""

    @property
    def drop_partial_batch(self) -> bool:
        """Whether each reader's last batch is left out when it is not full."""


@dataclass(frozen=True)
class Segment:
    """``cursor``'s segment of an epoch of ``n`` positions, planned over ``readers``.

    Attributes:
        base: the epoch positions this segment reads (all of them in a first segment).
        plan: their shares, one per reader.
        batch_size: positions per batch of one reader.
        take: positions each reader reads (its share, less a dropped partial batch).
        batches: batches each reader yields (the same for all).
        lengths: where batches differ in length (LM streams with a jittered BPTT), each
            one's positions per reader; ``batch_size`` is then unused.
    """

    base: Runs
    plan: Plan
    batch_size: int
    take: int
    batches: int
    lengths: tuple[int, ...] | None = None

    @classmethod
    def of(
        cls,
        n: int,
        readers: int,
        cursor: Cursor,
        evening: Evening,
        batch_size: int,
        *,
        interleave: bool = False,
    ) -> Segment:
        """Plan ``cursor``'s segment (see :func:`~lading.loading.plan.plan_shares`), its
        shares evened out as ``evening`` (the workload) says."""
        base = cursor.base_or_whole(n)
        plan = plan_shares(
            len(base), readers, evening.equalize, interleave=interleave, resumed=cursor.segment > 0
        )
        drop = evening.drop_partial_batch
        batches = batch_count(plan.each, batch_size, drop)
        take = batches * batch_size if drop else plan.each
        return cls(base, plan, batch_size, take, batches)

    @classmethod
    def of_lengths(cls, base: Runs, plan: Plan, lengths: Sequence[int]) -> Segment:
        """A segment of ``base`` planned as ``plan`` (contiguous shares) whose batch ``k``
        reads ``lengths[k]`` positions of every reader's share: the caller drew the lengths
        for ``plan.each`` (LM streams), so the plan is made once, by the caller."""
        return cls(base, plan, 0, sum(lengths), len(lengths), tuple(lengths))

    @property
    def readers(self) -> int:
        return self.plan.readers

    def share(self, reader: int) -> Runs:
        """The epoch positions ``reader`` reads this segment, in reading order (``take`` of
        them; with a dropped partial batch, the share's last positions are not read)."""
        return self.base.within(self.plan.positions(reader))

    def read_after(self, batches: int) -> int:
        """Positions one reader has read after ``batches`` of its batches."""
        if self.lengths is not None:
            return sum(self.lengths[:batches])
        return min(batches * self.batch_size, self.take)

    def unread(self, served: Sequence[Runs]) -> Runs:
        """Epoch positions no reader read, ``served[r]`` holding the positions of reader
        ``r``'s share it read: the rest of every share and what ``truncate`` or a dropped
        batch left out (see :meth:`~lading.loading.plan.Plan.unread`)."""
        return self.base.within(self.plan.unread(served))

    def unread_after(self, batches: int) -> Runs:
        """:meth:`unread` when every reader has read its first ``batches`` batches."""
        return self.unread([Runs([0], [self.read_after(batches)])] * self.readers)
