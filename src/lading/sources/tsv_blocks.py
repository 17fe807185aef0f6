"""The bulk path for ``id<TAB>text`` files: 8 MiB blocks scanned with numpy, not line by line.

MS MARCO's collection.tsv has 8.8M lines; a Python loop with a parse call per line costs more
than reading the file. Here a block of whole lines is validated as UTF-8 in one call, its
newlines and tabs are found with numpy, and ids and texts are cut out with one slice each.
A block is taken in bulk only when every line in it is plainly well-formed; any line that needs
a decision (no tab, extra columns, an empty id, an id starting or ending with a space, control
or non-ASCII byte, a NUL, invalid UTF-8) sends the whole block back to the per-line parser, so
results and error messages are exactly those of :mod:`lading.sources`.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator, Sequence
from typing import IO, Any, NamedTuple

import numpy as np
import numpy.typing as npt

from lading.sources.chunks import BOM
from lading.sources.parsers import HEADER_ID_NAMES, HEADER_NAME_BYTES, HEADER_TEXT_NAMES, is_header

BLOCK_BYTES = 1 << 23  # 8 MiB: numpy calls amortised, memory bounded
# the longest id and text a header line may name (:func:`_names_line`)
_LONGEST_NAME = {"id": max(map(len, HEADER_ID_NAMES)), "text": max(map(len, HEADER_TEXT_NAMES))}


class RawBlock(NamedTuple):
    """Whole lines of the (decompressed) file: their bytes, first byte offset and first line."""

    data: bytes
    start: int
    line: int


class Column(NamedTuple):
    """One column of a block: every row's bytes back to back, and each row's byte length."""

    data: bytes
    lengths: npt.NDArray[np.int64]

    def values(self) -> list[bytes]:
        """Each row's bytes (for tests and small blocks; the build never splits a column)."""
        ends = np.cumsum(self.lengths).tolist()
        return [self.data[a:b] for a, b in zip([0, *ends[:-1]], ends)]


class TsvBlock(NamedTuple):
    """Records side by side in columns: the one block shape every reader's bulk path gives
    (a clean TSV block as cut from the file; other records gathered by :func:`records_block`).

    Attributes:
        ids: each record's id (ASCII-safe edges, UTF-8 inside).
        texts: each record's text, UTF-8.
        fields: the other named columns, name to column, in the file's order.
        lines: 1-based line number of each record.
        end: byte offset just past the block.
        newlines: newline bytes in the block (where the next block's line numbers start).
    """

    ids: Column
    texts: Column
    fields: dict[str, Column]
    lines: npt.NDArray[np.int64]
    end: int
    newlines: int = 0


def whole_lines(
    stream: IO[bytes], size: int | None = None, strip_bom: bool = True
) -> Iterator[tuple[bytes, int]]:
    """``(bytes, offset)`` of each block of whole lines, about ``size`` bytes each.

    A BOM at the stream's start is dropped when ``strip_bom``: the stream starts at byte 0 of
    its file. A shard's part that starts later passes False: a BOM there opens a line in the
    middle of the file (``cat a.tsv b.tsv``), which the one-process build keeps (TSV) or
    refuses (JSONL), so the part must read it as that build does.

    Each block is copied once (the previous read's partial last line joined to this read's
    whole lines); line numbers are the caller's, who may know them without counting.
    """
    size = size or BLOCK_BYTES
    carry = b""
    start = 0
    first = True
    while True:
        data = stream.read(max(size, len(BOM)) if first else size)
        if not data:
            if carry:
                yield carry, start
            return
        if first:
            first = False
            if strip_bom and data.startswith(BOM):
                data, start = data[len(BOM) :], len(BOM)
                if not data:
                    continue
        cut = data.rfind(b"\n") + 1
        if cut == 0:
            carry += data
            continue
        block = b"".join((carry, memoryview(data)[:cut])) if carry or cut < len(data) else data
        carry = data[cut:]
        yield block, start
        start += len(block)


def scan_block(block: RawBlock, columns: Sequence[str] = ("id", "text")) -> TsvBlock | None:
    """The records of a block when every line is plainly ``columns`` joined by tabs; else None.

    Plainly means: exactly ``len(columns) - 1`` tabs per line (no missing or extra column), an
    id that is not empty and has no whitespace, control or non-ASCII byte at either end, no NUL,
    valid UTF-8. Anything else is for the per-line parser to judge and report.
    """
    buf = block.data
    if not buf.endswith(b"\n"):
        buf += b"\n"  # the file's last line had no newline
    if not buf.isascii():  # ASCII is valid UTF-8: skip making an 8 MiB str to find out
        try:
            buf.decode("utf-8")
        except UnicodeDecodeError:
            return None
    if buf.find(0) >= 0:  # memchr: ~3x faster than a numpy comparison pass
        return None
    arr = np.frombuffer(buf, dtype=np.uint8)
    # one pass finds tabs and newlines together (bytes below 11), a second sorts out the few
    # other control bytes: half the passes over the block of one per separator
    low = np.flatnonzero(arr < 11)
    low_values = arr[low]
    ends = low[low_values == 10]
    newlines = len(ends) - (buf is not block.data)  # a newline added above is not the file's
    starts = np.empty_like(ends)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    number = np.arange(len(ends), dtype=np.int64)
    crlf = (ends > starts) & (arr[ends - 1] == 13)  # CRLF reads as LF ...
    if buf is not block.data:
        crlf[-1] = False  # ... but a last line without a newline keeps its "\r", as per line
    ends = ends - crlf
    keep = ends > starts  # blank lines hold no record
    starts, ends, number = starts[keep], ends[keep], number[keep]
    empty = Column(b"", np.empty(0, dtype=np.int64))
    if len(starts) == 0:
        return TsvBlock(empty, empty, {}, number, block.start + len(block.data), newlines)
    tabs = low[low_values == 9]
    seps = len(columns) - 1
    first_tab = np.searchsorted(tabs, starts)
    if np.any(np.searchsorted(tabs, ends) - first_tab != seps):
        return None  # a line with a missing or an extra column
    # column j of each line runs from bounds[j] + 1 (the line's start for j = 0) to bounds[j + 1]
    bounds = [starts - 1, *(tabs[first_tab + j] for j in range(seps)), ends]
    cut = [(bounds[j] + 1, bounds[j + 1]) for j in range(len(columns))]
    id_start, id_end = cut[columns.index("id")]
    if np.any(id_end == id_start):
        return None  # an empty id
    edges = np.concatenate([arr[id_start], arr[id_end - 1]])
    if np.any((edges <= 32) | (edges >= 127)):
        return None  # an id edge the per-line parser must judge (whitespace, control, non-ASCII)
    if buf.find(b"\r") >= 0:  # (a CRLF file's line ends were cut off above)
        crs = np.flatnonzero(arr == 13)
        if _cr_inside(crs, id_start, id_end) or _cr_inside(crs, starts, bounds[seps]):
            # an id holding a CR, or a CR before a line's last tab (lone-CR line ends, or a
            # stray CR in a column): the per-line parser judges them (check_id, LONE_CR)
            return None
    if _names_line(arr, cut, columns):
        return None  # a header line: the per-line parser refuses it
    cols = {name: _cut(arr, a, b) for name, (a, b) in zip(columns, cut)}
    texts, ids = cols.pop("text"), cols.pop("id")
    end = block.start + len(block.data)
    return TsvBlock(ids, texts, cols, number + block.line, end, newlines)


def _cr_inside(
    crs: npt.NDArray[np.int64], starts: npt.NDArray[np.int64], ends: npt.NDArray[np.int64]
) -> bool:
    """Whether a CR byte (at the sorted positions ``crs``) lies inside any span
    ``[starts[i], ends[i])``."""
    return bool(np.any(np.searchsorted(crs, ends) > np.searchsorted(crs, starts)))


def _names_line(
    arr: npt.NDArray[np.uint8],
    cut: list[tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]],
    columns: Sequence[str],
) -> bool:
    """Whether a line of the block names its columns (:func:`~lading.sources.parsers.is_header`:
    pandas' ``to_csv(sep="\\t")``, an export's ``pid<TAB>passage``). Vectorised over the rows:
    only a line whose id starts with a letter or ``_`` and whose fields are all short enough
    to be names is decoded and asked (a numeric id never is)."""
    maybe = np.ones(len(cut[0][0]), dtype=bool)
    for name, (start, end) in zip(columns, cut):  # (a column's own name, of any length)
        longest = _LONGEST_NAME.get(name, max(HEADER_NAME_BYTES, len(name.encode())))
        maybe &= end - start <= longest
    id_start, _ = cut[columns.index("id")]
    first = arr[id_start] | 0x20  # ASCII letters lowercased (and "_" to 0x7F, kept apart)
    maybe &= ((first >= ord("a")) & (first <= ord("z"))) | (arr[id_start] == ord("_"))
    for row in np.flatnonzero(maybe).tolist():
        parts = [arr[a[row] : b[row]].tobytes().decode("utf-8", "replace") for a, b in cut]
        if is_header(parts, columns):
            return True
    return False


def _cut(
    arr: npt.NDArray[np.uint8], starts: npt.NDArray[np.int64], ends: npt.NDArray[np.int64]
) -> Column:
    """The bytes ``arr[starts[i]:ends[i]]`` of every row, back to back, and their lengths.

    Three ways, whichever touches least (measured on 8 MiB blocks): short values (ids) as a
    rows x width gather; many rows (passages: 26k per block) as one mask over the block, built
    with ``np.repeat``; few long rows (documents: ~1.3k per block) one slice per row.
    """
    lengths = (ends - starts).astype(np.int64)
    n = len(lengths)
    width = int(lengths.max()) if n else 0
    if width <= 64 and width * n <= 4 * int(lengths.sum()) + 64:
        columns = np.arange(width)
        index = np.minimum(starts[:, None] + columns, len(arr) - 1)
        return Column(arr[index][columns < lengths[:, None]].tobytes(), lengths)
    if n * _SLICE_COST > len(arr):
        runs = np.empty(2 * n + 1, dtype=np.int64)  # gap, row, gap, row, ..., gap
        runs[0], runs[-1] = starts[0], len(arr) - ends[-1]
        runs[1:-1:2] = lengths
        runs[2:-1:2] = starts[1:] - ends[:-1]
        keep = np.zeros(2 * n + 1, dtype=bool)
        keep[1::2] = True
        return Column(arr[np.repeat(keep, runs)].tobytes(), lengths)
    view = memoryview(arr.data)
    return Column(b"".join([view[a:b] for a, b in zip(starts.tolist(), ends.tolist())]), lengths)


_SLICE_COST = 540  # a Python slice per row costs about what a mask pass costs per 540 bytes


def int_values(ids: Column) -> npt.NDArray[np.int64] | None:
    """int64 values when every id is a canonical integer (no sign, no leading zero, ≤18 digits).

    Parsed in numpy from the column's bytes (a Python ``int()`` per id cost as much as reading
    the file): each digit times its power of ten, summed per id.
    """
    lengths = ids.lengths
    if len(lengths) == 0:
        return np.empty(0, dtype=np.int64)
    if not ids.data.isdigit() or lengths.min() < 1:  # bytes.isdigit is ASCII-only
        return None
    if lengths.max() > 18:
        return None
    digits = np.frombuffer(ids.data, np.uint8).astype(np.int64) - ord("0")
    firsts = np.cumsum(lengths) - lengths
    if np.any((digits[firsts] == 0) & (lengths > 1)):
        return None  # a leading zero: "007" is not the integer 7's canonical spelling
    places = np.repeat(firsts + lengths - 1, lengths) - np.arange(len(digits))
    return np.add.reduceat(digits * _POWERS[places], firsts)


_POWERS = 10 ** np.arange(18, dtype=np.int64)


def scanned_blocks(
    stream: IO[bytes],
    columns: Sequence[str] = ("id", "text"),
    ahead: int = 2,
    strip_bom: bool = True,
) -> Iterator[tuple[RawBlock, TsvBlock | None]]:
    """Each block of ``stream`` with its scan, read and scanned on a thread ``ahead`` blocks early
    (``strip_bom``: see :func:`whole_lines`).

    A block that scanned comes with its line and offset only (``data`` empty): the raw bytes are
    kept for the per-line parser of a block that did not.

    Reading (a cold page cache waits on the disk) and numpy's passes over a block release the
    GIL, so they overlap the caller writing the previous block. Errors of the thread are raised
    here, in order; closing the iterator early stops the thread.
    """
    done = object()
    slots: queue.Queue[Any] = queue.Queue(maxsize=ahead)
    stop = threading.Event()

    def offer(item: Any) -> bool:
        """Queue ``item`` once there is room; False when the consumer stopped first (every
        put, the last ones too: a consumer that stopped early no longer takes any)."""
        while not stop.is_set():
            try:
                slots.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        line = 1
        try:
            for data, start in whole_lines(stream, strip_bom=strip_bom):
                raw = RawBlock(data, start, line)
                scanned = scan_block(raw, columns)
                line += scanned.newlines if scanned is not None else data.count(b"\n")
                if scanned is not None:  # its bytes are in the columns now: do not queue them twice
                    raw = RawBlock(b"", start, raw.line)
                if not offer((raw, scanned)):
                    return
            offer(done)
        except BaseException as e:  # handed to the consumer, raised there
            offer(e)

    thread = threading.Thread(target=produce, name="lading-scan", daemon=True)
    thread.start()
    try:
        while True:
            item = slots.get()
            if item is done:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        thread.join()


def column_of(values: list[bytes]) -> Column:
    """``values`` as one column: their bytes back to back, and each one's length."""
    return Column(b"".join(values), np.fromiter(map(len, values), np.int64, len(values)))


def records_block(records: list[tuple[Any, int, int]]) -> TsvBlock:
    """Records ``(record, line, end)`` (from the per-record parsers) as one block: a field a
    record lacks is empty in its row, as the store keeps it; ``end`` is the last one's."""
    names: dict[str, None] = {}
    for record, _, _ in records:
        names.update(dict.fromkeys(record.fields))
    return TsvBlock(
        ids=column_of([r.id.encode("utf-8") for r, _, _ in records]),
        texts=column_of([r.text.encode("utf-8") for r, _, _ in records]),
        fields={
            name: column_of([r.fields.get(name, "").encode("utf-8") for r, _, _ in records])
            for name in names
        },
        lines=np.fromiter((line for _, line, _ in records), np.int64, len(records)),
        end=records[-1][2],
    )
