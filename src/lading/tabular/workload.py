"""Partitioned parquet as a workload of the one loader: rows planned over ranks, read by chunk.

The epoch's rows — row groups shuffled from ``(seed, epoch)`` — are positions the loader core
shares out (:mod:`lading.loading.plan`): one contiguous, equal range per rank, so every rank
takes the same number of batches and DDP never waits for a rank that ran out. A rank serves its
range in chunks of ``buffer_rows`` rows (whole batches), each chunk shuffled from ``(seed,
epoch, rank, chunk, segment)``; memory per process is the chunk being served and one more.

The batches depend on the ranks, the batch size and the chunk size only, never on
``num_workers``: DataLoader workers build the same batches as this process would, and a
chunk's batches are dealt to one worker (:mod:`lading.loading.deal`), so each chunk is
decoded once (the batches come back in order; the main process holds up to ``num_workers - 1``
chunks' batches waiting for their turn). Every batch is asked for by a key that holds the rows
to read (:class:`RowsKey`), so persistent workers need nothing from the main process, and a
resume jumps straight to the batch after the last one received, reading at most one chunk
again. With another world size, batch size or chunk size the resume is *elastic*: what the
saved layout left unread — whole chunks, plus the unread rows of one shuffled chunk per old
reader — is planned afresh over the new ranks, so every row not yet read is read exactly once
more this epoch (plus ``equalize="pad"``'s padding). (States saved before, when each worker
read a share of its own, resume the same way from their layout's ``num_workers``.)
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

import numpy as np
import torch

from lading.loading.order import Salt, permutation
from lading.loading.reading import Reading
from lading.loading.runs import Runs
from lading.loading.segment import Segment
from lading.loading.state import Cursor
from lading.loading.workload import SegmentWorkload
from lading.step import step_of
from lading.tabular.plan import Piece, epoch_pieces, share_of_runs
from lading.tabular.read import RowReader

ChunkRows = tuple[int, tuple[int, ...], tuple[int, ...]]  # (chunk, run starts, run stops)


def check_buffer_rows(buffer_rows: object) -> int | None:
    """``buffer_rows`` as a Python int if it is an int >= 1 (numpy's too, a bool is not one),
    None for the default; else an error naming it (was: -5 and 2.5 failed at the first batch
    inside pyarrow, 0 read as the default)."""
    if buffer_rows is None:
        return None
    says = (
        f"buffer_rows={buffer_rows!r}: buffer_rows must be an int >= 1 (rows shuffled "
        "together, rounded up to whole batches), or None for the default (the largest row "
        "group, at least 8 batches)"
    )
    if isinstance(buffer_rows, bool) or not isinstance(buffer_rows, (int, np.integer)):
        raise TypeError(says)
    if buffer_rows < 1:
        raise ValueError(says)
    return int(buffer_rows)


class RowsKey(NamedTuple):
    """Everything a worker needs to build one batch: rows ``[lo, hi)`` of a reader's share,
    and the epoch positions of each chunk of the share those rows fall in."""

    epoch: int
    segment: int
    reader: int
    lo: int
    hi: int
    chunks: tuple[ChunkRows, ...]


class ParquetWorkload(SegmentWorkload):
    """The rows of parquet row groups, planned over the ranks.

    Args:
        pieces: every row group (file, index, rows), from the footers.
        rows: reads fragments of row groups and turns them into tensors.
        data: a digest of the footers (other files of the same counts: another fingerprint).
        reading: the loader's settings (one reader per rank).
        buffer_rows: rows shuffled together (rounded up to whole batches, so that a batch
            never spans two chunks and a chunk's batches can go to one worker).
    """

    kind = "parquet"

    def __init__(
        self,
        pieces: list[Piece],
        rows: RowReader,
        data: str,
        reading: Reading,
        buffer_rows: int | None,
    ) -> None:
        self.pieces, self.rows, self._data, self.reading = pieces, rows, data, reading
        self.total_rows = sum(p.rows for p in pieces)
        size = reading.batch_size
        asked = check_buffer_rows(buffer_rows)
        wanted = asked if asked is not None else max(max(p.rows for p in pieces), 8 * size)
        self.buffer_rows = -(-wanted // size) * size
        reading.refuse_empty(self.total_rows, "rows")
        self._ordered: tuple[int, list[Piece]] | None = None
        self._chunks: list[tuple[tuple[Any, ...], Any]] = []  # the last two chunks served

    def __getstate__(self) -> dict[str, Any]:
        """What a DataLoader worker gets: no cached chunks (Arrow tables stay behind)."""
        state = dict(self.__dict__)
        state["_chunks"], state["_ordered"] = [], None
        return state

    # ------------------------------------------------------------------ planning

    def segment(self, cursor: Cursor, layout: Mapping[str, Any] | None = None) -> Segment:
        """``cursor``'s segment of the rows, in contiguous ranges over ``layout``'s readers (a
        layout with ``num_workers``: a state saved when each worker read a share of its own)."""
        world, size = self.sizes(layout)
        workers = 1 if layout is None else max(1, int(layout.get("num_workers", 1)))
        return Segment.of(self.total_rows, world * workers, cursor, self.reading, size)

    def keys(self, cursor: Cursor) -> Iterator[RowsKey]:
        """This rank's batches from ``cursor`` on, chunk after chunk of its share."""
        size, chunk_rows, rank = self.reading.batch_size, self.buffer_rows, self.reading.rank
        seg = self.segment(cursor)
        share = seg.share(rank)
        last: ChunkRows | None = None  # the latest chunk: it serves many batches
        for i in range(cursor.batches, seg.batches):
            lo, hi = i * size, seg.read_after(i + 1)
            chunk = lo // chunk_rows  # the batch's one chunk (chunks are whole batches)
            if last is None or last[0] != chunk:
                rows = share.slice(chunk * chunk_rows, (chunk + 1) * chunk_rows)
                last = (chunk, tuple(rows.starts.tolist()), tuple(rows.stops.tolist()))
            yield RowsKey(cursor.epoch, cursor.segment, rank, lo, hi, (last,))

    def group(self, key: RowsKey) -> tuple[int, int, int, int]:
        """Batches of one chunk share its read: the loader deals them to one worker."""
        return key.epoch, key.segment, key.reader, key.chunks[0][0]

    def _chunk_order(self, epoch: int, reader: int, chunk: int, segment: int, size: int) -> Any:
        reading = self.reading
        return permutation(
            size,
            reading.seed,
            Salt.CHUNK_ORDER,
            epoch,
            reader,
            chunk,
            segment,
            shuffle=reading.shuffle,
        )

    def layout(self) -> dict[str, Any]:
        """World size, batch size and the chunk size (another: an elastic resume)."""
        return {**self.reading.layout(), "buffer_rows": self.buffer_rows}

    def fingerprint(self) -> dict[str, Any]:
        """The settings', the row and row-group counts and a digest of the footers."""
        return {
            "rows": self.total_rows,
            "row_groups": len(self.pieces),
            "data": self._data,  # other files of the same row and row-group counts: refused
            **self.reading.fingerprint(),
        }

    def _served(self, layout: Mapping[str, Any], cursor: Cursor) -> tuple[Segment, list[Runs]]:
        """What each reader of ``layout`` had read at ``cursor``, as positions of its share:
        whole chunks, plus the first rows of one shuffled chunk. A layout with
        ``num_workers`` is a state saved when each worker read a share of its own, its
        batches taken from the workers in turn."""
        workers = max(1, int(layout.get("num_workers", 1)))
        chunk_rows = int(layout["buffer_rows"])
        seg = self.segment(cursor, layout)
        served = []
        for reader in range(seg.readers):
            rows = seg.read_after(len(range(reader % workers, cursor.batches, workers)))
            chunk, into = divmod(rows, chunk_rows)
            parts = [Runs([0], [chunk * chunk_rows])]
            if into:
                lo, hi = chunk * chunk_rows, min((chunk + 1) * chunk_rows, seg.plan.each)
                order = self._chunk_order(cursor.epoch, reader, chunk, cursor.segment, hi - lo)
                parts.append(Runs.of_positions(np.sort(order[:into]) + lo))
            served.append(Runs.concat(parts))
        return seg, served

    def ended(self, layout: Mapping[str, Any], cursor: Cursor) -> bool:
        """Whether ``layout``'s ranks had yielded every batch of the segment (with
        ``num_workers``, a rank's batches are its workers' together, taken in turn)."""
        workers = max(1, int(layout.get("num_workers", 1)))
        return cursor.batches >= self.segment(cursor, layout).batches * workers

    def unread(self, layout: Mapping[str, Any], cursor: Cursor) -> Runs:
        """What ``layout`` left unread at ``cursor``: whole chunks, and of one chunk per
        reader the rows its shuffle had not reached."""
        seg, served = self._served(layout, cursor)
        return seg.unread(served)

    def saved_state(self, state: Mapping[str, Any]) -> dict[str, Any]:
        """``state`` with its layout as this workload writes it: one saved when each worker
        read a share of its own, by 0 or 1 workers, read the rows read now (a bitwise resume;
        from more workers, an elastic one)."""
        layout = dict(state.get("layout", {}))
        if int(layout.get("num_workers", 0)) <= 1:
            layout.pop("num_workers", None)
        return {**state, "layout": layout}

    # ------------------------------------------------------------------ reading

    def _pieces_of(self, epoch: int) -> list[Piece]:
        if self._ordered is None or self._ordered[0] != epoch:
            reading = self.reading
            self._ordered = (epoch, epoch_pieces(self.pieces, reading.seed, epoch, reading.shuffle))
        return self._ordered[1]

    def _chunk(self, key: RowsKey, chunk: int, rows: Runs) -> Any:
        """One chunk of a reader's share, shuffled; the last two are kept (a batch may span
        two, and the next batch of the same reader usually starts in the last one)."""
        # the rows too: two elastic states loaded in turn both resume as segment 1, other rows
        ident = (
            key.epoch,
            key.segment,
            key.reader,
            chunk,
            rows.starts.tobytes(),
            rows.stops.tobytes(),
        )
        for cached, table in self._chunks:
            if cached == ident:
                return table
        # drop the older chunk before reading: held while the new one is built, it would add a
        # third chunk to the peak (the benchmark's anonymous memory, +10%)
        self._chunks = self._chunks[-1:]
        step = step_of(key.epoch, key.lo // self.reading.batch_size)  # the announced step (remote)
        table = self.rows.read(share_of_runs(self._pieces_of(key.epoch), rows), step)
        if self.reading.shuffle:
            order = self._chunk_order(key.epoch, key.reader, chunk, key.segment, table.num_rows)
            table = table.take(order)
        self._chunks = [*self._chunks, (ident, table)]
        return table

    def settle(self, timeout: float) -> None:
        """Remote row groups: wait, at most ``timeout`` seconds, until the GETs the loader's
        announcements asked for are answered (a loader that closes calls it)."""
        settle = getattr(self.rows, "settle", None)
        if callable(settle):
            settle(timeout)

    def build(self, key: RowsKey) -> dict[str, torch.Tensor]:
        """The rows ``key`` names as a dict of tensors (list columns padded, + lengths)."""
        import pyarrow as pa

        parts = []
        for chunk, starts, stops in key.chunks:
            table = self._chunk(key, chunk, Runs(starts, stops))
            first = chunk * self.buffer_rows
            lo, hi = max(key.lo, first) - first, min(key.hi, first + table.num_rows) - first
            parts.append(table.slice(lo, hi - lo))
        table = pa.concat_tables(parts, promote_options="default") if len(parts) > 1 else parts[0]
        return self.rows.tensors(table)  # (nullability may differ: check_schemas)
