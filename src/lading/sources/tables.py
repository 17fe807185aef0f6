"""Documents from columnar files (parquet, Arrow IPC) and from any stream of records.

Parquet and Arrow files are read one record batch at a time with pyarrow (the ``parquet``
extra), only the id, text and kept columns, so a 20 GB file costs one batch of memory. The id
and text columns are named like JSON keys (:class:`~lading.sources.ParseOptions`; default: the
first of :data:`~lading.sources.JSON_ID_FIELDS` / :data:`~lading.sources.JSON_TEXT_FIELDS`
present).
Arrow files may be in the IPC *file* format (Feather v2) or the *stream* format (what HF
``datasets`` writes to its cache): both are read through a memory map. A file pyarrow cannot
open, or whose rows do not decode, is one :class:`~lading.errors.SourceError` naming it and the
fix (the other format's ``format=``, or export it again), whatever ``on_error`` says: it is not a
bad record but a file that is not what its name says.

:class:`RecordStream` turns any callable that yields :class:`~lading.sources.Record` s (an HF
dataset, a DataFrame, a generator) into a source :func:`lading.build_store` accepts; its
``identity`` stands in for a file fingerprint when deciding whether a built store is reusable.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from lading.errors import SourceError
from lading.sources.parsers import (
    JSON_ID_FIELDS,
    JSON_TEXT_FIELDS,
    ParseOptions,
    Record,
    RecordError,
    check_id,
    same_id,
)

TABLE_FORMATS: tuple[str, ...] = ("arrow", "parquet")
BATCH_ROWS = 4096  # rows per record batch read: a few MB of text, small next to a page cache


def import_pyarrow() -> Any:
    """Import pyarrow or explain how to install it."""
    try:
        import pyarrow
    except ImportError:
        raise ImportError(
            "reading parquet or Arrow files needs pyarrow. To install:\n"
            "  pip install 'lading[parquet]'"
        ) from None
    return pyarrow


def pick_column(
    names: Iterable[str], chosen: str | None, defaults: tuple[str, ...], what: str
) -> str:
    """The column named ``chosen``, else the first of ``defaults`` present; ValueError otherwise."""
    names = list(names)
    if chosen is not None:
        if chosen not in names:
            raise ValueError(f"no {what} column {chosen!r}; the columns are {names}")
        return chosen
    for name in defaults:
        if name in names:
            return name
    raise ValueError(
        f"no {what} column among {names}: name it (parse=ParseOptions(id_field=...,"
        f" text_field=...), or --id-field/--text-field); the defaults tried were {list(defaults)}"
    )


def make_record(doc_id: Any, text: Any, fields: Mapping[str, Any]) -> Record:
    """A Record from column values, by JSONL's rules: RecordError for a null id or text, an id
    that is neither a string nor an integer (a float column's ``1.0`` would be stored as the
    id "1.0", which no lookup of 1 finds), or a field that is neither a string nor null (a null
    field is absent from the record)."""
    if doc_id is None:
        raise RecordError("null id")
    if isinstance(doc_id, (bytes, bytearray)):
        doc_id = doc_id.decode("utf-8")
    if isinstance(doc_id, bool) or not isinstance(doc_id, (str, int)):
        hint = "; cast the id column to int64 or string" if isinstance(doc_id, float) else ""
        raise RecordError(f"id must be a string or an integer, found {doc_id!r:.40}{hint}")
    if not isinstance(text, str):
        raise RecordError(f"text is {type(text).__name__}, not a string")
    kept = {}
    for key, value in fields.items():
        if value is None:
            continue
        if not isinstance(value, str):
            raise RecordError(f"field {key!r} must be a string, found {value!r:.40}")
        kept[key] = value
    return Record(check_id(str(doc_id)), text, kept)


def does_not_decode(error: BaseException) -> bool:
    """Whether ``error`` (from pyarrow opening or reading a file) says its bytes do not decode:
    ``ArrowInvalid``, or an ``OSError`` such as "Couldn't deserialize thrift"; not a file
    missing or unreadable, nor memory, nor a codec pyarrow lacks (raised as they are)."""
    pa = import_pyarrow()
    lost = (FileNotFoundError, PermissionError, MemoryError, pa.ArrowNotImplementedError)
    return isinstance(error, (pa.ArrowInvalid, OSError)) and not isinstance(error, lost)


def pyarrow_words(error: BaseException) -> str:
    """The first line of pyarrow's message (at most 200 characters): what a one-line error
    quotes of it."""
    return (str(error).splitlines() or [type(error).__name__])[0][:200]


_MAGIC = {"parquet": b"PAR1", "arrow": b"ARROW1"}  # how each file format begins


def not_a_table(path: Path, fmt: str, error: BaseException) -> SourceError:
    """The error for a ``fmt`` file that pyarrow could not open: a file of the other table
    format (named for the wrong one: pass ``format=``), or one that is not ``fmt`` or is
    damaged (export it again)."""
    try:
        with open(path, "rb") as f:
            head = f.read(8)
    except OSError:
        head = b""
    for other, magic in _MAGIC.items():
        if other != fmt and head.startswith(magic):
            return SourceError(
                path,
                None,
                f"this is {_a(other)} file, not {_a(fmt)} one ({pyarrow_words(error)}); pass "
                f"format='{other}', or rename it *.{other}",
            )
    return SourceError(
        path,
        None,
        f"not {_a(fmt)} file, or a damaged one ({pyarrow_words(error)}); check what it is, "
        "and export it again from where it came from",
    )


def _a(fmt: str) -> str:
    return f"{'an' if fmt[0] in 'aeiou' else 'a'} {fmt}"


def _batches(path: Path, fmt: str, columns: list[str] | None) -> tuple[list[str], Iterator[Any]]:
    """Column names of the file and an iterator over its record batches (of ``columns``).

    Raises:
        SourceError: pyarrow cannot open the file (:func:`not_a_table`).
    """
    try:
        return _open(path, fmt, columns)
    except Exception as e:
        if not does_not_decode(e):
            raise
        raise not_a_table(path, fmt, e) from e


def _open(path: Path, fmt: str, columns: list[str] | None) -> tuple[list[str], Iterator[Any]]:
    pa = import_pyarrow()
    if fmt == "parquet":
        import pyarrow.parquet as pq

        parquet = pq.ParquetFile(path, page_checksum_verification=True)
        names = list(parquet.schema_arrow.names)
        if columns is None:
            return names, iter(())
        return names, parquet.iter_batches(batch_size=BATCH_ROWS, columns=columns)
    source = pa.memory_map(str(path), "r")
    try:
        reader: Any = pa.ipc.open_file(source)
        names = list(reader.schema.names)
        batches: Iterator[Any] = (reader.get_batch(i) for i in range(reader.num_record_batches))
    except pa.ArrowInvalid:  # not the file format: the stream format HF datasets writes
        source.seek(0)
        reader = pa.ipc.open_stream(source)
        names = list(reader.schema.names)
        batches = iter(reader)
    if columns is None:
        return names, iter(())
    return names, (batch.select(columns) for batch in batches)


def _decoded(path: Path, batches: Iterator[Any]) -> Iterator[list[list[Any]]]:
    """Each batch's columns as Python lists.

    Raises:
        SourceError: a batch's bytes do not decode (a damaged page, text that is not UTF-8),
            naming the file and the first row of that batch.
    """
    row = 0
    while True:
        try:
            batch = next(batches, None)
            if batch is None:
                return
            columns = [column.to_pylist() for column in batch.columns]
        except Exception as e:
            if not (does_not_decode(e) or isinstance(e, UnicodeDecodeError)):
                raise
            raise SourceError(
                path,
                None,
                f"rows from {row + 1:,} do not decode ({pyarrow_words(e)}); the file is "
                "damaged: export it again from where it came from",
            ) from e
        row += batch.num_rows
        yield columns


def table_columns(names: list[str], options: ParseOptions) -> tuple[str, str, list[str]]:
    """The id column, the text column and the kept field columns of a table of ``names``."""
    id_col = pick_column(names, options.id_field, JSON_ID_FIELDS, "id")
    text_col = pick_column(names, options.text_field, JSON_TEXT_FIELDS, "text")
    kept = [n for n in options.keep_fields if n in names and n not in (id_col, text_col)]
    return id_col, text_col, kept


def other_id_columns(names: Iterable[str], id_col: str) -> list[str]:
    """The default id columns after ``id_col`` that a table also has: each row's values there
    must say the same id (:func:`lading.sources.parsers.same_id`)."""
    after = JSON_ID_FIELDS[JSON_ID_FIELDS.index(id_col) + 1 :] if id_col in JSON_ID_FIELDS else ()
    present = set(names)
    return [name for name in after if name in present]


def iter_table(
    path: Path, fmt: str, options: ParseOptions, bad: Callable[[Path, int, str], None]
) -> Iterator[tuple[Record, int]]:
    """Records of a parquet/Arrow file with their 1-based row numbers; ``bad`` judges errors."""
    names, _ = _batches(path, fmt, None)
    id_col, text_col, kept = table_columns(names, options)
    others = [] if options.id_field or not options.need_id else other_id_columns(names, id_col)
    # each column once (parquet reads a name given twice once: an id column also kept as a
    # field), found by name
    wanted = list(dict.fromkeys([id_col, text_col, *kept, *others]))
    at = {name: i for i, name in enumerate(wanted)}
    _, batches = _batches(path, fmt, wanted)
    row = 0
    for columns in _decoded(path, batches):
        ids, texts = columns[at[id_col]], columns[at[text_col]]
        extra = {k: columns[at[k]] for k in kept}
        also = {o: columns[at[o]] for o in others}
        for j, (doc_id, text) in enumerate(zip(ids, texts)):
            row += 1
            try:
                if also:
                    same_id({id_col: doc_id} | {o: v[j] for o, v in also.items()}, id_col, others)
                record = make_record(doc_id, text, {k: v[j] for k, v in extra.items()})
            except RecordError as e:
                bad(path, row, f"row {row}: {e}")
                continue
            yield record, row
