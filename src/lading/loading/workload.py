"""What a workload hands the loader: its positions, how a run of them becomes a batch, a bulk read.

A workload (map-style samples, LM streams and windows, parquet rows) is a :class:`Workload`; the
one loader (:class:`~lading.loading.loader.Loader`) iterates it, counts its batches, keeps the
cursor and saves it. A workload holds no position of its own: every method is told the cursor it
is asked about, so its answers are functions of (settings, cursor) that any process can
compute for any position: a DataLoader worker builds a batch from its key alone, a resume plans
the saved layout's segment to find what it left unread. Sharding, equalizing and the
arithmetic of segments are the core's too (:class:`~lading.loading.segment.Segment`).

Every workload of lading is a :class:`SegmentWorkload`: it holds the one settings record
(:class:`~lading.loading.reading.Reading`) and answers one hook, :meth:`SegmentWorkload.segment`
(``cursor``'s segment of the epoch under a layout); the batch count, what is unread at a
position, what was consumed, the layout and the fingerprint follow from it and from the
settings, written once here. A workload adds its keys, how a key becomes a batch, and what its
layout and fingerprint hold beyond the settings.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from lading.loading.reading import Reading
from lading.loading.runs import Runs
from lading.loading.segment import Segment
from lading.loading.state import Cursor


class Workload(Protocol):
    """The planning and building side of a loader, for one workload.

    Attributes:
        kind: the workload's name in a saved state (``"map"``, ``"lm"``, ``"parquet"``): a
            state of another kind is refused.
        reading: the loader's settings (batch size, seed, shuffle, equalize, ranks...).

    A workload whose consecutive batches share a costly read (parquet: a decoded chunk) also has
    ``group(key) -> Hashable``: the loader then deals each run of keys of one group to one
    DataLoader worker and puts the batches back in order (:mod:`lading.loading.deal`).
    """

    kind: str
    reading: Reading

    def batches(self, cursor: Cursor) -> int:
        """Batches this rank yields in ``cursor``'s segment of its epoch (equal on every rank)."""
        ...

    def keys(self, cursor: Cursor) -> Iterator[Any]:
        """Keys of this rank's batches from batch ``cursor.batches`` on. A key names all that
        :meth:`build` needs (the epoch, the rows…), so a DataLoader worker, whose copy of the
        workload never sees the main process again, builds the batch from the key alone."""
        ...

    def build(self, key: Any) -> Any:
        """The batch ``key`` names, in memory of its own (it may cross a process boundary, and
        the caller keeps it: no later batch may overwrite it)."""
        ...

    def bulk(self, cursor: Cursor) -> Iterator[Any] | None:
        """This rank's batches from ``cursor.batches`` on, read many at a time in this process,
        or None where building them one key at a time is as fast (the loader then does)."""
        ...

    def layout(self) -> dict[str, Any]:
        """What fixes who reads what (world size, readers per rank, batch size…): a state of
        another layout resumes elastically."""
        ...

    def fingerprint(self) -> dict[str, Any]:
        """What fixes the data and its orders (sizes, seed, shuffle, equalize…): a state of
        another fingerprint is refused."""
        ...

    def unread(self, layout: Mapping[str, Any], cursor: Cursor) -> Runs:
        """Epoch positions that ``layout`` had not read at ``cursor`` (an elastic resume plans
        them over this layout's readers)."""
        ...

    def ended(self, layout: Mapping[str, Any], cursor: Cursor) -> bool:
        """Whether ``layout``'s readers had read ``cursor``'s segment to its end (a state
        saved there resumes at the next epoch on any layout)."""
        ...

    def consumed(self, cursor: Cursor) -> int:
        """Positions read at ``cursor`` in its segment, over all ranks (for logs and humans)."""
        ...

    def saved_state(self, state: Mapping[str, Any]) -> dict[str, Any]:
        """``state`` as this workload reads it today (a key renamed since, an older layout
        read as this one), before the loader checks it; or a LoaderStateError that says more
        than a differing key would (other tokens under the same sizes)."""
        ...


class SegmentWorkload:
    """What every lading workload shares: the settings, and all that follows from a segment.

    A subclass sets ``kind`` and ``reading`` and answers :meth:`segment`, :meth:`keys` and
    :meth:`build`; it extends :meth:`layout` and :meth:`fingerprint` with what else fixes who
    reads what and which data it is, and overrides :meth:`unread` only where a reader does
    not read its share in order (parquet's shuffled chunks).
    """

    kind: str
    reading: Reading

    def segment(self, cursor: Cursor, layout: Mapping[str, Any] | None = None) -> Segment:
        """``cursor``'s segment of the epoch planned over ``layout``'s readers (default: this
        run's): the one hook the rest is derived from."""
        raise NotImplementedError

    def sizes(self, layout: Mapping[str, Any] | None) -> tuple[int, int]:
        """(world size, batch size) of ``layout``, or of this run's settings."""
        if layout is None:
            return self.reading.world.world_size, self.reading.batch_size
        return int(layout["world_size"]), int(layout["batch_size"])

    def batches(self, cursor: Cursor) -> int:
        """Batches each rank yields in ``cursor``'s segment."""
        return self.segment(cursor).batches

    def unread(self, layout: Mapping[str, Any], cursor: Cursor) -> Runs:
        """Epoch positions ``layout`` had not read at ``cursor``: every reader's share read
        up to its ``cursor.batches``-th batch, in order."""
        return self.segment(cursor, layout).unread_after(cursor.batches)

    def ended(self, layout: Mapping[str, Any], cursor: Cursor) -> bool:
        """Whether ``layout``'s readers had yielded every batch of ``cursor``'s segment."""
        return cursor.batches >= self.segment(cursor, layout).batches

    def consumed(self, cursor: Cursor) -> int:
        """Positions read at ``cursor`` in its segment, over all readers."""
        seg = self.segment(cursor)
        return seg.read_after(cursor.batches) * seg.readers

    def bulk(self, cursor: Cursor) -> Iterator[Any] | None:
        """None: batch by batch (a workload that reads many at a time overrides this)."""
        return None

    def layout(self) -> dict[str, Any]:
        """World size and batch size (a workload adds what else fixes who reads what)."""
        return self.reading.layout()

    def fingerprint(self) -> dict[str, Any]:
        """Seed, shuffle, equalize, drop_partial_batch (a workload adds the data's sizes and
        identity)."""
        return self.reading.fingerprint()

    def saved_state(self, state: Mapping[str, Any]) -> dict[str, Any]:
        """``state`` as it is (a workload that renamed a key since maps it)."""
        return dict(state)
