"""A remote store's columns: rows -> byte ranges of its shards' data files, and back to values.

Offsets of every column and the ``ids`` column's data are in the node's staged copy (see
:mod:`lading.remote.stage`), memory-mapped; a row of a payload column (``text``,
``tokens``, ``field.*``) becomes the byte range ``[off[i] * itemsize, off[i + 1] * itemsize)``
of its shard's data file, read through the node cache (:mod:`lading.remote.cache`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from lading.disk import OFFSET_DTYPE, MappedFile
from lading.disk.ragged import check_in_order
from lading.errors import StoreFormatError
from lading.remote.cache import NodeCache, Span
from lading.remote.cache.around import AroundGets
from lading.remote.ranges import Need
from lading.stores.remote.manifest import Part, columns, is_payload


class Reads(NamedTuple):
    """Planned reads as arrays: read ``i`` is bytes ``[starts[i], ends[i])`` of data file
    ``keys[obj[i]]`` at step ``steps[i]``."""

    keys: list[str]
    obj: npt.NDArray[np.int64]
    starts: npt.NDArray[np.int64]
    ends: npt.NDArray[np.int64]
    steps: npt.NDArray[np.int64]


@dataclass
class _Shard:
    first: int
    key: str
    offsets: np.ndarray
    dtype: np.dtype[Any]
    data: MappedFile | None  # staged columns only


class At(NamedTuple):
    """Where a read of the cache stands: its step (None: no step), whether the reader told
    the order of its epoch (``planned``), and the GETs its window holds for it around the
    cache (``around``); see :meth:`.NodeCache.read`."""

    step: int | None
    planned: bool = False
    around: AroundGets | None = None


class Columns:
    """The columns of one staged snapshot (``staged``: the node's copy; ``meta``: its manifest)."""

    def __init__(self, staged: Path, meta: dict[str, Any], cache: NodeCache) -> None:
        self.cache = cache
        self.count = int(meta["count"])
        self._shards: dict[str, list[_Shard]] = {}
        self._firsts: dict[str, npt.NDArray[np.int64]] = {}
        sizes = {key: int(info["size"]) for key, info in meta["files"].items()}
        for name, parts in columns(meta).items():
            shards = [self._shard(staged, name, part, sizes) for part in parts]
            self._shards[name] = shards
            self._firsts[name] = np.array([s.first for s in shards], dtype=np.int64)

    def _shard(self, staged: Path, name: str, part: Part, sizes: dict[str, int]) -> _Shard:
        mapped = MappedFile(staged / part.offsets, random_access=True)
        offsets = mapped.array(OFFSET_DTYPE)
        if len(offsets) != part.rows + 1 or (len(offsets) and int(offsets[0]) != 0):
            raise StoreFormatError(
                f"{staged / part.offsets}: {len(offsets) - 1} rows, the manifest says "
                f"{part.rows}; the staged copy is damaged, delete {staged} to stage it again"
            )
        # staging checked its CRC, and a reopen its first and last 4 KiB: offsets that go down
        # in between (changed in place since) would read other documents' bytes
        try:
            check_in_order(mapped, offsets)
        except StoreFormatError as e:
            raise StoreFormatError(
                f"{e.args[0].split(': the file was damaged', 1)[0]}: the node's staged copy "
                f"was changed after staging; delete {staged} to stage it again"
            ) from None
        end = int(offsets[-1]) * np.dtype(part.dtype).itemsize if len(offsets) else 0
        if part.data in sizes and end > sizes[part.data]:  # (a read there fails at its GET)
            raise StoreFormatError(
                f"{staged / part.offsets}: its last offset ends at byte {end:,} of "
                f"{part.data}, which holds {sizes[part.data]:,} bytes in the manifest: the "
                "store is damaged or its manifest was not written by lading; rebuild it"
            )
        data = None if is_payload(name) else MappedFile(staged / part.data, random_access=True)
        return _Shard(part.first, part.data, offsets, np.dtype(part.dtype), data)

    def __contains__(self, column: str) -> bool:
        return column in self._shards

    def _locate(self, column: str, rows: npt.NDArray[np.int64]) -> list[tuple[_Shard, int, int]]:
        """``(shard, start item, end item)`` of each row, in order."""
        shards = self._shards[column]
        rows = np.asarray(rows, dtype=np.int64)
        if len(rows) and (int(rows.min()) < 0 or int(rows.max()) >= self.count):
            raise IndexError(f"rows out of range [0, {self.count}): {rows.min()}..{rows.max()}")
        which = np.searchsorted(self._firsts[column], rows, side="right") - 1
        out: list[tuple[_Shard, int, int]] = [None] * len(rows)  # type: ignore[list-item]
        for s in np.unique(which).tolist():
            shard = shards[s]
            mask = which == s
            local = rows[mask] - shard.first
            starts = shard.offsets[local].tolist()
            ends = shard.offsets[local + 1].tolist()
            for i, a, b in zip(np.flatnonzero(mask).tolist(), starts, ends):
                out[i] = (shard, a, b)
        return out

    def spans(self, column: str, rows: npt.NDArray[np.int64]) -> list[Span]:
        """Byte ranges ``(data file, start, end)`` of ``rows`` of a payload column."""
        return [
            (shard.key, a * shard.dtype.itemsize, b * shard.dtype.itemsize)
            for shard, a, b in self._locate(column, rows)
        ]

    def needs(
        self, column: str, batches: Sequence[npt.NDArray[np.int64]], first_step: int
    ) -> list[Need]:
        """The ranges of ``batches`` of rows, batch ``j`` needed at step ``first_step + j``."""
        out: list[Need] = []
        for j, rows in enumerate(batches):
            out += [Need(key, a, b, first_step + j) for key, a, b in self.spans(column, rows)]
        return out

    def reads(
        self, column: str, rows: npt.NDArray[np.int64], steps: npt.NDArray[np.int64]
    ) -> Reads:
        """:meth:`needs` as arrays, with no Python object a row: ``rows[i]`` read at
        ``steps[i]`` (what a plan of a whole epoch hands :meth:`.Schedule.of_arrays`)."""
        rows = np.asarray(rows, dtype=np.int64)
        if len(rows) and (int(rows.min()) < 0 or int(rows.max()) >= self.count):
            raise IndexError(f"rows out of range [0, {self.count}): {rows.min()}..{rows.max()}")
        shards = self._shards[column]
        which = np.searchsorted(self._firsts[column], rows, side="right") - 1
        starts, ends = np.empty(len(rows), np.int64), np.empty(len(rows), np.int64)
        order = np.argsort(which, kind="stable")  # each shard's rows together: one pass
        bounds = np.searchsorted(which[order], np.arange(len(shards) + 1)).tolist()
        for s, shard in enumerate(shards):
            if bounds[s] == bounds[s + 1]:
                continue
            at = order[bounds[s] : bounds[s + 1]]
            local = rows[at] - shard.first
            size = shard.dtype.itemsize
            starts[at] = shard.offsets[local].astype(np.int64) * size
            ends[at] = shard.offsets[local + 1].astype(np.int64) * size
        keys = [shard.key for shard in shards]
        return Reads(keys, which, starts, ends, np.asarray(steps, np.int64))

    def read(self, column: str, rows: npt.NDArray[np.int64], at: At) -> list[bytes]:
        """Bytes of ``rows`` of ``column``: staged columns from the map, others by the cache
        at ``at`` (see :class:`At`)."""
        if self._shards[column][0].data is not None:
            return [
                bytes(shard.data.buffer[a * shard.dtype.itemsize : b * shard.dtype.itemsize])  # type: ignore[union-attr]
                for shard, a, b in self._locate(column, rows)
            ]
        return self.cache.read(self.spans(column, rows), at.step, at.planned, at.around)

    def texts(self, column: str, rows: npt.NDArray[np.int64], at: At) -> list[str]:
        """``rows`` of a UTF-8 column as ``str``."""
        return [b.decode("utf-8") for b in self.read(column, rows, at)]

    def arrays(self, column: str, rows: npt.NDArray[np.int64], at: At) -> list[np.ndarray]:
        """``rows`` of a fixed-width column (token ids) as read-only arrays of their own."""
        dtype = self._shards[column][0].dtype
        return [np.frombuffer(b, dtype=dtype) for b in self.read(column, rows, at)]

    def whole(self, column: str) -> tuple[np.ndarray, np.ndarray]:
        """A column's items back to back and its ``n + 1`` offsets (row order), read into
        memory by ranged GETs around the cache (``token_arrays`` of a remote store)."""
        shards = self._shards[column]
        fetcher = self.cache.fetcher
        chunk = 8 << 20
        parts: list[np.ndarray] = []
        offsets = [np.zeros(1, dtype=np.int64)]
        done = 0
        for shard in shards:
            size = int(shard.offsets[-1]) * shard.dtype.itemsize
            etag = self.cache.etags.get(shard.key)
            requests = [(shard.key, a, min(a + chunk, size), etag) for a in range(0, size, chunk)]
            raw = b"".join(fetcher.read(requests))
            parts.append(np.frombuffer(raw, dtype=shard.dtype))
            offsets.append(shard.offsets[1:].astype(np.int64) + done)
            done += int(shard.offsets[-1])
        values = np.concatenate(parts) if parts else np.empty(0, dtype=np.uint8)
        return values, np.concatenate(offsets).astype(OFFSET_DTYPE)
