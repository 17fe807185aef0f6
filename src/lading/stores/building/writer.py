"""Writes one shard of a packed store into an empty directory in one streaming pass.

Memory while the source streams does not grow with the row count: row offsets, integer ids
and line numbers (for error messages) go to disk as they come (:class:`RaggedWriter`,
:class:`~lading.disk.SpillArray`), and one block of text or one tokenizer batch is held at a
time. After the pass, duplicates are found from the ids alone in numpy: for N rows about 40
bytes per row for integer ids (8.8M passages: ~350 MB with the index the merge builds) or
~100 bytes per row for string ids (3.2M documents: ~320 MB), never a Python object per id.
The shard's description (``shard.json``) is written last; :mod:`lading.stores.building.merge` turns
shards into a snapshot.
"""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from lading.disk import (
    OFFSET_DTYPE,
    MappedFile,
    RaggedWriter,
    SpillArray,
    column_files,
    write_file,
)
from lading.errors import EmptyTextWarning, SourceError
from lading.sources import SourceReader
from lading.sources.tsv_blocks import TsvBlock
from lading.stores.building.shardset import SHARD_FILE
from lading.stores.hashids import keys_file
from lading.stores.index import IntIdCollector, bytes_keys
from lading.stores.layout import field_column
from lading.stores.tokens import (
    cuts_at_spaces,
    describe_tokenizer,
    encode_first,
    flat_ids,
    token_dtype,
)

Duplicates = Literal["error", "first", "last"]
DUPLICATE_MODES: tuple[str, ...] = ("error", "first", "last")
TOKENIZE_BATCH = 1024  # documents per encode_batch call: enough to keep its thread pool busy


@dataclass
class BuildStats:
    """What a build did, for the progress bar and the report in ``meta.json``."""

    rows: int = 0
    bytes_read: int = 0
    duplicates_dropped: int = 0
    # documents of an empty text whose field is not, by field (EmptyTextWarning)
    empty_texts: dict[str, int] = field(default_factory=dict)


class _Columns:
    """The ragged columns of one build, written row by row."""

    def __init__(self, directory: Path, tok_dtype: np.dtype[Any] | None) -> None:
        self.directory = directory
        self.text = RaggedWriter(directory, "text")
        self.ids = RaggedWriter(directory, "ids")
        self.fields: dict[str, RaggedWriter] = {}
        self.tokens = RaggedWriter(directory, "tokens", tok_dtype.itemsize) if tok_dtype else None
        self.tokens_dtype = tok_dtype

    def add_block(self, block: TsvBlock) -> None:
        row = len(self.text)
        self.text.append_many(*block.texts)
        self.ids.append_many(*block.ids)
        for name, column in block.fields.items():
            self._field(name, row).append_many(*column)

    def _field(self, name: str, row: int) -> RaggedWriter:
        """The writer of field ``name``, with empty rows before ``row`` if it is new here."""
        column = self.fields.get(name)
        if column is None:
            column = self.fields[name] = RaggedWriter(self.directory, field_column(name))
        column.pad_to(row)
        return column

    def all(self) -> list[RaggedWriter]:
        rest = [self.tokens] if self.tokens is not None else []
        return [self.text, self.ids, *self.fields.values(), *rest]

    def abort(self) -> None:
        """Close every column's files unfinished (a failed build)."""
        for column in self.all():
            column.abort()


@dataclass
class WrittenShard:
    """A shard written by :func:`write_shard`: its description and its index keys (row order:
    int64 ids, or fixed-width bytes), kept in memory for a merge in the same process."""

    record: dict[str, Any]
    keys: np.ndarray


def write_shard(
    reader: Any,
    directory: Path,
    *,
    tokenizer: Any = None,
    max_length: int | None = None,
    duplicates: Duplicates = "error",
    keep_tokenizer: bool = True,
    allow_empty: bool = False,
    progress: Any = None,
    about: dict[str, Any] | None = None,
    id_keys: bool = False,
) -> WrittenShard:
    """Stream ``reader`` into the empty ``directory`` as one shard; ``shard.json`` last.

    Args:
        reader: the source (or the part of it that this shard holds): a
            :class:`~lading.sources.SourceReader`, or anything with its ``iter_bulk``,
            ``skipped``, ``skip_reasons`` and ``source`` (several files' pieces).
        directory: an empty directory (the caller renames it into place after).
        tokenizer: a loaded ``tokenizers.Tokenizer``
            (see :func:`lading.stores.tokens.load_tokenizer`).
        max_length: keep at most this many tokens per document.
        duplicates: ``"error"`` stops at a repeated id naming both lines; ``"first"``/``"last"``
            keep one occurrence and count the others in the report.
        keep_tokenizer: write ``tokenizer.json`` here (one shard of a store keeps it).
        allow_empty: a shard of several may hold no record (its lines all started in a
            neighbour's range); a store of one shard may not.
        progress: a tqdm-like object with ``update(n_bytes)``, or None.
        about: more to record in ``shard.json`` (what the shard read, the build's options).
        id_keys: under string ids, also write the ids as fixed-width keys (``ids.keys``,
            :func:`lading.stores.hashids.keys_file`): a shard of several does, so that the
            merge's index need not hold them (:mod:`lading.stores.hashids`).
    """
    if duplicates not in DUPLICATE_MODES:
        raise ValueError(
            f"unknown duplicates {duplicates!r}; choose from {sorted(DUPLICATE_MODES)}"
        )
    started = time.perf_counter()
    tok_info = describe_tokenizer(tokenizer) if tokenizer is not None else None
    tok_dtype = token_dtype(tok_info["vocab_size"]) if tok_info else None
    columns = _Columns(directory, tok_dtype)
    # per-row integers wait on disk, not in RAM: the build's memory must not grow with the rows
    spill = SpillArray(directory / "ids.int.scratch")
    int_ids = IntIdCollector(spill)
    lines = SpillArray(directory / "lines.scratch")
    stats = BuildStats()
    encoder = None if tokenizer is None else _Encoder(tokenizer, columns, max_length)
    try:
        _stream_rows(reader, columns, int_ids, lines, encoder, stats, progress)
        if encoder is not None:
            encoder.finish()
        is_int = int_ids.values is not None  # every id an integer: the dense or sorted index
        files, keys, rows = _finish_rows(
            directory, reader, columns, int_ids, lines, duplicates, stats, allow_empty
        )
    except BaseException:  # a bad line, a duplicate id: every file closed, every thread ended
        columns.abort()  # as the error is raised, not when the garbage collector gets to them
        raise
    finally:
        if encoder is not None:
            encoder.close()
        spill.discard()
        lines.discard()
    if id_keys and not is_int:  # written here, in parallel, rather than by the merge
        name = keys_file(column_files("ids")[0])
        files[name] = write_file(directory / name, np.ascontiguousarray(keys))
    if tokenizer is not None and keep_tokenizer:  # queries must be encoded by the same tokenizer
        files["tokenizer.json"] = write_file(
            directory / "tokenizer.json", tokenizer.to_str().encode("utf-8")
        )
    dtypes = {c.column: "|u1" for c in columns.all()}
    if columns.tokens is not None and tok_dtype is not None:
        dtypes["tokens"] = tok_dtype.str
    record = {
        "rows": rows,
        "fields": sorted(columns.fields),
        "int_ids": is_int,
        "dtypes": dtypes,
        "columns": {c.column: _files_of(c.column) for c in columns.all()},
        "tokens": (
            {**tok_info, "dtype": tok_dtype.str, "max_length": max_length, "special_tokens": False}
            if tok_info and tok_dtype is not None
            else None
        ),
        "tokenizer": "tokenizer.json" if "tokenizer.json" in files else None,
        "skipped": reader.skipped,
        "skip_examples": reader.skip_reasons,
        "duplicates_dropped": stats.duplicates_dropped,
        **({"empty_texts": stats.empty_texts} if stats.empty_texts else {}),
        "seconds": round(time.perf_counter() - started, 3),
        "files": files,
        **(about or {}),
    }
    write_file(directory / SHARD_FILE, json.dumps(record, indent=2, sort_keys=True).encode())
    for name, count in stats.empty_texts.items():
        warnings.warn(
            f"{reader.source}: {count:,} of {rows:,} documents have an empty text and a "
            f"{name}; a model reads a store's text only, so it sees nothing of them. To read "
            f"the {name} first: parse=ParseOptions(prefix_fields=({name!r},)) "
            f"(--prefix-fields {name})",
            EmptyTextWarning,
            stacklevel=2,
        )
    return WrittenShard(record, keys)


def _files_of(column: str) -> dict[str, str]:
    data, offsets = column_files(column)
    return {"data": data, "offsets": offsets}


def _stream_rows(
    reader: SourceReader,
    columns: _Columns,
    int_ids: IntIdCollector,
    lines: SpillArray,
    encoder: _Encoder | None,
    stats: BuildStats,
    progress: Any,
) -> None:
    """Every record of ``reader`` into the columns, a block at a time; its integer id and line
    number to the spill files, its text to the encoder."""
    for block in reader.iter_bulk():
        columns.add_block(block)
        if block.fields:
            _count_empty_texts(block, stats)
        int_ids.add_many(block.ids)
        lines.extend(block.lines)
        if encoder is not None:
            encoder.add(text.decode("utf-8") for text in block.texts.values())
        end = block.end
        if progress is not None and end > stats.bytes_read:
            progress.update(end - stats.bytes_read)
            stats.bytes_read = end


def _count_empty_texts(block: TsvBlock, stats: BuildStats) -> None:
    """Count, by field, the rows of ``block`` whose text is empty and whose field is not."""
    empty = block.texts.lengths == 0
    if not empty.any():
        return
    for name, column in block.fields.items():
        counted = int(np.count_nonzero(empty & (column.lengths > 0)))
        if counted:
            stats.empty_texts[name] = stats.empty_texts.get(name, 0) + counted


class _Encoder:
    """Token ids of the texts as they stream, :data:`TOKENIZE_BATCH` at a time.

    ``encode_batch`` runs outside the GIL on its own threads: batch k+1 is encoded while the
    build turns batch k's encodings into arrays and goes on reading (1.66x -> see RESULTS).
    Where the tokenizers library has it (0.20 and later), ``encode_batch_fast``: the same ids
    without each token's character offsets, which a store does not keep (measured on MS MARCO
    passages, WordPiece 30,522: ~20% less tokenizer CPU; benchmarks/RESULTS.md "Tokenized
    build: lading and HF datasets").
    """

    def __init__(self, tokenizer: Any, columns: _Columns, max_length: int | None) -> None:
        assert columns.tokens is not None and columns.tokens_dtype is not None
        self.tokenizer, self.max_length = tokenizer, max_length
        self.encode = getattr(tokenizer, "encode_batch_fast", None) or tokenizer.encode_batch
        self.prefixes = max_length is not None and cuts_at_spaces(tokenizer)
        self.out, self.dtype = columns.tokens, columns.tokens_dtype
        self.pending: list[str] = []
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lading-tokenize")
        self.encoding: list[Future[Any]] = []

    def add(self, texts: Iterable[str]) -> None:
        """Queue ``texts``; every :data:`TOKENIZE_BATCH` of them go to the encoder (a TSV block
        of many thousand texts is not held as strings all at once)."""
        for text in texts:
            self.pending.append(text)
            if len(self.pending) >= TOKENIZE_BATCH:
                self._flush()

    def _flush(self) -> None:
        batch, self.pending = self.pending, []
        self.encoding.append(self.pool.submit(self._encode, batch))
        if len(self.encoding) > 1:
            self._write(self.encoding.pop(0).result())

    def _encode(self, texts: list[str]) -> list[Any]:
        """The encodings of ``texts``, each holding at least its first ``max_length`` tokens
        (a long text's from a prefix where the tokenizer allows: :func:`encode_first`)."""
        if self.max_length is None:
            return list(self.encode(texts, add_special_tokens=False))
        return encode_first(self.encode, texts, self.max_length, self.prefixes)

    def _write(self, encodings: list[Any]) -> None:
        """The encodings' ids, each cut to ``max_length``, as rows of the tokens column: laid
        out back to back in one call (:func:`~lading.stores.tokens.flat_ids`), not an array
        and a bytes copy a row."""
        cut = self.max_length
        ids = [e.ids if cut is None else e.ids[:cut] for e in encodings]
        data, lengths = flat_ids(ids, self.dtype, None)
        self.out.append_many(data, lengths * self.dtype.itemsize)

    def close(self) -> None:
        """End the encoding thread (batches not started are dropped: after :meth:`finish`,
        there are none)."""
        self.pool.shutdown(wait=True, cancel_futures=True)

    def finish(self) -> None:
        """Encode and write what is pending; every row has its tokens after this."""
        if self.pending:
            self._flush()
        while self.encoding:
            self._write(self.encoding.pop(0).result())
        self.pool.shutdown()


def _finish_rows(
    directory: Path,
    reader: SourceReader,
    columns: _Columns,
    int_ids: IntIdCollector,
    lines: SpillArray,
    duplicates: Duplicates,
    stats: BuildStats,
    allow_empty: bool = False,
) -> tuple[dict[str, dict[str, int]], np.ndarray, int]:
    """Close the columns and drop duplicate ids as ``duplicates`` says: (files written, index
    keys in row order, rows kept)."""
    rows = len(columns.text)
    if rows == 0 and not allow_empty:
        raise SourceError(reader.source, None, empty_source_reason(reader))
    for column in columns.fields.values():
        column.pad_to(rows)
    files: dict[str, dict[str, int]] = {}
    for column in columns.all():
        files.update(column.finish())
    keys = id_keys(directory, int_ids)
    if isinstance(int_ids.values, SpillArray):
        int_ids.values.discard()
    keep = unique_rows(keys, lines.view(), duplicates, reader)
    lines.discard()
    if keep is not None:
        stats.duplicates_dropped = rows - int(keep.sum())
        files = compact(directory, files, keep, columns.all())
        keys = keys[keep]
        rows = len(keys)
    return files, keys, rows


def id_keys(directory: Path, int_ids: IntIdCollector) -> np.ndarray:
    """Index keys in row order: the int64 ids, or fixed-width bytes of the ``ids`` column."""
    if int_ids.values is not None:
        return int_ids.keys()
    bin_name, off_name = column_files("ids")
    data = MappedFile(directory / bin_name).buffer
    offsets = MappedFile(directory / off_name).array(OFFSET_DTYPE)
    one = directory.name.endswith("-of-00001")  # a one-process build: rows are the store's
    return bytes_keys(data, offsets, where="" if one else f" of {directory.name}")


def unique_rows(
    keys: np.ndarray,
    lines: Sequence[int] | npt.NDArray[np.int64],
    duplicates: Duplicates,
    reader: SourceReader | None,
) -> npt.NDArray[np.bool_] | None:
    """Mask of rows to keep, or None when every id is unique. ``reader`` and ``lines`` name
    the lines of a duplicate for ``"error"``; ``"first"``/``"last"`` need neither (a merge
    passes None)."""
    if len(keys) < 2:
        return None
    if keys.dtype == np.int64 and _all_distinct_small_ints(keys):
        return None  # the common case (MS MARCO pids) without sorting 8 bytes per row twice
    order = np.argsort(keys, kind="stable")  # equal ids stay in row order
    sorted_keys = keys[order]
    same = sorted_keys[1:] == sorted_keys[:-1]
    if not same.any():
        return None
    if duplicates == "error":
        assert reader is not None, "duplicates='error' names lines: pass the reader"
        i = int(np.argmax(same))
        first, again = int(order[i]), int(order[i + 1])
        key = sorted_keys[i]
        shown = key.decode("utf-8") if isinstance(key, bytes) else str(key)
        where, line = _locate(reader, again, int(lines[again]))
        was, first_line = _locate(reader, first, int(lines[first]))
        raise SourceError(
            where,
            line,
            f"duplicate id {shown!r} (first on line {first_line}"
            + ("" if was == where else f" of {was}")
            + "); pass duplicates='first' or 'last' to keep one of them",
        )
    drop = order[1:][same] if duplicates == "first" else order[:-1][same]
    keep = np.ones(len(keys), dtype=bool)
    keep[drop] = False
    return keep


def _locate(reader: Any, row: int, line: int) -> tuple[str, int]:
    """(file, line) of a record: the reader knows where a part of a file or several files put
    it; a plain reader reads one file."""
    locate = getattr(reader, "locate", None)
    if locate is not None:
        found: tuple[str, int] = locate(row, line)
        return found
    absolute = getattr(reader, "absolute_line", None)
    return str(reader.path or reader.source), absolute(line) if absolute else line


def _all_distinct_small_ints(keys: npt.NDArray[np.int64]) -> bool:
    """True when ``keys`` are distinct integers in ``[0, 4 * len + 65536)``, one byte per value.

    One byte per possible value instead of an argsort's two 8-byte arrays per row; False when
    the values are out of that range or repeat (then the caller sorts to find which).
    """
    low, high = int(keys.min()), int(keys.max())
    if low < 0 or high >= 4 * len(keys) + 65536:
        return False
    seen = np.zeros(high + 1, dtype=bool)
    seen[keys] = True
    return int(np.count_nonzero(seen)) == len(keys)


def compact(
    directory: Path,
    files: dict[str, dict[str, int]],
    keep: npt.NDArray[np.bool_],
    writers: list[RaggedWriter],
) -> dict[str, dict[str, int]]:
    """Rewrite every column with only the kept rows (runs only when duplicates were dropped)."""
    rows = np.flatnonzero(keep)
    for column in writers:
        bin_name, off_name = column_files(column.column)
        src_bin, src_off = directory / bin_name, directory / off_name
        data = MappedFile(src_bin).array(np.uint8)
        offsets = MappedFile(src_off).array(OFFSET_DTYPE)
        tmp_name = f"{column.column}.compact"
        out = RaggedWriter(directory, tmp_name, column.itemsize)
        size = column.itemsize
        for row in rows.tolist():
            out.append(data[int(offsets[row]) * size : int(offsets[row + 1]) * size].tobytes())
        described = out.finish()
        del data, offsets
        for old, new in zip((bin_name, off_name), column_files(tmp_name)):
            (directory / new).replace(directory / old)
            files[old] = described[new]
    return files


def empty_source_reason(reader: SourceReader) -> str:
    """Why a source gave no document, and what to do: a store of 0 documents is refused,
    since it is almost always a wrong file, format or column layout."""
    if reader.skipped:
        first = reader.skip_reasons[0] if reader.skip_reasons else ""
        return (
            f"every record was skipped ({reader.skipped:,}; the first: {first}); nothing "
            "would be left to store. Check the format and columns"
        )
    return (
        f"no documents found in it as format {reader.format!r}; a store of 0 documents is "
        "refused. Check the file (is it empty?), its format and its columns"
    )
