"""PartitionedParquet: batches of tensors from parquet row groups, equal on every rank.

The epoch's rows — row groups shuffled from ``(seed, epoch)`` — are positions the loader core
shares out (:mod:`lading.loading.plan`): ``readers = world_size x num_workers`` contiguous,
equal ranges, so every rank takes the same number of batches and DDP never waits for a rank
that ran out. Each reader serves its range in chunks of ``buffer_rows`` rows, each chunk
shuffled from ``(seed, epoch, reader, chunk, segment)``; memory per worker is the chunk being
served and one row group more. The rank's batches interleave its readers' (reader ``w`` gives
batches ``w, w + workers, …``), which the DataLoader's round-robin over workers keeps local:
each worker reads one reader's chunks.

Every batch is asked for by a key that holds the rows to read, so persistent DataLoader workers
need nothing from the main process, and a resume jumps straight to the batch after the last one
received, reading at most one chunk again. With another world size, number of workers or batch
size the resume is *elastic*: what the saved layout left unread — whole chunks, plus the unread
rows of one shuffled chunk per old reader — is planned afresh over the new readers, so every row
not yet read is read exactly once more this epoch (plus ``equalize="pad"``'s padding).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch
from torch.utils.data import Dataset

from lading.loading.loader import BatchKeyed
from lading.loading.order import Salt, permutation
from lading.loading.plan import (
    batch_count,
    check_batch_size,
    check_epoch,
    check_equalize,
    refuse_drop_last,
)
from lading.loading.runs import Runs
from lading.loading.segment import Segment
from lading.loading.source import StatefulSource
from lading.loading.state import Cursor
from lading.tabular.files import check_schemas, footer_digest, parquet_files, scan
from lading.tabular.plan import Piece, epoch_pieces, share_of_runs
from lading.tabular.read import (
    RowReader,
    check_columns,
    check_counted_nulls,
    check_list_options,
)
from lading.world import World

ChunkRows = tuple[int, tuple[int, ...], tuple[int, ...]]  # (chunk, run starts, run stops)


class RowsKey(NamedTuple):
    """Everything a worker needs to build one batch: rows ``[lo, hi)`` of a reader's share,
    and the epoch positions of each chunk of the share those rows fall in."""

    epoch: int
    segment: int
    reader: int
    lo: int
    hi: int
    chunks: tuple[ChunkRows, ...]


class PartitionedParquet(BatchKeyed, StatefulSource, Dataset[dict[str, torch.Tensor]]):
    """Parquet rows as dicts of tensors, the same number of batches on every rank.

    Args:
        paths: parquet files and/or folders (read recursively).
        columns: columns to read (default: all).
        batch_size: rows per batch.
        list_columns: ``{name: max_len}`` of ragged list columns: padded or truncated (keeping
            the most recent items) to ``max_len``, with a ``<name>_lengths`` tensor.
        pad: ``"right"`` or ``"left"`` padding of list columns (with ``pad_value``).
        shuffle: shuffle row groups and rows within chunks, from ``(seed, epoch)``.
        seed: fixes every order.
        equalize: ``"pad"`` (repeat fewer rows than readers, so no row is left out) or
            ``"truncate"`` (leave as many out).
        world: rank and world size (default: detected; always the global rank).
        buffer_rows: rows shuffled together (default: the largest row group, at least
            8 batches).
        pad_value: fill of list columns.
        drop_partial_batch: leave out each reader's last batch when it is not full.
        drop_last: refused with a TypeError naming lading's two arguments for it.

    Raises:
        ValueError: a column is missing or cannot become a tensor, the files disagree on the
            columns read, a file is not parquet, there are no rows, or fewer rows than ranks
            (the message names the file and says what to change); while reading, a null in a
            column read (the fix: fill it, e.g. ``pyarrow.compute.fill_null``).
    """

    kind = "parquet"

    def __init__(
        self,
        paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        columns: Sequence[str] | None = None,
        batch_size: int = 32,
        list_columns: Mapping[str, int] | None = None,
        pad: str = "right",
        shuffle: bool = True,
        seed: int = 0,
        *,
        equalize: str = "pad",
        world: World | None = None,
        buffer_rows: int | None = None,
        pad_value: int | float = 0,
        drop_partial_batch: bool = False,
        drop_last: None = None,
    ) -> None:
        super().__init__()
        refuse_drop_last(drop_last, "PartitionedParquet")
        batch_size = check_batch_size(batch_size)
        list_columns = check_list_options(list_columns or {}, pad)
        self.files = parquet_files(paths)
        self.pieces: list[Piece]
        self.pieces, schemas, footers = scan(self.files)
        self.columns = list(columns) if columns is not None else list(schemas[0].names)
        check_schemas(self.files, schemas, self.columns)
        check_columns(schemas[0], self.columns, list_columns, self.files[0])
        check_counted_nulls(self.files, footers, [c for c in self.columns if c not in list_columns])
        self._data = footer_digest(self.files, footers)
        self.rows = RowReader(self.columns, list_columns, pad, pad_value)
        batch_count(0, batch_size, drop_partial_batch)  # checks batch_size
        self.batch_size, self.shuffle, self.seed = batch_size, shuffle, seed
        self.equalize, self.drop_partial_batch = check_equalize(equalize), drop_partial_batch
        self.world = world or World.detect()
        self.total_rows = sum(p.rows for p in self.pieces)
        self.buffer_rows = buffer_rows or max(max(p.rows for p in self.pieces), 8 * batch_size)
        self.num_workers = 0  # DataLoader workers per rank; set by loader()
        self._check_readers()
        self.cursor = Cursor()
        self._ordered: tuple[int, list[Piece]] | None = None
        self._chunks: list[tuple[tuple[int, ...], Any]] = []  # the last two chunks served

    def __getstate__(self) -> dict[str, Any]:
        """What a DataLoader worker gets: no cached chunks (Arrow tables stay behind)."""
        state = dict(self.__dict__)
        state["_chunks"], state["_ordered"] = [], None
        return state

    @property
    def epoch(self) -> int:
        return self.cursor.epoch

    def _check_readers(self) -> None:
        readers = self.world.world_size * max(1, self.num_workers)
        check_epoch(
            self.total_rows,
            readers,
            self.equalize,
            self.batch_size,
            self.drop_partial_batch,
            items="rows",
            readers_are="world_size x num_workers",
        )

    # ------------------------------------------------------------------ planning

    def set_epoch(self, epoch: int) -> None:
        """Start ``epoch`` (reshuffles; the same on every rank)."""
        self.cursor.start_epoch(epoch)

    def _segment(self, readers: int, cursor: Cursor, batch_size: int) -> Segment:
        """``cursor``'s segment of the rows, in contiguous ranges over ``readers``."""
        return Segment.of(
            self.total_rows,
            readers,
            cursor,
            equalize=self.equalize,
            batch_size=batch_size,
            drop_partial_batch=self.drop_partial_batch,
        )

    def _workers(self) -> int:
        return max(1, self.num_workers)

    def batches(self) -> int:
        """Batches this rank yields in the current segment of the epoch."""
        return self.batches_per_rank(self.num_workers)

    def batches_per_rank(self, num_workers: int = 0) -> int:
        """Batches every rank yields this epoch with ``num_workers`` DataLoader workers."""
        workers = max(1, num_workers)
        return (
            self._segment(self.world.world_size * workers, self.cursor, self.batch_size).batches
            * workers
        )

    def keys(self) -> Iterator[RowsKey]:
        """This rank's batches from the cursor on, reader ``i % workers`` giving batch ``i``."""
        workers, size, chunk_rows = self._workers(), self.batch_size, self.buffer_rows
        cursor = self.cursor
        seg = self._segment(self.world.world_size * workers, cursor, size)
        shares: dict[int, Runs] = {}
        last: dict[int, ChunkRows] = {}  # each reader's latest chunk: it serves many batches

        def chunk_of(reader: int, chunk: int) -> ChunkRows:
            """A chunk's epoch rows, cut from the reader's share once."""
            if reader not in last or last[reader][0] != chunk:
                if reader not in shares:
                    shares[reader] = seg.share(reader)
                rows = shares[reader].slice(chunk * chunk_rows, (chunk + 1) * chunk_rows)
                last[reader] = (chunk, tuple(rows.starts.tolist()), tuple(rows.stops.tolist()))
            return last[reader]

        for i in range(cursor.batches, self.batches()):
            reader = self.world.rank * workers + i % workers
            lo = (i // workers) * size
            hi = seg.read_after(i // workers + 1)
            chunks = tuple(
                chunk_of(reader, chunk)
                for chunk in range(lo // chunk_rows, (hi - 1) // chunk_rows + 1)
            )
            yield RowsKey(cursor.epoch, cursor.segment, reader, lo, hi, chunks)

    def _chunk_order(self, epoch: int, reader: int, chunk: int, segment: int, size: int) -> Any:
        return permutation(
            size, self.seed, Salt.CHUNK_ORDER, epoch, reader, chunk, segment, shuffle=self.shuffle
        )

    def layout(self) -> dict[str, Any]:
        return {
            "world_size": self.world.world_size,
            "num_workers": self.num_workers,
            "batch_size": self.batch_size,
            "buffer_rows": self.buffer_rows,
        }

    def fingerprint(self) -> dict[str, Any]:
        return {
            "rows": self.total_rows,
            "row_groups": len(self.pieces),
            "data": self._data,  # other files of the same row and row-group counts: refused
            "seed": self.seed,
            "shuffle": self.shuffle,
            "equalize": self.equalize,
            "drop_partial_batch": self.drop_partial_batch,
        }

    def _served(self, layout: Mapping[str, Any], cursor: Cursor) -> tuple[Segment, list[Runs]]:
        """What each reader of ``layout`` had read at ``cursor``, as positions of its share:
        whole chunks, plus the first rows of one shuffled chunk."""
        workers = max(1, int(layout["num_workers"]))
        size, chunk_rows = int(layout["batch_size"]), int(layout["buffer_rows"])
        seg = self._segment(int(layout["world_size"]) * workers, cursor, size)
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

    def unread(self, layout: Mapping[str, Any], cursor: Cursor) -> Runs:
        seg, served = self._served(layout, cursor)
        return seg.unread(served)

    def consumed(self) -> int:
        workers, batches = self._workers(), self.cursor.batches
        seg = self._segment(self.world.world_size * workers, self.cursor, self.batch_size)
        counts = [len(range(w, batches, workers)) for w in range(workers)]
        return self.world.world_size * sum(seg.read_after(c) for c in counts)

    # ------------------------------------------------------------------ reading

    def _pieces_of(self, epoch: int) -> list[Piece]:
        if self._ordered is None or self._ordered[0] != epoch:
            self._ordered = (epoch, epoch_pieces(self.pieces, self.seed, epoch, self.shuffle))
        return self._ordered[1]

    def _chunk(self, key: RowsKey, chunk: int, rows: Runs) -> Any:
        """One chunk of a reader's share, shuffled; the last two are kept (a batch may span
        two, and the next batch of the same reader usually starts in the last one)."""
        ident = (key.epoch, key.segment, key.reader, chunk)
        for cached, table in self._chunks:
            if cached == ident:
                return table
        # drop the older chunk before reading: held while the new one is built, it would add a
        # third chunk to the peak (the benchmark's anonymous memory, +10%)
        self._chunks = self._chunks[-1:]
        table = self.rows.read(share_of_runs(self._pieces_of(key.epoch), rows))
        if self.shuffle:
            order = self._chunk_order(key.epoch, key.reader, chunk, key.segment, table.num_rows)
            table = table.take(order)
        self._chunks = [*self._chunks, (ident, table)]
        return table

    def __getitem__(self, key: RowsKey) -> dict[str, torch.Tensor]:
        import pyarrow as pa

        parts = []
        for chunk, starts, stops in key.chunks:
            table = self._chunk(key, chunk, Runs(starts, stops))
            first = chunk * self.buffer_rows
            lo, hi = max(key.lo, first) - first, min(key.hi, first + table.num_rows) - first
            parts.append(table.slice(lo, hi - lo))
        return self.rows.tensors(pa.concat_tables(parts) if len(parts) > 1 else parts[0])

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        """This rank's batches of the current epoch from where it stands, read in this
        process; the position advances with each batch handed out (``state_dict()``), as
        the LM loader's in-process iteration and every ``.loader()`` do."""
        for key in self.keys():
            batch = self[key]
            self.cursor.batches += 1
            yield batch

    def __len__(self) -> int:
        """Batches left in the current epoch on this rank (the same on every rank)."""
        return self.batches() - self.cursor.batches

    def epoch_length(self) -> int:
        """Batches of the current epoch (segment) on this rank, read and left."""
        return self.batches()

    def _set_workers(self, num_workers: int) -> None:
        """Readers are ``world_size x num_workers``: check every one gets a row."""
        self.num_workers = num_workers
        self._check_readers()
