"""Opening corpus files and cutting them into records: compression, frames, line and TREC chunks.

This is the byte level under :mod:`lading.sources`: :func:`open_binary` decompresses ``.gz``,
``.bz2`` and ``.zst`` on the fly, member after member (a truncated or damaged member, or bytes
after the last one that do not decompress, is an error in every format), the
*chunkers* cut the byte stream into raw :class:`Chunk` s with the line each starts on and its
byte span, and :func:`reading` turns a structural or decompression failure into a
:class:`~lading.errors.SourceError` naming file and line. Turning a chunk into a record is
:mod:`lading.sources.parsers`' job.
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import io
import os
import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, NamedTuple

from lading.errors import SourceError, missing_package

COMPRESSED_SUFFIXES: tuple[str, ...] = (".gz", ".bz2", ".zst")
BOM = b"\xef\xbb\xbf"  # a UTF-8 byte order mark: dropped at byte 0 of every source file only


class Chunk(NamedTuple):
    """Raw bytes of one record as found in the (decompressed) file.

    Attributes:
        line: 1-based line number where the record starts.
        start: byte offset of the record's first byte.
        end: byte offset one past its last byte (line end included).
        data: the bytes ``[start, end)``.
    """

    line: int
    start: int
    end: int
    data: bytes


_DOC_OPEN = re.compile(rb"^\s*<DOC>", re.IGNORECASE)
_DOC_CLOSE = re.compile(rb"</DOC>\s*$", re.IGNORECASE)


# --------------------------------------------------------------------------- chunkers


def numbered_lines(
    stream: IO[bytes], first_line: int = 1, first_byte: int = 0, strip_bom: bool = True
) -> Iterator[Chunk]:
    """Every line of ``stream`` (line end included) with its number and byte range: the one
    line reader of the source layer. A UTF-8 BOM at the very start is dropped (the line's
    range starts after it) when ``strip_bom``. A stream that starts inside a file (a block, a
    shard's part) passes False: a BOM there opens a line of the file's text (``cat a b``),
    which a reader of the whole file does not drop. ``first_line``/``first_byte`` number a
    block's lines as in the file."""
    return _lines(stream, first_line, first_byte, strip_bom, True)


def chunk_lines(
    stream: IO[bytes], first_line: int = 1, first_byte: int = 0, strip_bom: bool = True
) -> Iterator[Chunk]:
    """One chunk per non-blank line (see :func:`numbered_lines`)."""
    return _lines(stream, first_line, first_byte, strip_bom, False)


def chunk_json_lines(
    stream: IO[bytes], first_line: int = 1, first_byte: int = 0, strip_bom: bool = True
) -> Iterator[Chunk]:
    """One chunk per line holding more than white space: JSON allows white space around a
    value, so a line of spaces or tabs holds no record, as an empty line holds none (it was
    refused as invalid JSON, where an empty line was passed over)."""
    return _lines(stream, first_line, first_byte, strip_bom, False, True)


def _lines(
    stream: IO[bytes],
    first_line: int,
    first_byte: int,
    strip_bom: bool,
    blank: bool,
    space: bool = False,
) -> Iterator[Chunk]:
    """:func:`numbered_lines` (``blank``) or :func:`chunk_lines`: one loop, no generator
    stacked on another (this runs once a record of every TSV and JSONL source)."""
    new = tuple.__new__  # Chunk(...) without the Python-level __new__ of a NamedTuple: same tuple
    pos = first_byte
    for number, raw in enumerate(stream, start=first_line):
        start = pos
        pos += len(raw)
        if strip_bom and number == 1 and raw.startswith(BOM):
            raw = raw[len(BOM) :]
            start += len(BOM)
        # a blank line (nothing but line ends) separates nothing and holds nothing; a line
        # whose first byte is no line end is not blank, known without copying it
        if blank or (
            raw and (raw[0] not in b"\r\n" or raw.rstrip(b"\r\n")) and not (space and raw.isspace())
        ):
            yield new(Chunk, (number, start, pos, raw))


def chunk_trec(stream: IO[bytes], strip_bom: bool = True) -> Iterator[Chunk]:
    """One chunk per ``<DOC>…</DOC>`` block (``strip_bom``: see :func:`numbered_lines`).

    Raises RecordError (wrapped by the reader with the file and line) for text outside a block.
    A last block that the end of the file cuts off is handed over as it is: the parser refuses
    it (a record error, so ``on_error="skip"`` skips and counts it; nothing follows it).

    A ``<DOC>`` line inside an open block means the block lacks its ``</DOC>`` (a cut or
    concatenated file): the block is handed over with that line, for the parser to refuse, and a
    new block opens at that line, so the next document is still read. A chunk holding a second
    ``<DOC>`` or ``<DOCNO>`` (see :func:`trec_second_mark`) carries the line of that mark, not
    of its start: the record error names the line where the next document begins.
    """
    parts: list[bytes] = []
    start = first_line = 0
    for number, line_start, pos, raw in numbered_lines(stream, strip_bom=strip_bom):
        if parts and _DOC_OPEN.match(raw):  # the open block has no </DOC>: refused, see above
            parts.append(raw)
            yield _trec_chunk(first_line, start, pos, parts)
            parts = []
        if not parts:
            if raw.isspace() or not raw:
                continue
            if not _DOC_OPEN.match(raw):
                raise _ChunkError(number, f"expected <DOC>, found {raw[:40]!r}")
            start, first_line = line_start, number
        parts.append(raw)
        if _DOC_CLOSE.search(raw):
            yield _trec_chunk(first_line, start, pos, parts)
            parts = []
    if parts:  # cut off by the end of the file: the parser refuses it, or it is skipped
        yield _trec_chunk(first_line, start, pos, parts)


def _trec_chunk(first_line: int, start: int, end: int, parts: list[bytes]) -> Chunk:
    """The chunk of one block's lines; at the line of its second mark when it has one."""
    data = b"".join(parts)
    mark = trec_second_mark(data)
    if mark is not None:
        first_line += data.count(b"\n", 0, mark[0])
    return Chunk(first_line, start, end, data)


# a mark that opens a document or names one: at a line's start, or right after a </DOC> or a
# <DOC> on its line; a "<doc>" inside a line of text (markup a web page quotes) is text
_DOC_MARK = re.compile(
    rb"(?:^[ \t]*|</DOC>[ \t]*|<DOC>[ \t]*)(<DOC(NO)?>)", re.IGNORECASE | re.MULTILINE
)


def trec_second_mark(block: bytes) -> tuple[int, str] | None:
    """Where one TREC block holds a second document: the offset and name of the first ``<DOC>``
    after the opening one, or of a second ``<DOCNO>``, each counted where it opens or names a
    document (a line's start, or after ``</DOC>`` or ``<DOC>`` on its line; not markup quoted
    inside the text); None for a block of one document.

    One scan of the block in C: the chunker and the parser of every TREC record call it.
    """
    docs = docnos = 0
    for match in _DOC_MARK.finditer(block):
        if match.group(2) is None:
            docs += 1
            if docs == 2:
                return match.start(1), "<DOC>"
        else:
            docnos += 1
            if docnos == 2:
                return match.start(1), "<DOCNO>"
    return None


class _ChunkError(Exception):
    """A structural error found while cutting the stream; not recoverable by skipping."""

    def __init__(self, line: int, reason: str) -> None:
        super().__init__(reason)
        self.line = line
        self.reason = reason


# --------------------------------------------------------------------------- files


def open_binary(path: str | os.PathLike[str]) -> IO[bytes]:
    """Open ``path`` for reading bytes, decompressing ``.gz``, ``.bz2`` and ``.zst`` on the fly.

    Every kind of damage raises: a truncated stream ``EOFError``, bytes that do not decompress
    (a flipped byte, a damaged later member, garbage after the last one) ``OSError`` or
    ``zlib.error``; :func:`reading` turns each into one SourceError naming the file.
    """
    name = os.fspath(path)
    if name.endswith(".gz"):
        return gzip.open(name, "rb")  # type: ignore[return-value]
    if name.endswith(".bz2"):
        return io.BufferedReader(_Bz2Reader(name), buffer_size=_READ)
    if name.endswith(".zst"):
        try:
            import zstandard
        except ImportError:
            raise missing_package(f"{name} (zstd-compressed)", "zstandard", "zstd") from None
        return io.BufferedReader(_ZstdReader(name, zstandard), buffer_size=_READ)
    return open(name, "rb")


_READ = 1 << 20  # compressed bytes read at once, and the buffer the lines are cut from
_MAX_OUT = 8 << 20  # decompressed bytes made by one bz2 call (a bound on a bz2 bomb's memory)


class _Decompressing(io.RawIOBase):
    """A raw reader of the pieces :meth:`_piece` decompresses, handed out without copying the
    rest of a piece at each read (a piece is many reads long)."""

    def __init__(self, name: str) -> None:
        self._file = open(name, "rb")  # noqa: SIM115 - closed in close()
        self._pending = memoryview(b"")
        self._at = 0  # what of _pending was handed out

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        while self._at >= len(self._pending):
            piece = self._piece()
            if not piece:
                return 0
            self._pending, self._at = memoryview(piece), 0
        n = min(len(view), len(self._pending) - self._at)
        view[:n] = self._pending[self._at : self._at + n]
        self._at += n
        return n

    def _piece(self) -> bytes:
        """The next decompressed bytes, ``b""`` at the end of the file only."""
        raise NotImplementedError

    def close(self) -> None:
        self._file.close()
        super().close()


class _Bz2Reader(_Decompressing):
    """Decompresses a ``.bz2`` file member after member (``cat a.bz2 b.bz2``, pbzip2, lbzip2),
    and fails where bytes left after a member do not decompress.

    Python's ``bz2.open`` takes whatever follows a member and does not decompress as trailing
    junk and stops there without a word: a damaged later member made half a corpus. Here the
    bytes after each member start a new one, so damage raises ``OSError`` and a member cut off
    by the end of the file ``EOFError``, as gzip does.
    """

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self._obj = bz2.BZ2Decompressor()
        self._fed = False  # bytes of the current member were fed to _obj

    def _piece(self) -> bytes:
        while True:
            if self._obj.eof:  # a member ended: the bytes after it start the next one
                data = self._obj.unused_data or self._file.read(_READ)
                if not data:
                    return b""
                self._obj, self._fed = bz2.BZ2Decompressor(), False
            elif self._obj.needs_input:
                data = self._file.read(_READ)
                if not data:
                    if self._fed:
                        raise EOFError("the bz2 stream ends inside a member (truncated file)")
                    return b""  # an empty file
            else:
                data = b""  # _obj still holds input that it did not decompress for _MAX_OUT
            self._fed = self._fed or bool(data)
            out = self._obj.decompress(data, _MAX_OUT)
            if out:
                return out


class _ZstdReader(_Decompressing):
    """Decompresses a ``.zst`` file frame after frame, and fails on a truncated last frame.

    zstandard's ``stream_reader`` ends quietly when the input stops in the middle of a frame,
    which would make an interrupted download look like a shorter corpus. Here every frame must
    reach its end (``decompressobj().eof``); otherwise reading raises ``EOFError``, as gzip and
    bz2 do. Damaged data (a flipped byte, garbage after the last frame) raises ``OSError``, as
    gzip and bz2 do, not zstandard's own ``ZstdError``: :func:`reading` turns both into one
    :class:`~lading.errors.SourceError` naming the file.
    """

    def __init__(self, name: str, zstandard: Any) -> None:
        super().__init__(name)
        self._zstd = zstandard
        self._obj = zstandard.ZstdDecompressor().decompressobj()
        self._in_frame = False  # bytes of the current frame were fed and it has not ended

    def _piece(self) -> bytes:
        while True:
            data = self._file.read(_READ)
            if not data:
                if self._in_frame:
                    raise EOFError("the zstd stream ends inside a frame (truncated file)")
                return b""
            out = self._feed(data)
            if out:
                return out

    def _feed(self, data: bytes) -> bytes:
        out = []
        while data:
            self._in_frame = True
            try:
                out.append(self._obj.decompress(data))
            except self._zstd.ZstdError as e:  # reading() names the file: one line, no trace
                raise OSError(str(e)) from e
            if not self._obj.eof:
                break
            self._in_frame = False  # a frame ended; what is left starts the next one
            data = self._obj.unused_data
            self._obj = self._zstd.ZstdDecompressor().decompressobj()
        return b"".join(out)


def is_compressed(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` is read through a decompressor (byte offsets are then not seekable)."""
    return os.fspath(path).endswith(COMPRESSED_SUFFIXES)


@contextlib.contextmanager
def reading(path: Path) -> Iterator[list[int]]:
    """Turn a structural or decompression failure into a SourceError naming file and line.

    The body keeps the line it is at in the yielded one-element list.
    """
    where = [0]
    try:
        yield where
    except _ChunkError as e:
        raise SourceError(path, e.line, e.reason) from None
    except (EOFError, zlib.error) as e:
        raise _corrupt(path, where[0], e) from None
    except OSError as e:
        if isinstance(e, FileNotFoundError):
            raise
        if isinstance(e, IsADirectoryError):  # (open() of a folder: no stream to call corrupt)
            raise SourceError(
                path, None, "a folder, not a file: pass the file in it to read"
            ) from None
        raise _corrupt(path, where[0], e) from None


def _corrupt(path: Path, line: int, error: BaseException) -> SourceError:
    return SourceError(
        path,
        line or None,
        f"the compressed stream is corrupt or truncated ({error}); re-download or recompress it",
    )
