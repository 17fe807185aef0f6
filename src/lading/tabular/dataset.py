"""PartitionedParquet: batches of tensors from parquet row groups, equal on every rank.

The files are local, or objects in object storage (``s3://bucket/sessions/``), read through
the node cache as the remote document store reads (:mod:`lading.tabular.remote`).

``PartitionedParquet(paths, batch_size, columns=..., list_columns=...)`` is the one loader of
every workload (:class:`lading.loading.Loader`) over the rows of the files: in this process, or
with ``num_workers=2`` in DataLoader workers, the same batches at any worker count, each chunk
decoded by one worker (:mod:`lading.tabular.workload`, which says how rows are planned, shuffled,
read and resumed).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence
from typing import Any

from lading.loading.announce import LOOKAHEAD, announcer
from lading.loading.hooks import Hooks
from lading.loading.loader import Loader, Workers
from lading.loading.reading import Reading, refuse_drop_last
from lading.remote.settings import RemoteSettings
from lading.sources.tables import import_pyarrow
from lading.tabular.files import (
    PathsArg,
    check_schemas,
    footer_digest,
    parquet_files,
    path_list,
    pieces_of,
    remote_urls,
    scan,
)
from lading.tabular.plan import Piece
from lading.tabular.read import (
    RowReader,
    check_columns,
    check_counted_nulls,
    check_list_options,
    stamp_of,
)
from lading.tabular.remote import RemoteParquet, RemoteRowReader, warn_if_too_small
from lading.tabular.remote_plan import CHUNKS_AHEAD, announced_reads
from lading.tabular.workload import ParquetWorkload, check_buffer_rows
from lading.world import World


class PartitionedParquet(Loader):
    """Parquet rows as dicts of tensors, the same number of batches on every rank.

    Args:
        paths: parquet files and/or folders (read recursively): one, or any iterable of them
            in the order to read (a list; a generator is listed once: sort ``Path.glob``'s,
            whose order is the file system's); or object-store URLs
            (``s3://``, ``gs://``, ``az://``, any fsspec protocol): objects ending in
            ``.parquet`` and/or prefixes, whose ``*.parquet`` objects are read as a local
            folder's files are (sorted by path parts; build debris and names starting with
            ``_`` or ``.`` skipped, as pyarrow skips them: Spark's ``_temporary/``; a file reached
            twice, or a nested ``lading repartition`` output, refused). Footers are staged
            once per node; row groups come by ranged GETs through the node cache, fetched
            ahead in the loader's order (:mod:`lading.tabular.remote`).
        batch_size: rows per batch.
        columns: columns to read (default: all; an empty list is refused).
        list_columns: ``{name: max_len}`` of ragged list columns: padded or truncated (keeping
            the most recent items) to ``max_len``, with a ``<name>_lengths`` tensor (a column
            read of that name is refused).
        pad: ``"right"`` or ``"left"`` padding of list columns (with ``pad_value``).
        shuffle: shuffle row groups and rows within chunks, from ``(seed, epoch)``.
        seed: fixes every order.
        equalize: ``"pad"`` (repeat fewer rows than readers, so no row is left out) or
            ``"truncate"`` (leave as many out).
        drop_partial_batch: leave out each reader's last batch when it is not full.
        world: rank and world size (default: detected; always the global rank).
        buffer_rows: rows shuffled together, an int >= 1 (default: the largest row group,
            at least 8 batches), rounded up to whole batches.
        pad_value: fill of list columns; one a list column's items cannot hold as it is
            (-1.5 in an int list, -1 in a uint8 one) is refused when the dataset opens.
        padded_with: the value the files' lists already end with as padding (the T4R
            preprocessing pads item lists to 20 with 0): a list's trailing run of it is
            dropped before it is truncated, padded and counted, so ``<name>_lengths`` is the
            session's length and a cut keeps its most recent items (default None: every
            entry is an item).
        num_workers, pin_memory, prefetch_factor, persistent_workers, multiprocessing_context:
            DataLoader workers build the batches, the same at any count (0: this process
            reads them); each chunk's batches are built by one worker.
        read_ahead: with ``num_workers=0``, batches built ahead on a thread while a step runs
            (:mod:`lading.loading.read_ahead`); default 2 for URLs, else 0.
        drop_last: refused with a TypeError naming lading's two arguments for it.
        cache, cache_bytes, storage_options: for URLs: the node cache's folder and cap (as
            ``lading.open_store``'s; defaults from ``$LADING_CACHE`` and
            ``$LADING_REMOTE_CACHE_BYTES``), the client's options (credentials from the
            environment). A cap whose region (the largest block it keeps) is smaller than a
            row group warns: such row groups are read around the cache, fetched at every
            read.

    Raises:
        ValueError: a column is missing or cannot become a tensor, the files disagree on the
            columns read, a file is not parquet, there are no rows, or fewer rows than ranks
            (the message names the file and says what to change); while reading, a null in a
            column read (the fix: fill it, e.g. ``pyarrow.compute.fill_null``), or a local
            file rewritten since the loader planned its rows from its footer (named: make
            the loader again once the files are final); URLs and local paths mixed, or a
            prefix holding no parquet object.
        RemoteNotSupportedError: a URL whose scheme lading cannot reach.
        RemoteReadError: a remote call failed for good, or an object was rewritten while
            the dataset read it (never read mixed: every GET is pinned to its ETag).
    """

    def __init__(
        self,
        paths: PathsArg,
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
        padded_with: int | float | None = None,
        num_workers: int = 0,
        pin_memory: bool = False,
        prefetch_factor: int | None = None,
        persistent_workers: bool | None = None,
        multiprocessing_context: str | None = None,
        read_ahead: int | None = None,
        drop_last: None = None,
        cache: str | os.PathLike[str] | None = None,
        cache_bytes: int | str | None = None,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        if isinstance(batch_size, (list, tuple)):
            raise TypeError(
                f"PartitionedParquet(paths, {list(batch_size)!r}, ...): columns are a keyword "
                f"now, after batch_size: PartitionedParquet(paths, batch_size, columns=...)"
            )
        refuse_drop_last(drop_last, "PartitionedParquet")
        reading = Reading.of(batch_size, shuffle, seed, equalize, drop_partial_batch, world)
        batch_size = reading.batch_size
        buffer_rows = check_buffer_rows(buffer_rows)  # before a file is opened
        list_columns = check_list_options(list_columns or {}, pad)
        import_pyarrow()  # (or one line naming the extra, not a bare import error later)
        workers = Workers(
            num_workers, pin_memory, prefetch_factor, persistent_workers, multiprocessing_context
        )
        paths = path_list(paths)  # read twice below: a generator (Path.glob) listed once
        with contextlib.ExitStack() as undo:
            urls = remote_urls(paths)
            self.remote: RemoteParquet | None = None
            if urls:
                settings = RemoteSettings.of(cache, cache_bytes, storage_options)
                self.remote = remote = RemoteParquet.open(urls, settings)
                undo.callback(remote.close)  # (a check below refusing: its node let go)
                self.files: list[Any] = list(remote.urls)
                footers = [remote.metadata(url) for url in remote.urls]
                schemas = [f.schema.to_arrow_schema() for f in footers]
                self.pieces: list[Piece] = pieces_of(remote.urls, footers)
                sizes: list[int] | None = [f.size for f in remote.files]
            else:
                self.files = parquet_files(paths)
                planned = {str(f): stamp_of(str(f)) for f in self.files}  # before the footers
                self.pieces, schemas, footers = scan(self.files)
                sizes = None
            counts = [f.num_rows for f in footers]
            first = next((i for i, n in enumerate(counts) if n), 0)  # a file of rows: its types
            self.columns = list(columns) if columns is not None else list(schemas[first].names)
            check_schemas(self.files, schemas, self.columns, counts)
            if padded_with is not None and not list_columns:
                raise ValueError(
                    f"padded_with={padded_with!r} strips the padding of list columns, and "
                    "list_columns= names none: name them, or leave padded_with out"
                )
            check_columns(
                schemas[first], self.columns, list_columns, self.files[first], pad_value,
                padded_with,
            )  # fmt: skip
            flat = [c for c in self.columns if c not in list_columns]
            if self.remote is None:
                rows = RowReader(
                    self.columns, list_columns, pad, pad_value, planned, padded_with=padded_with
                )
                undo.callback(rows.close)
                check_counted_nulls(self.files, footers, flat)
            else:
                self.remote.columns = list(self.columns)
                rows = RemoteRowReader(
                    self.remote, self.columns, list_columns, pad, pad_value,
                    padded_with=padded_with,
                )  # fmt: skip
                undo.callback(rows.close)
                check_counted_nulls(self.files, footers, flat, self.remote.read_group)
                warn_if_too_small(self.remote)
            workload = ParquetWorkload(
                self.pieces, rows, footer_digest(self.files, footers, sizes), reading, buffer_rows
            )
            announce = None
            if self.remote is not None:  # row groups ahead are fetched as keys are handed out
                # a chunk is read at its first batch and serves buffer_rows / batch_size batches:
                # announce CHUNKS_AHEAD chunks ahead, so their GETs (~30 ms each) overlap
                chunk = workload.buffer_rows // batch_size
                ahead = max(LOOKAHEAD, CHUNKS_AHEAD * chunk)
                announce = announcer(Hooks.of(self.remote), announced_reads(workload), ahead)
            workers = (
                workers.with_read_ahead(read_ahead, default=0)
                if self.remote is None
                else workers.for_remote(
                    read_ahead, f"{len(self.files)} parquet files ({self.files[0]}, ...)"
                )
            )
            super().__init__(workload, workers, announce=announce)
            self.total_rows, self.buffer_rows = workload.total_rows, workload.buffer_rows
            self._parquet = workload
            undo.pop_all()  # opened: the loader's own, closed by close()

    def close(self) -> None:
        """As :meth:`Loader.close`, and the files this loader opened (it opened them itself,
        so they are its own to close): local files' handles closed; URLs' node caches let go,
        no thread left for them. A later pass opens them again."""
        super().close()
        self._parquet.rows.close()
        if self.remote is not None:
            self.remote.close()

    def cache_stats(self) -> dict[str, Any]:
        """The node cache's figures of a dataset read from URLs (``gets``, ``bytes_fetched``,
        ``bytes_used``, ``hits``, ``misses``, ``bytes_cached``, ``cap``, ...: see
        :meth:`lading.stores.remote.store.RemoteStore.cache_stats`); empty for local files."""
        return {} if self.remote is None else self.remote.cache_stats()
