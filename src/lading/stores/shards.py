"""A column of n shards read as one: global row ``r`` is a local row of the shard that holds it.

A store built by one process has one shard, and its columns are plain
:class:`~lading.disk.RaggedColumn` s (no lookup added to the hot path). A store built in
parallel has one ragged column per shard per column, each with its own offsets: the merge
writes none (issue 49: a merge that copied every row's offsets wrote 8 B a document a column,
two thirds of its bytes). Where the C helper is built (:mod:`lading.disk.native`) one call
checks the batch, finds each row's shard from the shards' first rows, reads its offsets in that
shard's file and makes the ``str`` objects (texts) or the views (tokens): the call a one-shard
column makes with one part. The numpy route (no helper) finds the shards with
``np.searchsorted``, gathers each shard's offsets under a mask, then slices in one loop.

Stores merged before that carry offsets over all shards' data laid end to end
(``<column>.goff``, ``global_offsets`` in the manifest); they are read through them, the part
then picked from each row's start offset, so they answer as they always did.

A cold batch of texts is read ahead as in one shard (:meth:`lading.disk.RaggedColumn.texts`):
its offsets and bytes are asked for all at once (``MADV_WILLNEED``), each range in the file of
the shard that holds it. Measured: benchmarks/RESULTS.md, "Lookups of a store built in shards,
by kind of id" and "Merges that copy no payload".
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import numpy.typing as npt

from lading.disk import OFFSET_DTYPE, MappedFile, RaggedColumn, native
from lading.disk.ragged import _READ_AHEAD_ROWS, ColdRule
from lading.errors import StoreFormatError
from lading.stores.bulk import bytes_at, texts_range


class ShardedColumn:
    """Rows of several ragged columns (the shards, in row order) as one column."""

    def __init__(
        self,
        parts: list[RaggedColumn],
        offsets: np.ndarray | None = None,
        offsets_file: MappedFile | None = None,
    ) -> None:
        self.parts = parts
        # every row's offsets over the shards' data laid end to end: only in stores merged before
        # merges stopped writing them (the module docstring); the file they are mapped from
        self.offsets = offsets
        self._offsets_file = offsets_file
        # read a batch's rows ahead while its pages come from the device (see texts)
        self._read_ahead = all(p.data.random_access for p in parts)
        self._cold = ColdRule()
        data_sizes = [int(p.offsets[-1]) for p in parts]
        self._sizes = np.array(data_sizes, dtype=np.uint64)  # items of each shard's data
        self.bases = np.concatenate([[0], np.cumsum(data_sizes)]).astype(np.uint64)
        self._base_inner = self.bases[1:-1]
        sizes = [len(p) for p in parts]
        self.starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self._inner = self.starts[1:-1]  # a row at or past one of these is in a later shard
        self._count = int(self.starts[-1])
        self._buffers = tuple(p.data.buffer for p in parts)
        self._values = tuple(p.data.array(p.dtype) for p in parts)
        # the C helper reads the offsets and every shard's data in one call
        self._native = native.NATIVE
        self._text_native = self._native if parts[0].dtype == np.uint8 else None
        # what the helper reads the offsets from: each shard's own map, or the merged ones (the
        # map itself where there is one: a buffer of a map is cheaper to take per call than one
        # of a numpy array)
        self._offsets_buffer: Any = (
            tuple(p._offsets_file.buffer for p in parts)
            if offsets is None
            else offsets_file.buffer
            if offsets_file is not None
            else offsets
        )
        # a call of the helper takes each buffer of a tuple it is given (PyObject_GetBuffer):
        # 2 a shard a call, so a store of 200 shards looked up at 0.60x one of 1; the shards'
        # buffers are held once instead (a Parts object), for the column's life
        self._data_held: Any = self._buffers
        if self._native is not None:
            self._data_held = self._native.Parts(self._buffers)
            if isinstance(self._offsets_buffer, tuple):
                self._offsets_buffer = self._native.Parts(self._offsets_buffer)
        self._random = parts[0].data.random_access

    def __len__(self) -> int:
        return self._count

    def _locate(
        self, rows: npt.NDArray[np.int64]
    ) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.int64]]:
        """(shard, local row) of each row (rows in range: :meth:`_spans` checks them)."""
        rows = np.asarray(rows, dtype=np.int64)
        part = np.searchsorted(self._inner, rows, side="right")
        return part, rows - self.starts[part]

    def _spans(self, rows: npt.NDArray[np.int64]) -> tuple[list[int], list[int], list[int]]:
        """(shard, start, end) of each row in its shard's data (in items), checked as a one-shard
        column checks them (:meth:`RaggedColumn.bounds`): numpy alone read row -1 as ``""``
        and -2 as a row of another shard's data.

        Raises:
            IndexError: a row is not in the column (the first such row of the batch).
            StoreFormatError: a row's offsets are not within its shard's data.
        """
        rows = np.asarray(rows, dtype=np.int64)
        outside = rows.view(np.uint64) >= self._count  # both ends at once: -1 is 2**64 - 1
        if outside.any():
            raise IndexError(f"row {rows[outside][0]} out of range for {self._count} rows")
        if self.offsets is not None:  # two gathers, as in one shard, then the shard by byte
            starts, ends = self.offsets[rows], self.offsets[rows + 1]
            part = np.searchsorted(self._base_inner, starts, side="right")
            base = self.bases[part]
            # ends - base may wrap where ends < starts: that row is refused by the first test
            wrong = (starts > ends) | (ends - base > self._sizes[part])
            first, last = starts - base, ends - base
            read = starts, ends  # the offsets as stored, for the message
        else:
            part, local = self._locate(rows)
            first = np.empty(len(part), dtype=np.uint64)
            last = np.empty(len(part), dtype=np.uint64)
            for p in np.unique(part).tolist():  # the batch's shards, not every shard's
                mine = part == p
                at = local[mine]
                first[mine] = self.parts[p].offsets[at]
                last[mine] = self.parts[p].offsets[at + 1]
            wrong = (first > last) | (last > self._sizes[part])
            read = first, last
        if wrong.any():
            at = int(wrong.argmax())
            raise StoreFormatError(
                f"{self.parts[int(part[at])].data.path}: the offsets of row {rows[at]} "
                f"({read[0][at]}..{read[1][at]}) are not within the data of shard {part[at]}; "
                "rebuild the store"
            )
        return part.tolist(), first.tolist(), last.tolist()

    def text(self, row: int) -> str:
        """Row ``row`` decoded from UTF-8."""
        if not 0 <= row < self._count:
            raise IndexError(f"row {row} outside [0, {self._count})")
        part, local = self._locate(np.array([row], dtype=np.int64))
        return self.parts[int(part[0])].text(int(local[0]))

    def texts(self, rows: npt.NDArray[np.int64]) -> list[str]:
        """Rows decoded from UTF-8, in the order given, in one decode loop over the shards'
        maps. A batch (up to ``_READ_AHEAD_ROWS`` rows) that took longer than ``_COLD_SECONDS``
        a row came from the device: the next batches ask for their pages first, until one
        copies at page-cache speed again (the rule of a one-shard column)."""
        rows = np.ascontiguousarray(rows, dtype=np.int64)
        batch = 1 < len(rows) <= _READ_AHEAD_ROWS and self._random
        ahead = batch and self._read_ahead
        helper = self._text_native
        if helper is not None and not ahead:  # warm: one call of the helper, as in one shard
            started = time.perf_counter()
            try:
                out: list[str] = helper.texts(rows, self._offsets_buffer, self._data_held)
            except helper.Damaged as e:
                raise self._damaged(rows, e) from None
            if batch:
                self._read_ahead = self._cold.cold(time.perf_counter() - started, len(out))
            return out
        if ahead:
            if int(rows.view(np.uint64).max()) >= self._count:
                self._spans(rows)  # raises, naming the row, before asking for pages
            self._offsets_ahead(rows)
        part, starts, ends = self._spans(rows)
        if ahead:
            self._data_ahead(part, starts, ends)
        # the copy alone is timed: asking for pages costs a call a shard and a row, which a
        # batch of 64 over 200 shards took past the cold rule's 640 us, so it stayed in this
        # mode at ~1 ms a batch where the pages were long in memory
        started = time.perf_counter()
        buffers = self._buffers
        out = [str(buffers[p][a:b], "utf-8") for p, a, b in zip(part, starts, ends)]
        if batch:
            self._read_ahead = self._cold.cold(time.perf_counter() - started, len(out))
        return out

    def _call(self, helper: Any, rows: npt.NDArray[np.int64], *data: Any) -> Any:
        """``helper(rows, offsets, *data)`` of the C helper (``bytes_of`` or ``slices``); a
        damaged batch is named by the numpy route's own check (:meth:`_spans`), so both routes
        raise the same error."""
        assert self._native is not None
        rows = np.ascontiguousarray(rows, dtype=np.int64)
        try:
            return helper(rows, self._offsets_buffer, *data)
        except self._native.Damaged as e:
            raise self._damaged(rows, e) from None

    def _damaged(self, rows: npt.NDArray[np.int64], error: Exception) -> StoreFormatError:
        """The error for a batch the C helper found damaged: the numpy route's own (it checks
        alike and names the shard's file), raised from here."""
        self._spans(rows)  # raises StoreFormatError for this batch
        return StoreFormatError(f"{self.parts[0].data.path}: {error}; rebuild the store")

    def _offsets_ahead(self, rows: npt.NDArray[np.int64]) -> None:
        """Ask for the pages of ``rows``' offsets (rows in range): in the merged offsets file,
        or else in each shard's own."""
        size = OFFSET_DTYPE.itemsize
        if self._offsets_file is not None:
            first = (rows * size).tolist()
            self._offsets_file.will_need(first, [f + 2 * size for f in first])
            return
        part, local = self._locate(rows)
        for p in np.unique(part).tolist():  # the batch's shards, not every shard's
            first = (local[part == p] * size).tolist()
            self.parts[p]._offsets_file.will_need(first, [f + 2 * size for f in first])

    def _data_ahead(self, part: list[int], starts: list[int], ends: list[int]) -> None:
        """Ask for the pages of each row's bytes in its shard's data file, a call per shard."""
        where = np.asarray(part)
        first, last = np.asarray(starts), np.asarray(ends)
        for p in np.unique(where).tolist():  # the batch's shards, not every shard's
            mine = where == p
            self.parts[p].data.will_need(first[mine].tolist(), last[mine].tolist())

    def arrays(self, rows: npt.NDArray[np.int64]) -> list[np.ndarray]:
        """Rows as numpy views of their shard's map (no copy), in the order given."""
        if self._native is not None:
            views: list[np.ndarray] = self._call(
                self._native.slices, rows, self._values, self.bases
            )
            return views
        part, starts, ends = self._spans(rows)
        values = self._values
        return [values[p][a:b] for p, a, b in zip(part, starts, ends)]

    def bytes_at(self, rows: npt.NDArray[np.int64]) -> list[bytes]:
        """Rows as ``bytes`` (the caller's own), in the order given."""
        if self._native is not None:
            copies: list[bytes] = self._call(self._native.bytes_of, rows, self._data_held)
            return copies
        part, starts, ends = self._spans(rows)
        buffers = self._buffers
        return [bytes(buffers[p][a:b]) for p, a, b in zip(part, starts, ends)]

    def texts_range(self, start: int, stop: int) -> list[str]:
        """Rows ``start .. stop - 1`` decoded (a scan), each shard's part in bulk."""
        if not 0 <= start <= stop <= self._count:
            raise IndexError(f"rows {start}..{stop} out of range for {self._count} rows")
        out: list[str] = []
        for i, column in enumerate(self.parts):
            lo, hi = max(start, int(self.starts[i])), min(stop, int(self.starts[i + 1]))
            if lo < hi:
                out += texts_range(column, lo - int(self.starts[i]), hi - int(self.starts[i]))
        return out

    def concatenated(self) -> tuple[np.ndarray, np.ndarray]:
        """Every row's items back to back and the ``n + 1`` offsets: a copy (shards are
        separate files)."""
        dtype = self.parts[0].dtype
        data = np.concatenate([p.data.array(dtype) for p in self.parts])
        offsets = [np.zeros(1, dtype=OFFSET_DTYPE)]
        base = 0
        for p in self.parts:
            offsets.append(p.offsets[1:] + np.uint64(base))
            base += int(p.offsets[-1])
        return data, np.concatenate(offsets)


Column = RaggedColumn | ShardedColumn


def range_texts(column: Column, start: int, stop: int) -> list[str]:
    """Texts of rows ``start .. stop - 1`` of a plain or sharded column."""
    if isinstance(column, ShardedColumn):
        return column.texts_range(start, stop)
    return texts_range(column, start, stop)


def rows_bytes(column: Column, rows: npt.NDArray[np.int64]) -> list[bytes]:
    """Rows as ``bytes`` of a plain or sharded column."""
    if isinstance(column, ShardedColumn):
        return column.bytes_at(rows)
    return bytes_at(column, rows)


def whole(column: Column) -> tuple[np.ndarray, np.ndarray]:
    """(items, offsets) of a whole column: views of the map for one shard, a copy for many."""
    if isinstance(column, ShardedColumn):
        return column.concatenated()
    return column.data.array(column.dtype), column.offsets
