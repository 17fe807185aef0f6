"""PartitionedParquet: batches of tensors from parquet row groups, equal on every rank.

Each (rank, DataLoader worker) reads its planned share (see :mod:`lading.tabular.plan`) in
chunks of ``buffer_rows`` rows, shuffles each chunk with a generator seeded from
``(seed, epoch, reader, chunk)`` and cuts batches from the shuffled stream. Memory per worker:
the chunk being served plus the one being read, i.e. a few row groups. Because chunks have
fixed boundaries in the reader's row sequence, a resume jumps straight to the batch after the
last one received and reads at most one chunk again.

A checkpoint can also be resumed with another world size, number of workers or batch size
(*elastic*). Which rows each old reader served is known from the saved layout and batch
count: whole chunks, plus the first rows of one shuffled chunk. What is left — the unread
rows, in the epoch's row order, kept as :class:`lading.split.Runs` — is cut into equal shares
for the new readers, so every row not yet read is read exactly once more this epoch (plus the
padding that ``equalize="pad"`` adds to even out shares). The state stores only the layouts
and batch counts; the remainder is recomputed from them on load.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from lading.split import Runs
from lading.tabular.pad import pad_lists
from lading.tabular.plan import (
    Share,
    chunk_order,
    epoch_pieces,
    parquet_files,
    pieces_of,
    rows_per_reader,
    share_of,
    share_of_runs,
)
from lading.world import World

STATE_VERSION = 2
LAYOUT_KEYS = ("world_size", "num_workers", "batch_size", "buffer_rows", "equalize", "drop_last")


class PartitionedParquet(IterableDataset[dict[str, torch.Tensor]]):
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
        drop_last: drop each reader's last partial batch.
        equalize: ``"truncate"`` or ``"pad"`` (see :mod:`lading.tabular.plan`).
        world: rank and world size (default: detected; always the global rank).
        buffer_rows: rows shuffled together (default: the largest row group, at least
            8 batches).
        pad_value: fill of list columns.

    Raises:
        ValueError: a column is missing or cannot become a tensor, or there are fewer rows
            than ranks (the message says what to change).
    """

    def __init__(
        self,
        paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        columns: Sequence[str] | None = None,
        batch_size: int = 32,
        list_columns: Mapping[str, int] | None = None,
        pad: str = "right",
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        equalize: str = "truncate",
        world: World | None = None,
        buffer_rows: int | None = None,
        pad_value: int | float = 0,
    ) -> None:
        import pyarrow.parquet as pq

        super().__init__()
        self.files = parquet_files(paths)
        self.pieces = pieces_of(self.files)
        schema = pq.read_schema(self.files[0])
        self.columns = list(columns) if columns is not None else list(schema.names)
        self.list_columns = dict(list_columns or {})
        _check_columns(schema, self.columns, self.list_columns, self.files[0])
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.batch_size, self.pad, self.shuffle, self.seed = batch_size, pad, shuffle, seed
        self.drop_last, self.equalize, self.pad_value = drop_last, equalize, pad_value
        self.world = world or World.detect()
        self.total_rows = sum(p.rows for p in self.pieces)
        rows_per_reader(self.total_rows, self.world.world_size, equalize)  # fail now, not later
        largest = max((p.rows for p in self.pieces), default=1)
        self.buffer_rows = buffer_rows or max(largest, 8 * batch_size)
        self.epoch = 0
        self.skip_batches = 0  # batches of this epoch the rank already received (resume)
        # layouts this epoch was read with before an elastic resume, each with its batch count
        self.history: list[dict[str, Any]] = []
        self._base: tuple[tuple[int, int], Runs] | None = None
        self._files: dict[str, Any] = {}
        self._recent: list[tuple[tuple[str, int], Any]] = []
        self._pid = -1

    # ------------------------------------------------------------------ planning

    def set_epoch(self, epoch: int) -> None:
        """Start ``epoch`` (reshuffles; the same on every rank)."""
        self.epoch, self.skip_batches, self.history = epoch, 0, []

    def layout(self, num_workers: int) -> dict[str, Any]:
        """What fixes who reads which rows, besides the seed and epoch."""
        return {
            "world_size": self.world.world_size,
            "num_workers": num_workers,
            "batch_size": self.batch_size,
            "buffer_rows": self.buffer_rows,
            "equalize": self.equalize,
            "drop_last": self.drop_last,
        }

    def readers(self, num_workers: int) -> int:
        return self.world.world_size * max(1, num_workers)

    @staticmethod
    def _rows_each(rows: int, readers: int, equalize: str, resumed: bool) -> int:
        """Rows per reader; near the end of an elastically resumed epoch, when fewer rows are
        left than readers, shares are padded rather than cut so that no row is lost."""
        if resumed and rows < readers:
            return 1 if rows else 0
        return rows_per_reader(rows, readers, equalize)

    def batches_per_reader(self, num_workers: int) -> int:
        readers, resumed = self.readers(num_workers), bool(self.history)
        rows = self._rows_each(self.rows_left(), readers, self.equalize, resumed)
        return rows // self.batch_size if self.drop_last else -(-rows // self.batch_size)

    def batches_per_rank(self, num_workers: int = 0) -> int:
        """Batches every rank yields this epoch with ``num_workers`` DataLoader workers."""
        return self.batches_per_reader(num_workers) * max(1, num_workers)

    def rows_left(self) -> int:
        """Rows this layout shares out: all of the epoch's, or what an elastic resume found."""
        base = self.base()
        return self.total_rows if base is None else len(base)

    def base(self) -> Runs | None:
        """After an elastic resume: the epoch's row positions left to read (else ``None``)."""
        if not self.history:
            return None
        key = (self.epoch, len(self.history))
        if self._base is None or self._base[0] != key:
            runs = Runs.whole(self.total_rows)
            for segment, layout in enumerate(self.history):
                runs = runs.within(self._unread(len(runs), layout, segment))
            self._base = (key, runs)
        return self._base[1]

    def _unread(self, rows: int, layout: dict[str, Any], segment: int) -> Runs:
        """Positions (of a sequence of ``rows``) not read under ``layout`` after its batches."""
        workers = max(1, layout["num_workers"])
        readers = layout["world_size"] * workers
        each = self._rows_each(rows, readers, layout["equalize"], segment > 0)
        size, chunk_rows = layout["batch_size"], layout["buffer_rows"]
        parts = []
        for reader in range(readers):
            worker = reader % workers
            served = len(range(worker, layout["batches"], workers)) * size
            consumed = min(served, each)
            chunk, into = divmod(consumed, chunk_rows)
            first = reader * each
            rest_from = consumed
            if into:
                lo, hi = chunk * chunk_rows, min((chunk + 1) * chunk_rows, each)
                key = self._chunk_key(reader, chunk, segment)
                left = np.sort(chunk_order(key, hi - lo, self.shuffle)[into:]) + lo
                parts.append(Runs.of_positions(first + left))
                rest_from = hi
            parts.append(Runs([first + rest_from], [first + each]))
        parts.append(Runs([readers * each], [rows]))  # what "truncate" left out
        runs = Runs.concat(parts)
        return Runs(np.minimum(runs.starts, rows), np.minimum(runs.stops, rows))  # no padding

    def share(self, worker: int, num_workers: int) -> Share:
        """What worker ``worker`` of this rank reads this epoch."""
        ordered = epoch_pieces(self.pieces, self.seed, self.epoch, self.shuffle)
        reader = self.world.rank * max(1, num_workers) + worker
        base = self.base()
        if base is None:
            return share_of(ordered, reader, self.readers(num_workers), self.equalize)
        rows = len(base)
        each = self._rows_each(rows, self.readers(num_workers), self.equalize, True)
        lo, hi = reader * each, (reader + 1) * each
        mine = Runs.concat([base.slice(lo, hi), base.slice(0, hi - rows)])  # padding wraps
        return share_of_runs(ordered, mine)

    def _chunk_key(self, reader: int, chunk: int, segment: int) -> list[int]:
        key = [self.seed, self.epoch, reader, chunk, 13]
        return key if segment == 0 else [*key, segment]

    # ------------------------------------------------------------------ reading

    def _file(self, path: str) -> Any:
        import pyarrow.parquet as pq

        if self._pid != os.getpid():  # file handles are per process, never shared over fork
            self._files, self._recent, self._pid = {}, [], os.getpid()
        if path not in self._files:
            self._files[path] = pq.ParquetFile(path)
        return self._files[path]

    def _row_group(self, path: str, index: int) -> Any:
        """A row group as a table; the last two read are kept, since consecutive chunks (whose
        fixed boundaries resume depends on) often share the row group between them."""
        key = (path, index)
        for cached_key, table in self._recent:
            if cached_key == key:
                return table
        table = self._file(path).read_row_group(index, columns=self.columns)
        self._recent = [*self._recent[-1:], (key, table)]
        return table

    def _read(self, share: Share, lo: int, hi: int) -> Any:
        """Rows ``[lo, hi)`` of a share as one Arrow table."""
        import pyarrow as pa

        tables, position = [], 0
        for fragment in share.fragments:
            size = fragment.stop - fragment.start
            begin, end = position, position + size
            position = end
            if end <= lo or begin >= hi:
                continue
            table = self._row_group(fragment.piece.path, fragment.piece.row_group)
            first = fragment.start + max(lo, begin) - begin
            last = fragment.start + min(hi, end) - begin
            table = table.slice(first, last - first)
            for name in self.columns:
                if table.column(name).null_count:
                    raise ValueError(
                        f"{fragment.piece.path}, row group {fragment.piece.row_group}: column "
                        f"{name!r} has nulls; fill them (pyarrow.compute.fill_null) or leave the "
                        "column out of columns="
                    )
            tables.append(table)
        return pa.concat_tables(tables) if len(tables) > 1 else tables[0]

    def _tensors(self, table: Any) -> dict[str, torch.Tensor]:
        out: dict[str, torch.Tensor] = {}
        for name in self.columns:
            column = table.column(name).combine_chunks()
            if name in self.list_columns:
                offsets = np.asarray(column.offsets, dtype=np.int64)
                values = column.flatten().to_numpy(zero_copy_only=False)
                padded, lengths = pad_lists(
                    values, offsets - offsets[0], self.list_columns[name], self.pad, self.pad_value
                )
                out[name] = torch.from_numpy(padded)
                out[f"{name}_lengths"] = torch.from_numpy(lengths)
            else:
                out[name] = torch.from_numpy(column.to_numpy(zero_copy_only=False).copy())
        return out

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        info = get_worker_info()
        worker, num_workers = (info.id, info.num_workers) if info is not None else (0, 0)
        workers = max(1, num_workers)
        # The DataLoader takes batches from its workers round-robin, starting with worker 0.
        # Of the rank's first `skip_batches`, logical worker w delivered every workers-th one
        # starting at w; after a resume the next batch is logical worker skip % workers's, so
        # worker 0 takes that role and the others follow in turn.
        worker = (worker + self.skip_batches) % workers
        share = self.share(worker, num_workers)
        batches = self.batches_per_reader(num_workers)
        done = max(0, (self.skip_batches - worker + workers - 1) // workers)
        reader = self.world.rank * workers + worker
        size, chunk_rows = self.batch_size, self.buffer_rows
        chunk_index, chunk = -1, None
        for b in range(done, batches):
            lo, hi = b * size, min((b + 1) * size, share.rows)
            parts = []
            while lo < hi:
                wanted = lo // chunk_rows
                if wanted != chunk_index:
                    chunk_index = wanted
                    chunk = self._chunk(share, reader, chunk_index)
                assert chunk is not None
                offset = chunk_index * chunk_rows
                take = min(hi, offset + chunk.num_rows) - lo
                parts.append(chunk.slice(lo - offset, take))
                lo += take
            import pyarrow as pa

            yield self._tensors(pa.concat_tables(parts) if len(parts) > 1 else parts[0])

    def _chunk(self, share: Share, reader: int, index: int) -> Any:
        lo = index * self.buffer_rows
        table = self._read(share, lo, min(lo + self.buffer_rows, share.rows))
        if not self.shuffle:
            return table
        key = self._chunk_key(reader, index, len(self.history))
        return table.take(chunk_order(key, table.num_rows, True))

    def loader(
        self,
        num_workers: int = 0,
        pin_memory: bool = False,
        multiprocessing_context: str | None = None,
    ) -> ParquetLoader:
        """A DataLoader over this dataset that can save and restore its position."""
        return ParquetLoader(self, num_workers, pin_memory, multiprocessing_context)


class ParquetLoader:
    """Iterates a :class:`PartitionedParquet` with DataLoader workers; resumable mid-epoch."""

    def __init__(
        self,
        dataset: PartitionedParquet,
        num_workers: int = 0,
        pin_memory: bool = False,
        multiprocessing_context: str | None = None,
    ) -> None:
        self.dataset, self.num_workers, self.pin_memory = dataset, num_workers, pin_memory
        self.context = multiprocessing_context
        self.batches = 0  # batches of the current epoch received

    @property
    def epoch(self) -> int:
        return self.dataset.epoch

    def set_epoch(self, epoch: int) -> None:
        self.dataset.set_epoch(epoch)
        self.batches = 0

    def __len__(self) -> int:
        return self.dataset.batches_per_rank(self.num_workers) - self.batches

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        self.dataset.skip_batches = self.batches
        kwargs: dict[str, Any] = {}
        if self.num_workers and self.context:
            kwargs["multiprocessing_context"] = self.context
        generator = torch.Generator()
        generator.manual_seed(self.dataset.seed)  # worker seeds: not from the global RNG (dropout)
        data = DataLoader(
            self.dataset,
            batch_size=None,
            num_workers=self.num_workers,
            pin_memory=self.pin_memory,
            generator=generator,
            **kwargs,
        )
        for batch in data:
            self.batches += 1
            yield batch

    def state_dict(self) -> dict[str, Any]:
        """The epoch, batches received, this run's layout and those it was resumed from."""
        return {
            "version": STATE_VERSION,
            "epoch": self.dataset.epoch,
            "batches": self.batches,
            "seed": self.dataset.seed,
            "rows": self.dataset.total_rows,
            "shuffle": self.dataset.shuffle,
            "layout": self.dataset.layout(self.num_workers),
            "history": list(self.dataset.history),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state``: bitwise, with the saved layout; else elastic (see the
        module docstring).

        Raises:
            ValueError: the state belongs to other files, another seed or another version.
        """
        mine = self.state_dict()
        for key in ("version", "seed", "rows", "shuffle"):
            if state.get(key) != mine[key]:
                raise ValueError(
                    f"loader state has {key}={state.get(key)!r}, this loader "
                    f"{mine[key]!r}; resume with the data and seed of the saved run"
                )
        self.dataset.epoch = int(state["epoch"])
        if state["layout"] == mine["layout"]:
            self.dataset.history = list(state["history"])
            self.batches = int(state["batches"])
        else:
            done = {**state["layout"], "batches": int(state["batches"])}
            self.dataset.history = [*state["history"], done]
            self.batches = 0


def _check_columns(
    schema: Any, columns: list[str], list_columns: dict[str, int], path: Any
) -> None:
    import pyarrow as pa

    for name in [*columns, *list_columns]:
        if name not in schema.names:
            raise ValueError(f"{path}: no column {name!r}; it has {schema.names}")
    for name in columns:
        kind = schema.field(name).type
        if name in list_columns:
            if not (pa.types.is_list(kind) or pa.types.is_large_list(kind)):
                raise ValueError(
                    f"{path}: {name!r} is {kind}, not a list; drop it from list_columns"
                )
            kind = kind.value_type
        elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
            raise ValueError(
                f"{path}: {name!r} is a list column ({kind}); give its max_len in "
                f"list_columns={{{name!r}: N}}"
            )
        if not (
            pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)
        ):
            raise ValueError(
                f"{path}: {name!r} is {kind} and cannot become a tensor; leave it out of columns="
            )
    missing_lists = [n for n in list_columns if n not in columns]
    if missing_lists:
        raise ValueError(f"list_columns {missing_lists} are not among columns={columns}")
