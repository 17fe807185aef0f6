"""Ragged arrays on disk: rows of bytes (or fixed-width items) back to back, plus offsets.

A ragged column ``<column>`` is two files: ``<column>.bin`` holds the rows' items back to back,
``<column>.off`` holds ``count + 1`` little-endian uint64 offsets counted in items (row i is
``bin[off[i]:off[i+1]]``). The packed store, the offsets index and the token corpus all keep
their rows this way; :class:`RaggedWriter` writes a column in one streaming pass,
:class:`RaggedColumn` maps one for reading.
"""

from __future__ import annotations

import os
import resource
import struct
import time
import zlib
from array import array
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any, BinaryIO

import numpy as np
import numpy.typing as npt

from lading.disk import native
from lading.disk.files import MappedFile, start_writeback
from lading.errors import StoreFormatError

OFFSET_DTYPE = np.dtype("<u8")
_TWO_OFFSETS = struct.Struct("<QQ").unpack_from  # a row's start and end offsets, little-endian
_WRITE_BUFFER = 1 << 22  # flush column bytes to disk every 4 MiB
_OFFSETS_BATCH = _WRITE_BUFFER // 8  # and offsets every 512Ki rows (4 MiB)
_WRITEBACK_EVERY = 1 << 25  # start the disk on each 32 MiB written (see start_writeback)
# a row copied slower than this came from the device: a page-cache copy of a 7 KB document with
# its UTF-8 decode takes ~1.5 us, a read from this machine's virtual disk 40-150 us
_COLD_SECONDS = 10e-6
# larger requests (every id of a store) are not lookups: a system call per row would cost more
_READ_AHEAD_ROWS = 4096
_RUSAGE_THREAD: int | None = getattr(resource, "RUSAGE_THREAD", None)  # (Linux's)
DESCENT_CHUNK = 1 << 22  # offsets compared at a time at an open: 32 MiB, whatever the file's size
# offsets files this process found in order, by (device, inode, size, mtime): each is read once
_IN_ORDER: set[tuple[int, int, int, int]] = set()


def _major_faults() -> int | None:
    """Page faults this thread waited on the device for, since it started (None where the
    system keeps no per-thread count: Linux does)."""
    if _RUSAGE_THREAD is None:
        return None
    return resource.getrusage(_RUSAGE_THREAD).ru_majflt


class ColdRule:
    """Whether a batch of lookups came (at least partly) from the device: its copy took longer
    than :data:`_COLD_SECONDS` a row, and this thread waited on the device for a page since
    the rule last looked. The clock alone took a batch preempted on a loaded machine for a
    cold one (the next batch then asked for its pages: 0.34 ms a batch of 64 on one build,
    1.13 ms over 200 shards, against ~0.02 warm; 34-38 such batches in 9,000 beside three
    busy processes); the fault count alone is read only for a slow batch (a system call,
    ~0.4 us). Where no per-thread count exists, the clock decides alone."""

    def __init__(self) -> None:
        self._faults = _major_faults()

    def cold(self, took: float, rows: int) -> bool:
        if took <= _COLD_SECONDS * rows:
            return False
        faults = _major_faults()
        fresh = faults is None or faults != self._faults
        self._faults = faults
        return fresh


def column_files(column: str) -> tuple[str, str]:
    """File names (data, offsets) of a ragged column."""
    return f"{column}.bin", f"{column}.off"


def column_paths(directory: Path, column: str) -> tuple[Path, Path]:
    """Paths (data, offsets) of the ragged column ``column`` in ``directory``."""
    data, offsets = column_files(column)
    return directory / data, directory / offsets


def first_descent(offsets: Any, mapped: MappedFile | None = None) -> int:
    """The first row whose offsets go down (``offsets[i + 1] < offsets[i]``), or -1.

    The open's spot checksums read an offsets file's first and last 4 KiB only, and a read
    checks that each row lies within the data: a start that jumps back (a page of the file
    zeroed) passed both, and the row came back as other documents run together. One pass, a
    chunk of :data:`DESCENT_CHUNK` offsets at a time (8 B a row; 1M rows in the page cache:
    about 1 ms); the store's columns and the token corpus (:mod:`lading.lm.corpus_format`)
    both check this way.

    Args:
        offsets: an array, or anything sliced as one (a merged token corpus's offsets).
        mapped: the map ``offsets`` views (from byte 0): each chunk's pages are asked for
            before it is read (``MADV_WILLNEED``), so a cold file mapped for random access is
            read in large requests, not a page a fault.
    """
    n = len(offsets)
    for lo in range(0, n - 1, DESCENT_CHUNK):
        hi = min(lo + DESCENT_CHUNK + 1, n)
        if mapped is not None:
            mapped.will_need([lo * OFFSET_DTYPE.itemsize], [hi * OFFSET_DTYPE.itemsize])
        part = np.asarray(offsets[lo:hi])
        down = part[1:] < part[:-1]
        if down.any():
            return lo + int(down.argmax())
    return -1


def check_in_order(mapped: MappedFile, offsets: npt.NDArray[np.uint64]) -> None:
    """Refuse the offsets file ``mapped`` (``offsets``: its array) if its offsets go down
    anywhere (:func:`first_descent`); a file found in order is not read again by this process
    while its device, inode, size and mtime stay the same (a store is opened again and again in
    one process: every dataset, every :func:`pickle` round trip).

    Raises:
        StoreFormatError: naming the file, the first row out of order and the fix.
    """
    key: tuple[int, int, int, int] | None = None
    try:
        info = os.stat(mapped.path)
        key = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
    except OSError:  # removed since it was mapped (an old snapshot collected): the map reads on
        pass
    if key is not None and key in _IN_ORDER:
        return
    row = first_descent(offsets, mapped)
    if row >= 0:
        raise StoreFormatError(
            f"{mapped.path}: offsets out of order at row {row} (it ends at "
            f"{int(offsets[row + 1])}, before it starts at {int(offsets[row])}): the file was "
            "damaged after the build (an open checks only its first and last 4 KiB); "
            "`lading verify` on the store (lading.stores.verify_store) names every damaged "
            "file, rebuild the store to replace them"
        )
    if key is not None:
        _IN_ORDER.add(key)


class _BackgroundFile:
    """Writes and checksums byte blocks on one thread, in order, while the caller goes on.

    ``file.write`` and ``zlib.crc32`` release the GIL on large buffers, so writing a block
    overlaps scanning the next one. At most ``_IN_FLIGHT`` blocks wait, which bounds memory;
    an error on the thread is raised by the next call from the owner.
    """

    _IN_FLIGHT = 2

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: BinaryIO = open(path, "wb")  # noqa: SIM115 - closed in close()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lading-write")
        self._pending: deque[Future[None]] = deque()
        self.crc = 0
        self._size = 0  # bytes written
        self._kicked = 0  # bytes whose writeback was started

    def _write(self, data: bytes) -> None:
        self.crc = zlib.crc32(data, self.crc)
        try:
            self._file.write(data)
        except OSError as e:  # say which file: the thread's traceback will not be seen
            raise OSError(e.errno, e.strerror, str(self.path)) from e
        self._size += len(data)
        if self._size - self._kicked >= _WRITEBACK_EVERY:  # the disk writes beside the build
            self._file.flush()
            start_writeback(self._file.fileno(), self._kicked, self._size - self._kicked)
            self._kicked = self._size

    def write(self, data: bytes) -> None:
        """Queue ``data`` (which must not change afterwards) to be written after earlier blocks."""
        while len(self._pending) >= self._IN_FLIGHT:
            self._pending.popleft().result()
        self._pending.append(self._pool.submit(self._write, data))

    def close(self) -> None:
        """Wait for every block, fsync and close (also after an error, then re-raise it)."""
        try:
            while self._pending:
                self._pending.popleft().result()
            self._file.flush()
            os.fsync(self._file.fileno())
        except OSError as e:
            if e.filename is None:
                raise OSError(e.errno, e.strerror, str(self.path)) from e
            raise
        finally:
            self._pool.shutdown(wait=True)
            self._file.close()

    def abort(self) -> None:
        """Drop the blocks not yet written, end the thread and close the file (no fsync: a
        failed build's files are removed); nothing after :meth:`close`."""
        if self._file.closed:
            return
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._pending.clear()
        self._file.close()


class RaggedWriter:
    """Appends rows of bytes to ``<column>.bin`` and keeps their offsets for ``<column>.off``.

    Small rows are buffered into 4 MiB blocks, large blocks go as they are; a background thread
    writes them and keeps a CRC32 of everything for ``meta.json``, so ``lading verify`` can check
    content later without a second read at build time. Offsets stream to ``<column>.off`` the
    same way, so memory does not grow with the row count (8.8M rows would otherwise hold 70 MB
    of offsets per column until the end).
    """

    def __init__(self, directory: Path, column: str, itemsize: int = 1) -> None:
        self.column = column
        self.itemsize = itemsize
        bin_name, off_name = column_files(column)
        self._file = _BackgroundFile(directory / bin_name)
        self._off_file = _BackgroundFile(directory / off_name)
        self._offsets = array("Q", [0])  # not yet flushed to the offsets file
        self._rows = 0
        self._buffer = bytearray()
        self._written = 0  # items (bytes or tokens) written, buffered included

    def __len__(self) -> int:
        return self._rows

    def _flush_offsets(self) -> None:
        if self._offsets:
            self._off_file.write(
                np.frombuffer(self._offsets, np.uint64).astype(OFFSET_DTYPE).tobytes()
            )
            self._offsets = array("Q")

    def append(self, data: bytes | bytearray | memoryview) -> None:
        """Add one row."""
        self._buffer += data
        self._written += len(data) // self.itemsize
        self._offsets.append(self._written)
        self._rows += 1
        if len(self._buffer) >= _WRITE_BUFFER:
            self._flush()
        elif len(self._offsets) >= _OFFSETS_BATCH:
            self._flush_offsets()

    def append_many(self, data: bytes, lengths: npt.NDArray[np.int64]) -> None:
        """Add ``len(lengths)`` rows whose bytes are ``data``, back to back."""
        ends = np.cumsum(lengths, dtype=np.int64) // self.itemsize + self._written
        self._offsets.frombytes(ends.astype(np.uint64).tobytes())
        self._rows += len(lengths)
        self._written += len(data) // self.itemsize
        if len(self._offsets) >= _OFFSETS_BATCH:
            self._flush_offsets()
        if len(data) >= _WRITE_BUFFER:  # a whole block: write it as is, no copy into the buffer
            self._flush()
            self._file.write(data)
            return
        self._buffer += data
        if len(self._buffer) >= _WRITE_BUFFER:
            self._flush()

    def pad_to(self, rows: int) -> None:
        """Add empty rows until there are ``rows`` (for a field that first appears late)."""
        missing = rows - len(self)
        while missing > 0:
            step = min(missing, _WRITE_BUFFER // 8)
            self._offsets.frombytes(np.full(step, self._written, np.uint64).tobytes())
            self._rows += step
            missing -= step
            self._flush()

    def _flush(self) -> None:
        if self._buffer:
            self._file.write(bytes(self._buffer))
            self._buffer.clear()
        if len(self._offsets) >= _OFFSETS_BATCH:
            self._flush_offsets()

    def finish(self) -> dict[str, dict[str, int]]:
        """Flush, fsync both files, and describe them for ``meta.json``."""
        self._flush()
        self._flush_offsets()
        self._file.close()
        self._off_file.close()
        bin_name, off_name = column_files(self.column)
        return {
            bin_name: {"size": self._written * self.itemsize, "crc32": self._file.crc},
            off_name: {
                "size": (self._rows + 1) * OFFSET_DTYPE.itemsize,
                "crc32": self._off_file.crc,
            },
        }

    def abort(self) -> None:
        """Close both files without finishing them (a failed build): see
        :meth:`_BackgroundFile.abort`."""
        self._file.abort()
        self._off_file.abort()


class RaggedColumn:
    """Read side of a ragged column: ``bin[off[i]:off[i+1]]`` is row i."""

    def __init__(
        self,
        data: Path,
        offsets: Path,
        dtype: npt.DTypeLike = np.uint8,
        random_access: bool = False,
    ) -> None:
        """The column whose files are ``data`` and ``offsets`` (named by a manifest, or
        :func:`column_paths` of a folder and a column's name)."""
        self._map(data, offsets, dtype, random_access)

    def _map(self, data: Path, offsets: Path, dtype: npt.DTypeLike, random_access: bool) -> None:
        self.data = MappedFile(data, random_access)
        self._offsets_file = MappedFile(offsets, random_access)
        self.offsets = self._offsets_file.array(OFFSET_DTYPE)
        self.dtype = np.dtype(dtype)
        # read a batch's rows ahead while its pages come from the device (see texts)
        self._read_ahead = random_access
        self._cold = ColdRule()
        self._native = native.NATIVE if self.dtype == np.uint8 else None
        self._slicer = native.NATIVE  # views of any item type (arrays)
        total = int(self.offsets[-1]) if len(self.offsets) else -1
        if (
            len(self.offsets) == 0
            or int(self.offsets[0]) != 0
            or (total * self.dtype.itemsize != len(self.data.buffer))
        ):
            raise StoreFormatError(
                f"{offsets} does not describe {data} "
                f"(last offset {total}, data {len(self.data.buffer)} bytes); rebuild it"
            )
        # with the first offset 0 and the last the data's size, every row is within the data
        check_in_order(self._offsets_file, self.offsets)
        self._values = self.data.array(self.dtype)  # every row a view of it (arrays)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def text(self, row: int) -> str:
        """Row ``row`` decoded from UTF-8 (raises as :meth:`texts`)."""
        if not 0 <= row < len(self.offsets) - 1:  # numpy would read -1 as the last offset
            raise IndexError(f"row {row} out of range for {len(self)} rows")
        # the two offsets as Python ints in one call (two numpy scalars cost ~130 ns more)
        start, end = _TWO_OFFSETS(self._offsets_file.buffer, row * OFFSET_DTYPE.itemsize)
        if start > end or end > len(self.data.buffer):
            raise self._damaged(row, start, end)
        return str(self.data.buffer[start:end], "utf-8")

    def bounds(self, rows: npt.NDArray[np.int64]) -> tuple[list[int], list[int]]:
        """Start and end offsets of ``rows`` (in items), each checked as the C helper checks it.

        Raises:
            IndexError: a row is not in the column (numpy alone reads -1 as ``""``, -2 as the
                last row), naming the first such row of the batch.
            StoreFormatError: a row's offsets are descending or past the data (numpy alone
                would cut the row short or read it as empty), naming the first such row.
        """
        rows = np.asarray(rows, dtype=np.int64)
        count = len(self)
        outside = rows.view(np.uint64) >= count  # one pass for both ends: -1 reads as 2**64 - 1
        if outside.any():
            raise IndexError(f"row {rows[outside][0]} out of range for {count} rows")
        starts, ends = self.offsets[rows], self.offsets[rows + 1]
        wrong = (starts > ends) | (ends > len(self.data.buffer) // self.dtype.itemsize)
        if wrong.any():
            at = int(wrong.argmax())
            raise self._damaged(int(rows[at]), int(starts[at]), int(ends[at]))
        return starts.tolist(), ends.tolist()

    def _damaged(self, row: int, start: int, end: int) -> StoreFormatError:
        size, unit = len(self.data.buffer) // self.dtype.itemsize, "bytes"
        if self.dtype.itemsize != 1:
            unit = f"items of {self.dtype.itemsize} bytes"
        problem = (
            f"the offsets of row {row} ({start}..{end}) are not within the data ({size} {unit})"
        )
        return StoreFormatError(f"{self._offsets_file.path}: {problem}; rebuild it")

    def texts(self, rows: npt.NDArray[np.int64]) -> list[str]:
        """Rows decoded from UTF-8, in the order given.

        On a random-access column, a batch (up to ``_READ_AHEAD_ROWS`` rows) whose copy took
        longer than ``_COLD_SECONDS`` per row came (at least partly) from the device: the next
        batches first ask for all their rows at once (:meth:`MappedFile.will_need`), until a
        batch copies at page-cache speed again. Warm, the C helper (:mod:`lading.disk.native`)
        makes the ``str`` objects in one call where it is built.

        Raises (on either route, the same; the whole batch is checked before any decode):
            IndexError: a row is not in the column.
            StoreFormatError: a row's offsets are not within the data.
            UnicodeDecodeError: a row is not UTF-8.
        """
        buf = self.data.buffer
        batch = 1 < len(rows) <= _READ_AHEAD_ROWS and self.data.random_access
        ahead = batch and self._read_ahead
        if self._native is not None and not ahead:
            started = time.perf_counter()
            out = self._native_texts(self._native, rows)
            if batch:
                self._read_ahead = self._cold.cold(time.perf_counter() - started, len(rows))
            return out
        rows = np.asarray(rows, dtype=np.int64)
        if ahead:
            if len(rows) and int(rows.view(np.uint64).max()) >= len(self):
                self.bounds(rows)  # raises, naming the row, before asking for pages
            first = (rows * OFFSET_DTYPE.itemsize).tolist()
            self._offsets_file.will_need(first, [f + 2 * OFFSET_DTYPE.itemsize for f in first])
        starts, ends = self.bounds(rows)
        if ahead:
            self.data.will_need(starts, ends)
        started = time.perf_counter()  # the copy alone: asking for pages is not a cold read
        out = [str(buf[a:b], "utf-8") for a, b in zip(starts, ends)]
        if batch:
            self._read_ahead = self._cold.cold(time.perf_counter() - started, len(starts))
        return out

    def _native_texts(self, helper: ModuleType, rows: npt.NDArray[np.int64]) -> list[str]:
        rows = np.ascontiguousarray(rows, dtype=np.int64)
        try:
            out: list[str] = helper.texts(rows, self._offsets_file.buffer, self.data.buffer)
        except helper.Damaged as e:
            raise StoreFormatError(f"{self._offsets_file.path}: {e}; rebuild it") from None
        return out

    def arrays(self, rows: npt.NDArray[np.int64]) -> list[np.ndarray]:
        """Rows as numpy views of the map (no copy), in the order given: the C helper makes
        them in one call where it is built (checked as :meth:`bounds` checks), else a loop."""
        values = self._values
        if self._slicer is not None:
            rows = np.ascontiguousarray(rows, dtype=np.int64)
            try:
                views: list[np.ndarray] = self._slicer.slices(
                    rows, self._offsets_file.buffer, (values,)
                )
            except self._slicer.Damaged as e:
                self.bounds(rows)  # raises, naming the row as the numpy route does
                raise StoreFormatError(f"{self._offsets_file.path}: {e}; rebuild it") from None
            return views
        starts, ends = self.bounds(rows)
        return [values[a:b] for a, b in zip(starts, ends)]
