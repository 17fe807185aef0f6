"""The one planner: which positions of an epoch each reader reads, equal counts for all.

A *reader* is whatever consumes a share in lock-step with the others: a DDP rank, a (rank,
DataLoader worker) pair, or one row-stream of a language-model batch. DDP needs every rank to
take the same number of steps, so every reader gets the same number of positions, ``each``:

- ``equalize="pad"``: ``ceil(n / readers)``; the shares overrun ``n`` and wrap around to the
  start (each position read at least once, at most ``readers - 1`` read twice), as torch's
  DistributedSampler pads;
- ``equalize="truncate"``: ``n // readers``; the last ``n % readers`` positions are left out.

The readers' shares tile a *virtual* sequence ``0 … readers * each - 1`` whose position ``v``
is position ``v mod n`` of what is being planned; a share is either a contiguous range of it
(streams, parquet row ranges: locality) or every ``readers``-th position (``interleave``, for
map-style samples: the first ``k`` positions of every share are together the first
``k * readers`` of the order, so an order's prefix is what a run has consumed).

The same call plans a fresh epoch (``n`` = all its positions) and an elastic resume (``n`` =
what the previous layout left unread, :meth:`Plan.unread`), with ``resumed=True``: near the
end of a resumed epoch, when fewer positions are left than readers, they are padded rather
than cut, so that no position left over from before the resume is lost.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from lading.errors import EmptyEpochError
from lading.loading.runs import Runs

EQUALIZE: tuple[str, ...] = ("pad", "truncate")


def check_equalize(equalize: str) -> str:
    """``equalize`` if it names a policy, else a ValueError listing the valid ones."""
    if equalize not in EQUALIZE:
        raise ValueError(f"unknown equalize {equalize!r}; choose from {sorted(EQUALIZE)}")
    return equalize


def batch_count(items: int, batch_size: int, drop_partial_batch: bool) -> int:
    """Batches a reader of ``items`` positions yields (the last one partial unless dropped)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    return items // batch_size if drop_partial_batch else -(-items // batch_size)


def check_epoch(
    n: int,
    readers: int,
    equalize: str,
    batch_size: int,
    drop_partial_batch: bool,
    *,
    items: str,
    readers_are: str,
) -> None:
    """Refuse settings whose fresh epoch of ``n`` ``items`` yields no batch on any reader.

    Every loader calls this when it is made, so all of them refuse alike: an empty dataset,
    ``equalize="truncate"`` over fewer items than readers (``readers_are`` says what a reader
    is, e.g. "world_size x num_workers"), a share smaller than a batch that
    ``drop_partial_batch`` drops. Raises :class:`~lading.errors.EmptyEpochError`.
    """
    each = plan_shares(n, readers, equalize).each
    if batch_count(each, batch_size, drop_partial_batch) > 0:
        return
    if n == 0:
        why = f"there are no {items} to read"
    elif each == 0:
        why = (
            f"{n} {items} cannot give each of {readers} readers ({readers_are}) one with "
            "equalize='truncate': use equalize='pad', or fewer processes or workers"
        )
    else:
        why = (
            f"each of {readers} readers ({readers_are}) gets {each} {items}, fewer than "
            f"batch_size={batch_size}, and drop_partial_batch=True drops that partial batch: "
            "use a smaller batch_size or drop_partial_batch=False"
        )
    raise EmptyEpochError(f"an epoch of 0 batches on every rank: {why}")


@dataclass(frozen=True)
class Plan:
    """``readers`` equal shares of ``n`` positions, ``each`` per reader."""

    n: int
    readers: int
    each: int
    interleave: bool = False

    def share(self, reader: int) -> Runs:
        """Reader ``reader``'s positions of the virtual sequence, in reading order."""
        if not 0 <= reader < self.readers:
            raise ValueError(f"reader {reader} outside [0, {self.readers})")
        if self.interleave:
            virtual = np.arange(reader, self.readers * self.each, self.readers, dtype=np.int64)
            return Runs.of_positions(virtual)
        return Runs([reader * self.each], [(reader + 1) * self.each])

    def positions(self, reader: int) -> Runs:
        """Reader ``reader``'s share as positions ``[0, n)``, padding wrapped to the start."""
        return self.share(reader).wrap(self.n)

    def unread(self, served: Sequence[Runs]) -> Runs:
        """Positions ``[0, n)`` no reader has read, in order, given what each one served.

        ``served[r]`` holds positions *of reader r's share* (0 … each-1) it has read: a prefix
        for most loaders, a prefix plus part of a shuffled chunk for parquet. Padding (virtual
        positions past ``n``) that was not read is dropped, being a repeat, and a position
        read as padding counts as read; the positions ``truncate`` left out are included.
        """
        if len(served) != self.readers:
            raise ValueError(f"{len(served)} served lists for {self.readers} readers")
        left, repeats = [], []
        for reader, done in enumerate(served):
            todo = Runs.whole(self.each).minus(done)
            left.append(self.share(reader).within(todo).clip(self.n))
            padding = self.share(reader).within(done).minus(Runs.whole(self.n))
            repeats.append(padding.wrap(self.n))  # read as padding: read all the same
        left.append(Runs([self.readers * self.each], [self.n]))  # what truncate left out
        return Runs.concat(left).sorted().minus(Runs.concat(repeats))


def plan_shares(
    n: int,
    readers: int,
    equalize: str = "pad",
    *,
    interleave: bool = False,
    resumed: bool = False,
) -> Plan:
    """Cut ``n`` positions into ``readers`` equal shares (see the module docstring)."""
    check_equalize(equalize)
    if readers < 1:
        raise ValueError(f"number of readers must be >= 1, got {readers}")
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if resumed and 0 < n < readers:
        each = 1
    elif equalize == "truncate":
        each = n // readers
    else:
        each = -(-n // readers)
    return Plan(n, readers, each, interleave)
