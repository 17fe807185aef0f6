"""The packed store's files on disk: ``meta.json`` written last, ragged columns, checks on open.

A store is a directory:

- ``meta.json``: format name and version, row count, index kind, columns, token dtype, the
  source's fingerprint, and for every other file its exact size and CRC32.
- ``<column>.bin`` + ``<column>.off``: a ragged column. ``.bin`` holds the rows' bytes back to
  back, ``.off`` holds ``count + 1`` little-endian uint64 offsets (row i is
  ``bin[off[i]:off[i+1]]``). Columns: ``text`` and ``ids`` (UTF-8), ``field.<name>`` (UTF-8),
  ``tokens`` (token ids, uint16 or uint32, offsets counted in tokens).
- the id index (see :mod:`lading.stores.index`).

Nothing is pickled. ``meta.json`` is the last file written, so a directory without it, or with
files whose sizes differ from it, is refused on open.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import re
import zlib
from array import array
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import numpy.typing as npt

from lading.errors import StoreFormatError

FORMAT_NAME = "lading.packed"
LADING_FORMATS = ("lading.packed", "lading.tokens", "lading.offsets")
FORMAT_VERSION = 1
META_FILE = "meta.json"
OFFSET_DTYPE = np.dtype("<u8")
_FIELD_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")
_WRITE_BUFFER = 1 << 22  # flush column bytes to disk every 4 MiB


def column_files(column: str) -> tuple[str, str]:
    """File names (data, offsets) of a ragged column."""
    return f"{column}.bin", f"{column}.off"


def field_column(name: str) -> str:
    """Column name of an extra field, checked to be a safe file name."""
    if not _FIELD_NAME.match(name):
        raise ValueError(
            f"field name {name!r} cannot name a file; use letters, digits, '_', '-' or '.'"
        )
    return f"field.{name}"


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

    def _write(self, data: bytes) -> None:
        self.crc = zlib.crc32(data, self.crc)
        try:
            self._file.write(data)
        except OSError as e:  # say which file: the thread's traceback will not be seen
            raise OSError(e.errno, e.strerror, str(self.path)) from e

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


class RaggedWriter:
    """Appends rows of bytes to ``<column>.bin`` and keeps their offsets for ``<column>.off``.

    Small rows are buffered into 4 MiB blocks, large blocks go as they are; a background thread
    writes them and keeps a CRC32 of everything for ``meta.json``, so ``lading verify`` can check
    content later without a second read at build time.
    """

    def __init__(self, directory: Path, column: str, itemsize: int = 1) -> None:
        self.column = column
        self.itemsize = itemsize
        bin_name, _ = column_files(column)
        self._file = _BackgroundFile(directory / bin_name)
        self._directory = directory
        self._offsets = array("Q", [0])
        self._buffer = bytearray()
        self._written = 0  # items (bytes or tokens) written, buffered included

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def append(self, data: bytes | bytearray | memoryview) -> None:
        """Add one row."""
        self._buffer += data
        self._written += len(data) // self.itemsize
        self._offsets.append(self._written)
        if len(self._buffer) >= _WRITE_BUFFER:
            self._flush()

    def append_many(self, data: bytes, lengths: npt.NDArray[np.int64]) -> None:
        """Add ``len(lengths)`` rows whose bytes are ``data``, back to back."""
        ends = np.cumsum(lengths, dtype=np.int64) // self.itemsize + self._written
        self._offsets.frombytes(ends.astype(np.uint64).tobytes())
        self._written += len(data) // self.itemsize
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
        if missing > 0:
            self._offsets.extend([self._written] * missing)

    def _flush(self) -> None:
        if self._buffer:
            self._file.write(bytes(self._buffer))
            self._buffer.clear()

    def finish(self) -> dict[str, dict[str, int]]:
        """Flush, write the offsets file, fsync both, and describe them for ``meta.json``."""
        self._flush()
        self._file.close()
        bin_name, off_name = column_files(self.column)
        offsets = np.frombuffer(self._offsets, dtype=np.uint64).astype(OFFSET_DTYPE, copy=False)
        off_bytes = offsets.tobytes()
        write_file(self._directory / off_name, off_bytes)
        return {
            bin_name: {"size": self._written * self.itemsize, "crc32": self._file.crc},
            off_name: {"size": len(off_bytes), "crc32": zlib.crc32(off_bytes)},
        }


def write_file(path: Path, data: bytes) -> dict[str, int]:
    """Write ``data`` to ``path`` and fsync it; return its size and CRC32 for ``meta.json``."""
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return {"size": len(data), "crc32": zlib.crc32(data)}


SPOT_BYTES = 4096


def _spots(path: Path) -> bytes:
    """A file's first and last 4 KiB (they overlap in a file under 8 KiB)."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(SPOT_BYTES)
        f.seek(max(0, size - SPOT_BYTES))
        return head + f.read(SPOT_BYTES)


def spot_crc32(path: Path) -> int:
    """CRC32 of a file's first and last 4 KiB: read on every open, it catches a file that was
    zero-filled (what some filesystems leave after a crash) or overwritten, for 8 KiB of I/O."""
    return zlib.crc32(_spots(path))


def write_meta(directory: Path, meta: dict[str, Any]) -> None:
    """Write ``meta.json`` (the commit point of a build) and fsync the directory.

    Each listed file gets its spot checksum (:func:`spot_crc32`), checked on open.
    """
    for name, info in meta.get("files", {}).items():
        info["spot_crc32"] = spot_crc32(directory / name)
    text = json.dumps(meta, indent=2, sort_keys=True)
    write_file(directory / META_FILE, text.encode("utf-8"))
    fsync_dir(directory)


def fsync_dir(directory: Path) -> None:
    """Make a directory's entries durable (file creations and renames inside it)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_meta(
    directory: str | os.PathLike[str], expected_format: str = FORMAT_NAME, spots: bool = True
) -> dict[str, Any]:
    """Load and check ``meta.json``: format, version, every listed file's size and (unless
    ``spots`` is False) the checksum of its first and last 4 KiB.

    Raises:
        StoreFormatError: naming the directory or file and what was expected.
    """
    root = Path(directory)
    if not root.is_dir():
        raise StoreFormatError(f"{root} is not a lading store: no such directory")
    meta_path = root / META_FILE
    if not meta_path.is_file():
        raise StoreFormatError(
            f"{root} is not a lading store: {META_FILE} is missing (an interrupted build leaves "
            "no meta.json; build it again with `lading build`)"
        )
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise StoreFormatError(f"{meta_path} is not valid JSON ({e}); rebuild the store") from None
    if not isinstance(meta, dict) or meta.get("format") != expected_format:
        found = meta.get("format") if isinstance(meta, dict) else type(meta).__name__
        raise StoreFormatError(f"{meta_path}: format is {found!r}, expected {expected_format!r}")
    if meta.get("version") != FORMAT_VERSION:
        raise StoreFormatError(
            f"{meta_path}: unsupported store version {meta.get('version')!r}; this lading reads "
            f"version {FORMAT_VERSION}. Rebuild the store with this lading, or install the "
            "lading that built it."
        )
    files = meta.get("files")
    if not isinstance(files, dict):
        raise StoreFormatError(f"{meta_path}: no file list; rebuild the store")
    for name, info in files.items():
        _check_listed_file(root, name, info, spots)
    return meta


def _check_listed_file(root: Path, name: str, info: Any, spots: bool) -> None:
    if not isinstance(name, str) or "/" in name or "\\" in name or name in ("", ".", ".."):
        raise StoreFormatError(f"{root / META_FILE}: file name {name!r} points outside the store")
    path = root / name
    if not path.is_file():
        raise StoreFormatError(f"{path} is missing; the store is incomplete, rebuild it")
    expected = info.get("size") if isinstance(info, dict) else None
    actual = path.stat().st_size
    if actual != expected:
        raise StoreFormatError(
            f"{path} is {actual} bytes, expected {expected} (truncated or replaced?); rebuild "
            "the store"
        )
    spot = info.get("spot_crc32")
    if spots and spot is not None and zlib.crc32(seen := _spots(path)) != spot:
        zeros = not seen.strip(b"\0")
        raise StoreFormatError(
            f"{path}: its first and last {SPOT_BYTES} bytes do not match their checksum"
            + (" (they are all zero bytes, as a crash can leave a file)" if zeros else "")
            + "; the file was damaged or replaced after the build. Rebuild the store "
            "(`lading verify` checks every byte)."
        )


def verify_checksums(
    directory: str | os.PathLike[str], expected_format: str | None = None
) -> list[str]:
    """Read every file of a store in full and compare its CRC32; return the problems found.

    ``expected_format`` defaults to whichever lading format (a packed store, a token corpus,
    an offsets index) ``meta.json`` declares.
    """
    root = Path(directory)
    if expected_format is None:
        expected_format = FORMAT_NAME
        with contextlib.suppress(OSError, ValueError, AttributeError):
            declared = json.loads((root / META_FILE).read_text(encoding="utf-8")).get("format")
            if isinstance(declared, str) and declared in LADING_FORMATS:
                expected_format = declared
    meta = read_meta(root, expected_format, spots=False)  # every byte is checked below
    problems = []
    for name, info in sorted(meta["files"].items()):
        crc = 0
        with open(root / name, "rb") as f:
            while block := f.read(1 << 24):
                crc = zlib.crc32(block, crc)
        if crc != info.get("crc32"):
            problems.append(f"{root / name}: CRC32 {crc:#010x}, expected {info.get('crc32'):#010x}")
    return problems


class MappedFile:
    """A read-only memory map of one file; an empty file maps to empty bytes.

    Reading a row is a slice of the map (one copy into a new ``bytes``); the pages come from the
    OS page cache, shared by every process that maps the same file.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        size = path.stat().st_size
        self.buffer: mmap.mmap | bytes
        if size == 0:
            self.buffer = b""
        else:
            with open(path, "rb") as f:
                self.buffer = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)

    def array(self, dtype: npt.DTypeLike) -> np.ndarray:
        """The whole file as a numpy array of ``dtype`` (a view of the map, no copy)."""
        return np.frombuffer(self.buffer, dtype=dtype)
