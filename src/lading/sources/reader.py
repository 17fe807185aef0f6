"""Readers of the world's document formats, streamed in constant memory.

Formats: TSV (``id<TAB>text[<TAB>more…]``, MS MARCO's ``collection.tsv``), JSONL, TREC SGML
(``<DOC><DOCNO>…</DOCNO>…</DOC>``), a BEIR folder (``corpus.jsonl``), ``irds:<dataset-id>``, and
parquet and Arrow files (read by :mod:`lading.sources.tables`), and records from any iterator
(:class:`RecordStream`).
``.gz``, ``.bz2`` and ``.zst`` files are decompressed on the fly.

Each file format is two functions: a *chunker* that cuts the byte stream into raw records, each
with the line it starts on and its byte span, and a *parser* that turns one raw record into a
:class:`Record`. The split lets :class:`~lading.stores.offsets.OffsetStore` read a span back with
``os.pread`` and parse it with the very same parser that the build used. The chunkers and
decompression live in :mod:`lading.sources.chunks`, the parsers in
:mod:`lading.sources.parsers`, parquet and Arrow in :mod:`lading.sources.tables`; this module
puts them together (:mod:`lading.sources` exports the public names).

Deliberate choices, so nothing happens by accident:
- A UTF-8 byte-order mark at the start of a file is dropped; ``\\r\\n`` line ends are read as
  ``\\n``; blank lines between records are not records.
- Invalid UTF-8, a missing separator, an empty id, an id with surrounding whitespace or a NUL
  byte, a JSON ``\\ud800`` escape (half a UTF-16 pair: no UTF-8 holds it) are errors naming
  the file and line; with ``on_error="skip"`` the record is skipped and counted
  (:attr:`SourceReader.skipped`), never dropped silently.
- A corrupt or truncated compressed stream is always an error: what follows cannot be trusted.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any, Literal, Protocol

from lading.errors import LadingError, SourceError
from lading.sources.chunks import (
    COMPRESSED_SUFFIXES,
    Chunk,
    chunk_json_lines,
    chunk_lines,
    chunk_trec,
    reading,
)
from lading.sources.fingerprint import fingerprint
from lading.sources.parsers import (
    ParseOptions,
    Parser,
    Record,
    RecordError,
    make_jsonl_parser,
    make_trec_parser,
    make_tsv_parser,
    prefixed,
    with_prefix,
)
from lading.sources.span import FilePart, Whole
from lading.sources.tables import iter_table
from lading.sources.tsv_blocks import TsvBlock, records_block, scanned_blocks

__all__ = [
    "FILE_FORMATS",
    "FORMATS",
    "ON_ERROR_MODES",
    "FileFormat",
    "OnError",
    "SourceReader",
    "beir_corpus_file",
    "check_source_shape",
    "detect_format",
    "import_ir_datasets",
    "irds_record",
    "read_records",
]

OnError = Literal["raise", "skip"]
ON_ERROR_MODES: tuple[str, ...] = ("raise", "skip")


class Chunker(Protocol):
    """Cuts a stream into raw records; ``strip_bom``: the stream starts at byte 0 of its file,
    where a UTF-8 BOM is dropped (nowhere else)."""

    def __call__(self, stream: IO[bytes], *, strip_bom: bool = True) -> Iterator[Chunk]: ...


@dataclass(frozen=True)
class FileFormat:
    """A file format: how to cut it into records and how to parse one."""

    chunker: Chunker
    make_parser: Callable[[ParseOptions], Parser]


FILE_FORMATS: dict[str, FileFormat] = {
    "tsv": FileFormat(chunk_lines, make_tsv_parser),
    "jsonl": FileFormat(chunk_json_lines, make_jsonl_parser),
    "trec": FileFormat(chunk_trec, make_trec_parser),
}
FORMATS: tuple[str, ...] = ("arrow", "beir", "irds", "jsonl", "parquet", "trec", "tsv")
# the parsers' advice to skip ("…; pass on_error='skip' to …", "…, or pass on_error='skip' …"),
# left out of the reasons recorded while skipping
_SKIP_ADVICE = re.compile(r"[;,] (?:or )?pass on_error='skip'[^;]*")
_RECORDS, _NUMBERED, _SPANS = range(3)  # what SourceReader._parsed yields a record as
BLOCK_RECORDS = 1024  # records of a non-TSV source gathered into one block by iter_bulk

_SUFFIX_FORMATS = {
    ".tsv": "tsv",
    ".txt": "tsv",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".trec": "trec",
    ".sgml": "trec",
    ".trectext": "trec",
    ".parquet": "parquet",
    ".arrow": "arrow",
    ".feather": "arrow",
}


def detect_format(source: str | os.PathLike[str]) -> str:
    """Name of the format of ``source``, from its prefix, its folder layout or its file suffix."""
    name = os.fspath(source)
    if name.startswith("irds:"):
        return "irds"
    if os.path.isdir(name):
        if beir_corpus_file(name) is not None:
            return "beir"
        raise ValueError(f"{name} is a folder without corpus.jsonl[.gz]; pass a file, or format=")
    stem = name
    for suffix in COMPRESSED_SUFFIXES:
        if stem.endswith(suffix):
            stem = stem[: -len(suffix)]
    ext = os.path.splitext(stem)[1].lower()
    if ext in _SUFFIX_FORMATS:
        return _SUFFIX_FORMATS[ext]
    raise ValueError(
        f"cannot tell the format of {name} from its name; pass format= one of {sorted(FORMATS)}"
    )


def check_source_shape(name: str, format: str) -> None:
    """Refuse a source whose shape cannot be of ``format``, naming the source and the fix,
    before anything is read (else the reader fails far off: a folder read as a stream)."""
    is_dir = os.path.isdir(name)
    if format == "irds":
        if not name.startswith("irds:"):
            raise ValueError(
                f"{name}: format 'irds' reads an ir_datasets id, written irds:<dataset-id> "
                "(e.g. irds:msmarco-passage); for a file, pass its own format or none"
            )
        known = _irds_ids()
        dataset_id = name[len("irds:") :]
        if known is not None and dataset_id not in known:
            close = sorted(k for k in known if k.split("/")[0] == dataset_id.split("/")[0])
            hint = f"; {dataset_id.split('/')[0]} has: {', '.join(close[:8])}" if close else ""
            raise ValueError(f"{name}: ir_datasets has no dataset {dataset_id!r}{hint}")
    elif format == "beir":
        if not is_dir or beir_corpus_file(name) is None:
            raise ValueError(
                f"{name}: format 'beir' reads a BEIR folder holding corpus.jsonl[.gz]; for a "
                "file, pass its own format (tsv, jsonl, trec) or none"
            )
    elif format in ("tsv", "jsonl", "trec") and is_dir:
        raise ValueError(
            f"{name} is a folder: format {format!r} reads one file; pass the file inside it "
            "(a BEIR folder needs format 'beir')"
        )


def _irds_ids() -> set[str] | None:
    """The dataset ids ir_datasets knows, or None when it is not installed (then the load
    itself reports it)."""
    try:
        import ir_datasets
    except ImportError:
        return None
    registered = getattr(ir_datasets.registry, "_registered", None)  # no public listing
    return set(registered) if isinstance(registered, dict) else None


def beir_corpus_file(folder: str | os.PathLike[str]) -> Path | None:
    """The corpus file of a BEIR folder, or None when there is none."""
    for name in ("corpus.jsonl", "corpus.jsonl.gz"):
        candidate = Path(folder) / name
        if candidate.is_file():
            return candidate
    return None


# --------------------------------------------------------------------------- reader


@dataclass
class SourceReader:
    """Streams the records of one source, applying the caller's error policy.

    Args:
        source: a file path, a BEIR folder, or ``"irds:<dataset-id>"``.
        format: one of ``FORMATS``; detected from the name when None.
        on_error: ``"raise"`` stops at the first bad record with a :class:`SourceError`;
            ``"skip"`` skips it and counts it in :attr:`skipped`.
        options: where ids, text and fields are found.
        span: read the lines starting in this byte range of an uncompressed TSV or JSONL
            file (a shard's part: :mod:`lading.sources.span`), numbered as in the whole file.

    Attributes:
        skipped: records skipped so far under ``on_error="skip"``.
        skip_reasons: the first few skip messages (file, line, reason), for reports.
    """

    source: str | os.PathLike[str]
    format: str | None = None
    on_error: OnError = "raise"
    options: ParseOptions = field(default_factory=ParseOptions)
    skipped: int = 0
    skip_reasons: list[str] = field(default_factory=list)
    span: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        if self.on_error not in ON_ERROR_MODES:
            raise ValueError(
                f"unknown on_error {self.on_error!r}; choose from {sorted(ON_ERROR_MODES)}"
            )
        name = os.fspath(self.source)
        self.format = self.format or detect_format(name)
        if self.format not in FORMATS:
            raise ValueError(f"unknown format {self.format!r}; choose from {sorted(FORMATS)}")
        if self.format != "irds" and not os.path.exists(name):
            raise FileNotFoundError(f"source {name} does not exist")
        check_source_shape(name, self.format)
        self._part = None if self.span is None else FilePart(name, self.format, *self.span)

    def absolute_line(self, line: int) -> int:
        """The file's own number of ``line`` as counted in the part this reader reads."""
        part = getattr(self, "_part", None)  # a RecordStream sets no fields of its own
        return line if part is None else part.absolute_line(line)

    @property
    def path(self) -> Path | None:
        """The file actually read (the corpus file of a BEIR folder); None for irds."""
        if self.format == "irds":
            return None
        if self.format == "beir":
            return beir_corpus_file(self.source)
        return Path(self.source)

    @property
    def file_format(self) -> str:
        """Format of the file actually read (``jsonl`` for a BEIR folder)."""
        return "jsonl" if self.format == "beir" else str(self.format)

    def parser(self) -> Parser:
        """The parser of this source's records (not available for irds, parquet and Arrow)."""
        if self.format not in FILE_FORMATS and self.format != "beir":
            raise ValueError(f"{self.source} ({self.format}) has no per-record parser")
        options = self.options
        if self.format == "beir" and options.id_field is None:
            options = replace(options, id_field="_id")
        return prefixed(FILE_FORMATS[self.file_format].make_parser(options), options.prefix_fields)

    def fingerprint(self) -> dict[str, Any]:
        """Identity of the source for staleness checks."""
        if self.path is None:
            return {"irds": os.fspath(self.source)[len("irds:") :]}
        return fingerprint(self.path)

    def __iter__(self) -> Iterator[Record]:
        if self.format == "irds":
            records = _iter_irds(os.fspath(self.source)[len("irds:") :])
            fields = self.options.prefix_fields
            return (with_prefix(r, fields) for r in records) if fields else records
        if self.format in ("arrow", "parquet"):
            return (record for record, _, _ in self.iter_numbered())
        return self._parsed(_RECORDS)

    def iter_numbered(self) -> Iterator[tuple[Record, int, int]]:
        """Records with the line each starts on and the byte where it ends (irds: the record's
        number and 0; parquet and Arrow: the row and 0)."""
        if self.format == "irds":
            return ((record, number, 0) for number, record in enumerate(self, start=1))
        if self.format in ("arrow", "parquet"):
            assert self.path is not None
            rows = iter_table(self.path, self.format, self.options, self._bad)
            fields = self.options.prefix_fields
            return ((with_prefix(record, fields), row, 0) for record, row in rows)
        return self._parsed(_NUMBERED)

    def iter_spans(self) -> Iterator[tuple[Record, Chunk]]:
        """Records with the raw chunk each came from (byte span in the decompressed file)."""
        return self._parsed(_SPANS)

    def _parsed(self, shape: int) -> Iterator[Any]:
        """The records of a text file in ``shape``: one loop serves :meth:`__iter__`,
        :meth:`iter_numbered` and :meth:`iter_spans`, no generator stacked on another."""
        path = self.path
        if path is None or self.format not in ("beir", *FILE_FORMATS):
            raise ValueError(
                f"{self.format} sources have no byte spans (an OffsetStore needs a text file)"
            )
        parse = self.parser()
        chunker = FILE_FORMATS[self.file_format].chunker
        part = self._part or Whole(path)
        with reading(path) as where, part.open() as stream:
            for chunk in chunker(stream, strip_bom=part.at_file_start):
                where[0] = chunk.line
                try:
                    record = parse(chunk.data)
                except RecordError as e:
                    self._bad(path, chunk.line, str(e))
                    continue
                if shape == _SPANS:
                    yield record, chunk
                else:  # _NUMBERED is 1, _RECORDS 0
                    yield (record, chunk.line, chunk.end) if shape else record

    @property
    def bulk(self) -> bool:
        """Whether :meth:`iter_bulk` can take whole blocks: TSV, every column named once, no
        field put before the text (a record at a time then)."""
        columns = self.options.columns
        unique = len(set(columns)) == len(columns)
        return self.format == "tsv" and unique and not self.options.prefix_fields

    def iter_bulk(self) -> Iterator[TsvBlock]:
        """Every record, in blocks of columns (one shape for every format): clean blocks of a
        TSV whole, other records :data:`BLOCK_RECORDS` at a time.

        Blocks with any line that needs judging go through the per-line parser, so records,
        errors and skip counts are the same as from :meth:`iter_numbered`.
        """
        pending: list[tuple[Record, int, int]] = []
        for item in self._bulk_items():
            if isinstance(item, TsvBlock):
                if pending:
                    yield records_block(pending)
                    pending = []
                yield item
                continue
            pending.append(item)
            if len(pending) >= BLOCK_RECORDS:
                yield records_block(pending)
                pending = []
        if pending:
            yield records_block(pending)

    def _bulk_items(self) -> Iterator[TsvBlock | tuple[Record, int, int]]:
        """Clean TSV blocks whole, and the records of every other block or format one by one."""
        path = self.path
        if not self.bulk or path is None:
            yield from self.iter_numbered()
            return
        parse = self.parser()
        part = self._part or Whole(path)
        with reading(path) as where, part.open() as stream:
            blocks = scanned_blocks(stream, self.options.columns, strip_bom=part.at_file_start)
            for raw, block in blocks:
                where[0] = raw.line
                if block is not None:
                    yield block
                    continue
                lines = chunk_lines(io.BytesIO(raw.data), raw.line, raw.start, strip_bom=False)
                for chunk in lines:
                    try:
                        record = parse(chunk.data)
                    except RecordError as e:
                        self._bad(path, chunk.line, str(e))
                        continue
                    yield record, chunk.line, chunk.end

    def _bad(self, path: Path, line: int, reason: str) -> None:
        line = self.absolute_line(line)
        if self.on_error == "raise":
            raise SourceError(path, line, reason)
        self.skipped += 1
        if len(self.skip_reasons) < 10:  # skipping already: no advice to pass on_error='skip'
            self.skip_reasons.append(str(SourceError(path, line, _SKIP_ADVICE.sub("", reason))))


def _iter_irds(dataset_id: str) -> Iterator[Record]:
    dataset = import_ir_datasets().load(dataset_id)
    if not dataset.has_docs():
        raise ValueError(f"ir_datasets dataset {dataset_id!r} has no documents")
    with irds_download(dataset_id, "documents"):
        docs = iter(dataset.docs_iter())
        first = next(docs, None)  # (ir_datasets downloads on the first read)
    if first is not None:
        yield irds_record(first)
    for doc in docs:
        yield irds_record(doc)


@contextlib.contextmanager
def irds_download(dataset_id: str, what: str) -> Iterator[None]:
    """Turn ir_datasets' failed download of ``dataset_id``'s ``what`` (``RuntimeError('All
    download sources failed', [...])``, a traceback of 40 lines with no network) into one
    line naming the dataset and the fix."""
    try:
        yield
    except RuntimeError as e:
        if not e.args or e.args[0] != "All download sources failed":
            raise
        sources = e.args[1] if len(e.args) > 1 and isinstance(e.args[1], list) else []
        tried = ", ".join(str(getattr(src, "url", src)) for src, _ in sources[:2]) or "?"
        raise LadingError(
            f"irds:{dataset_id}: ir_datasets could not download its {what} (tried {tried}): "
            "no network here? Read it once where there is one, then copy its folder "
            "(~/.ir_datasets, or $IR_DATASETS_HOME) to this machine"
        ) from None


def irds_record(doc: Any) -> Record:
    """A lading Record from an ir_datasets document namedtuple."""
    text = getattr(doc, "text", None)
    if not isinstance(text, str):
        text = doc.default_text()
    title = getattr(doc, "title", None)
    fields = {"title": title} if isinstance(title, str) else {}
    return Record(str(doc.doc_id), text, fields)


def import_ir_datasets() -> Any:
    """Import ir_datasets or explain how to install it."""
    try:
        import ir_datasets
    except ImportError:
        raise ImportError(
            "ir_datasets is not installed. To install:\n  pip install 'lading[irds]'"
        ) from None
    return ir_datasets


def read_records(
    source: str | os.PathLike[str],
    format: str | None = None,
    on_error: OnError = "raise",
    *,
    parse: ParseOptions | None = None,
) -> SourceReader:
    """A reader over the records of ``source``, which ``parse`` says where to find ids, text
    and fields in (default: :class:`ParseOptions`'s); iterate it, then read ``.skipped``.
    Options the source's format never reads are refused (:meth:`ParseOptions.refuse_ignored`)."""
    reader = SourceReader(source, format, on_error, parse or ParseOptions())
    reader.options.refuse_ignored(reader.format, reader.source)
    return reader
