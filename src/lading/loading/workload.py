"""What a workload hands the loader: its positions, how a run of them becomes a batch, a bulk read.

A workload (map-style samples, LM streams and windows, parquet rows) is a :class:`Workload`; the
one loader (:class:`~lading.loading.loader.Loader`) iterates it, counts its batches, keeps the
cursor and saves it. A workload holds no position of its own: every method is told the cursor it
is asked about, so its answers are functions of (settings, cursor) that any process can
compute for any position: a DataLoader worker builds a batch from its key alone, a resume plans
the saved layout's segment to find what it left unread. Sharding, equalizing and the
arithmetic of segments are the core's too (:class:`~lading.loading.segment.Segment`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from lading.loading.runs import Runs
from lading.loading.state import Cursor


class Workload(Protocol):
    """The planning and building side of a loader, for one workload.

    Attributes:
        kind: the workload's name in a saved state (``"map"``, ``"lm"``, ``"parquet"``): a
            state of another kind is refused.

    A workload whose consecutive batches share a costly read (parquet: a decoded chunk) also has
    ``group(key) -> Hashable``: the loader then deals each run of keys of one group to one
    DataLoader worker and puts the batches back in order (:mod:`lading.loading.deal`).
    """

    kind: str

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

    def consumed(self, cursor: Cursor) -> int:
        """Positions read at ``cursor`` in its segment, over all ranks (for logs and humans)."""
        ...
