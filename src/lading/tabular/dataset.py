"""PartitionedParquet: batches of tensors from parquet row groups, equal on every rank.

``PartitionedParquet(paths, batch_size, columns=..., list_columns=...)`` is the one loader of
every workload (:class:`lading.loading.Loader`) over the rows of the files: in this process, or
with ``num_workers=2`` in DataLoader workers, the same batches at any worker count, each chunk
decoded by one worker (:mod:`lading.tabular.workload`, which says how rows are planned, shuffled,
read and resumed).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from lading.loading.loader import Loader, Workers
from lading.loading.reading import Reading
from lading.tabular.files import check_schemas, footer_digest, parquet_files, scan
from lading.tabular.plan import Piece
from lading.tabular.read import RowReader, check_columns, check_counted_nulls, check_list_options
from lading.tabular.workload import ParquetWorkload
from lading.world import World


class PartitionedParquet(Loader):
    """Parquet rows as dicts of tensors, the same number of batches on every rank.

    Args:
        paths: parquet files and/or folders (read recursively).
        batch_size: rows per batch.
        columns: columns to read (default: all).
        list_columns: ``{name: max_len}`` of ragged list columns: padded or truncated (keeping
            the most recent items) to ``max_len``, with a ``<name>_lengths`` tensor.
        pad: ``"right"`` or ``"left"`` padding of list columns (with ``pad_value``).
        shuffle: shuffle row groups and rows within chunks, from ``(seed, epoch)``.
        seed: fixes every order.
        equalize: ``"pad"`` (repeat fewer rows than readers, so no row is left out) or
            ``"truncate"`` (leave as many out).
        drop_partial_batch: leave out each reader's last batch when it is not full.
        world: rank and world size (default: detected; always the global rank).
        buffer_rows: rows shuffled together (default: the largest row group, at least
            8 batches), rounded up to whole batches.
        pad_value: fill of list columns.
        num_workers, pin_memory, prefetch_factor, persistent_workers, multiprocessing_context:
            DataLoader workers build the batches, the same at any count (0: this process
            reads them); each chunk's batches are built by one worker.
        drop_last: refused with a TypeError naming lading's two arguments for it.

    Raises:
        ValueError: a column is missing or cannot become a tensor, the files disagree on the
            columns read, a file is not parquet, there are no rows, or fewer rows than ranks
            (the message names the file and says what to change); while reading, a null in a
            column read (the fix: fill it, e.g. ``pyarrow.compute.fill_null``).
    """

    def __init__(
        self,
        paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        batch_size: int,
        *,
        columns: Sequence[str] | None = None,
        list_columns: Mapping[str, int] | None = None,
        pad: str = "right",
        shuffle: bool = True,
        seed: int = 0,
        equalize: str = "pad",
        drop_partial_batch: bool = False,
        world: World | None = None,
        buffer_rows: int | None = None,
        pad_value: int | float = 0,
        num_workers: int = 0,
        pin_memory: bool = False,
        prefetch_factor: int | None = None,
        persistent_workers: bool | None = None,
        multiprocessing_context: str | None = None,
        drop_last: None = None,
    ) -> None:
        if isinstance(batch_size, (list, tuple)):
            raise TypeError(
                f"PartitionedParquet(paths, {list(batch_size)!r}, ...): columns are a keyword "
                f"now, after batch_size: PartitionedParquet(paths, batch_size, columns=...)"
            )
        reading = Reading.of(
            "PartitionedParquet", batch_size, shuffle=shuffle, seed=seed, equalize=equalize,
            drop_partial_batch=drop_partial_batch, world=world, drop_last=drop_last,
        )  # fmt: skip
        list_columns = check_list_options(list_columns or {}, pad)
        workers = Workers(
            num_workers, pin_memory, prefetch_factor, persistent_workers, multiprocessing_context
        )
        self.files = parquet_files(paths)
        self.pieces: list[Piece]
        self.pieces, schemas, footers = scan(self.files)
        self.columns = list(columns) if columns is not None else list(schemas[0].names)
        check_schemas(self.files, schemas, self.columns)
        check_columns(schemas[0], self.columns, list_columns, self.files[0])
        check_counted_nulls(self.files, footers, [c for c in self.columns if c not in list_columns])
        workload = ParquetWorkload(
            self.pieces,
            RowReader(self.columns, list_columns, pad, pad_value),
            footer_digest(self.files, footers),
            reading,
            buffer_rows,
        )
        super().__init__(workload, workers)
        self.total_rows, self.buffer_rows = workload.total_rows, workload.buffer_rows
