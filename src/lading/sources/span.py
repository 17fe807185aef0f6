"""A byte range of an uncompressed line-based file, cut at line boundaries: one shard's part.

Shard ``i`` of ``n`` of one large file reads the lines that *start* in its byte range
``[start, end)``: the range is moved forward to the first line start at or after ``start``
(unless ``start`` is 0) and ends at the first line start at or after ``end``. Neighbouring
ranges share their boundary, so every line is read by exactly one shard, whatever the cut.
Line numbers inside a range count from its first line; :func:`lines_before` gives the offset
(counted only when a message needs it: scanning 1.5 GB to number one bad line is fine, doing it
for every shard is not).
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import IO, Any

from lading.sources.chunks import open_binary

_SCAN = 1 << 16  # bytes read at a time while looking for the next line start


def line_start_at_or_after(f: IO[bytes], offset: int, size: int) -> int:
    """The first byte at or after ``offset`` that starts a line (``size`` when none does)."""
    if offset <= 0:
        return 0
    if offset >= size:
        return size
    f.seek(offset - 1)  # a line starts at offset when the byte before it ends a line
    position = offset - 1
    while True:
        block = f.read(_SCAN)
        if not block:
            return size
        found = block.find(b"\n")
        if found >= 0:
            return position + found + 1
        position += len(block)


class _Range(io.RawIOBase):
    """Reads ``[first, last)`` of a file and then reports its end."""

    def __init__(self, path: Path, first: int, last: int) -> None:
        self._file = open(path, "rb")  # noqa: SIM115 - closed in close()
        self._file.seek(first)
        self._left = last - first

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        want = min(len(view), self._left)
        if want <= 0:
            return 0
        got = self._file.readinto(view[:want])
        self._left -= got or 0
        return got or 0

    def close(self) -> None:
        self._file.close()
        super().close()


def aligned(path: str | os.PathLike[str], start: int, end: int) -> tuple[int, int]:
    """``(first, last)``: the bytes of the lines that start in ``[start, end)``."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        return line_start_at_or_after(f, start, size), line_start_at_or_after(f, end, size)


def open_span(path: str | os.PathLike[str], start: int, end: int) -> IO[bytes]:
    """The lines of ``path`` that start in ``[start, end)``, as a buffered binary stream."""
    first, last = aligned(path, start, end)
    return io.BufferedReader(_Range(Path(path), first, last), buffer_size=1 << 20)


def lines_before(path: str | os.PathLike[str], offset: int) -> int:
    """Newlines in the first ``offset`` bytes of ``path`` (the line number before a span)."""
    count = 0
    with open(path, "rb") as f:
        left = offset
        while left > 0:
            block = f.read(min(left, 1 << 24))
            if not block:
                break
            count += block.count(b"\n")
            left -= len(block)
    return count


class Whole:
    """A whole file, opened as :func:`lading.sources.chunks.open_binary` opens it."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = path

    at_file_start = True  # its stream starts at byte 0, where a BOM is dropped

    def open(self) -> IO[bytes]:
        return open_binary(self.path)


class FilePart:
    """The lines of ``path`` that start in ``[start, end)``, for a reader of format ``fmt``.

    Raises:
        ValueError: the file cannot be read in byte ranges (compressed, or not TSV/JSONL).
    """

    def __init__(self, path: str | os.PathLike[str], fmt: str | None, start: int, end: int) -> None:
        name = os.fspath(path)
        if fmt not in ("tsv", "jsonl") or name.endswith((".gz", ".bz2", ".zst")):
            raise ValueError(
                f"{name}: only an uncompressed TSV or JSONL file can be read in byte ranges "
                f"(it is {fmt}); give each shard whole files instead"
            )
        self.path, self.start, self.end = Path(name), start, end
        self._before: int | None = None

    @property
    def at_file_start(self) -> bool:
        """Whether the part's stream starts at byte 0 of the file, the one place a BOM is
        dropped (a range starting later starts at the next line start, never at 0)."""
        return self.start <= 0

    def open(self) -> IO[bytes]:
        """The part's bytes as a buffered stream."""
        return open_span(self.path, self.start, self.end)

    def absolute_line(self, line: int) -> int:
        """The file's number of ``line`` as counted from the part's first line (the lines
        before the part are counted once, and only when a message needs it)."""
        if self._before is None:
            self._before = lines_before(self.path, aligned(self.path, self.start, self.end)[0])
        return line + self._before
