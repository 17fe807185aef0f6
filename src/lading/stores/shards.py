"""A column of n shards read as one: global row ``r`` is a local row of the shard that holds it.

A store built by one process has one shard, and its columns are plain
:class:`~lading.disk.RaggedColumn` s (no lookup added to the hot path). A store built in
parallel has one ragged column per shard per column; :class:`ShardedColumn` finds each row's
shard with one ``np.searchsorted`` over the shards' first rows (a batch of 64 rows over 4 shards:
a few microseconds), reads each shard's rows in one call, and puts them back in request order.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from lading.disk import OFFSET_DTYPE, RaggedColumn
from lading.stores.bulk import bytes_at, texts_range


class ShardedColumn:
    """Rows of several ragged columns (the shards, in row order) as one column."""

    def __init__(self, parts: list[RaggedColumn]) -> None:
        self.parts = parts
        sizes = [len(p) for p in parts]
        self.starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self._count = int(self.starts[-1])

    def __len__(self) -> int:
        return self._count

    def _locate(
        self, rows: npt.NDArray[np.int64]
    ) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.int64]]:
        rows = np.asarray(rows, dtype=np.int64)
        if len(rows) and (int(rows.min()) < 0 or int(rows.max()) >= self._count):
            bad = rows[(rows < 0) | (rows >= self._count)][0]
            raise IndexError(f"row {int(bad)} outside [0, {self._count})")
        part = np.searchsorted(self.starts, rows, side="right") - 1
        return part, rows - self.starts[part]

    def _gather(self, rows: npt.NDArray[np.int64], read: Any) -> list[Any]:
        """``read(part, local_rows)`` for each shard touched, in request order."""
        part, local = self._locate(rows)
        if len(part) and part[0] == part[-1] and bool((part == part[0]).all()):
            return list(read(self.parts[int(part[0])], local))
        out: list[Any] = [None] * len(part)
        for p in np.unique(part).tolist():
            where = np.flatnonzero(part == p)
            for i, value in zip(where.tolist(), read(self.parts[p], local[where])):
                out[i] = value
        return out

    def text(self, row: int) -> str:
        """Row ``row`` decoded from UTF-8."""
        part, local = self._locate(np.array([row], dtype=np.int64))
        return self.parts[int(part[0])].text(int(local[0]))

    def texts(self, rows: npt.NDArray[np.int64]) -> list[str]:
        """Rows decoded from UTF-8, in the order given."""
        return self._gather(rows, lambda column, local: column.texts(local))

    def arrays(self, rows: npt.NDArray[np.int64]) -> list[np.ndarray]:
        """Rows as numpy views of their shard's map (no copy), in the order given."""
        return self._gather(rows, lambda column, local: column.arrays(local))

    def bytes_at(self, rows: npt.NDArray[np.int64]) -> list[bytes]:
        """Rows as ``bytes`` (the caller's own), in the order given."""
        return self._gather(rows, bytes_at)

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
