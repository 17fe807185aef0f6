"""File primitives every on-disk format shares: durable writes and directories, read-only maps."""

from __future__ import annotations

import mmap
import os
import zlib
from pathlib import Path

import numpy as np
import numpy.typing as npt


def write_file(path: Path, data: bytes | bytearray | memoryview | np.ndarray) -> dict[str, int]:
    """Write ``data`` to ``path`` and fsync it; return its size and CRC32 for ``meta.json``.

    ``data`` may be any C-contiguous buffer (a numpy array too): it is written in place, not
    copied into a ``bytes`` first (an index table of 100 MB would otherwise exist twice).
    """
    raw = np.ascontiguousarray(data).data if isinstance(data, np.ndarray) else memoryview(data)
    view = raw.cast("B")
    with open(path, "wb") as f:
        f.write(view)
        f.flush()
        os.fsync(f.fileno())
    return {"size": view.nbytes, "crc32": zlib.crc32(view)}


def fsync_dir(directory: Path) -> None:
    """Make a directory's entries durable (file creations and renames inside it)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class MappedFile:
    """A read-only memory map of one file; an empty file maps to empty bytes.

    Reading a row is a slice of the map (one copy into a new ``bytes``); the pages come from the
    OS page cache, shared by every process that maps the same file.

    ``random_access=True`` advises the kernel that reads land anywhere (``MADV_RANDOM``): a page
    fault then reads that page, not the device's whole read-ahead window around it. Measured on
    a 21 GB store with an 8 MiB read-ahead (``/sys/block/*/queue/read_ahead_kb``): cold lookups
    of random documents went from 134 docs/s to thousands.
    """

    def __init__(self, path: Path, random_access: bool = False) -> None:
        self.path = path
        size = path.stat().st_size
        self.buffer: mmap.mmap | bytes
        if size == 0:
            self.buffer = b""
        else:
            with open(path, "rb") as f:
                self.buffer = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            if random_access and hasattr(mmap, "MADV_RANDOM"):
                self.buffer.madvise(mmap.MADV_RANDOM)

    def array(self, dtype: npt.DTypeLike) -> np.ndarray:
        """The whole file as a numpy array of ``dtype`` (a view of the map, no copy)."""
        return np.frombuffer(self.buffer, dtype=dtype)
