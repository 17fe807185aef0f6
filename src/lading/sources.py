"""Readers of the world's document formats, streamed in constant memory.

Formats: TSV (``id<TAB>text[<TAB>more…]``, MS MARCO's ``collection.tsv``), JSONL, TREC SGML
(``<DOC><DOCNO>…</DOCNO>…</DOC>``), a BEIR folder (``corpus.jsonl``), ``irds:<dataset-id>``, and
parquet and Arrow files (read by :mod:`lading.table_sources`).
``.gz``, ``.bz2`` and ``.zst`` files are decompressed on the fly.

Each file format is two functions: a *chunker* that cuts the byte stream into raw records, each
with the line it starts on and its byte span, and a *parser* that turns one raw record into a
:class:`Record`. The split lets :class:`~lading.stores.offsets.OffsetStore` read a span back with
``os.pread`` and parse it with the very same parser that the build used.

Deliberate choices, so nothing happens by accident:
- A UTF-8 byte-order mark at the start of a file is dropped; ``\\r\\n`` line ends are read as
  ``\\n``; blank lines between records are not records.
- Invalid UTF-8, a missing separator, an empty id, an id with surrounding whitespace or a NUL
  byte are errors naming the file and line; with ``on_error="skip"`` the record is skipped and
  counted (:attr:`SourceReader.skipped`), never dropped silently.
- A corrupt or truncated compressed stream is always an error: what follows cannot be trusted.
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import hashlib
import io
import json
import os
import re
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal, NamedTuple

from lading.errors import SourceError
from lading.tsv_blocks import TsvBlock, read_blocks, scan_block

OnError = Literal["raise", "skip"]
ON_ERROR_MODES: tuple[str, ...] = ("raise", "skip")

JSON_ID_FIELDS: tuple[str, ...] = ("id", "doc_id", "docid", "_id", "pid")
JSON_TEXT_FIELDS: tuple[str, ...] = ("text", "contents", "body")
COMPRESSED_SUFFIXES: tuple[str, ...] = (".gz", ".bz2", ".zst")
_BOM = b"\xef\xbb\xbf"
_FINGERPRINT_BYTES = 1 << 16  # hash 64 KiB at each end: cheap even for a 100 GB corpus


class Record(NamedTuple):
    """One document: its id, its text and any extra named fields (``title``, extra columns)."""

    id: str
    text: str
    fields: Mapping[str, str]


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


class RecordError(ValueError):
    """A parser's complaint about one record; the reader adds file and line."""


def json_object(text: str) -> dict[str, Any]:
    """``text`` parsed as one JSON object, or a RecordError saying what it is instead."""
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise RecordError(f"invalid JSON ({e.msg} at column {e.colno})") from None
    if not isinstance(obj, dict):
        raise RecordError(f"expected a JSON object, found {type(obj).__name__}")
    return obj


Parser = Callable[[bytes], Record]


@dataclass(frozen=True)
class ParseOptions:
    """How to find id, text and fields in records.

    Attributes:
        id_field: JSON key of the id (default: the first of ``JSON_ID_FIELDS`` present).
        text_field: JSON key of the text (default: the first of ``JSON_TEXT_FIELDS`` present).
        columns: TSV column names; must contain ``"id"`` and ``"text"``. Columns past the named
            ones become fields ``col<N>`` (0-based position).
        keep_fields: JSON keys kept as fields besides the id and text (default: ``title``).
    """

    id_field: str | None = None
    text_field: str | None = None
    columns: tuple[str, ...] = ("id", "text")
    keep_fields: tuple[str, ...] = ("title",)

    def __post_init__(self) -> None:
        if "id" not in self.columns or "text" not in self.columns:
            raise ValueError(f"TSV columns {list(self.columns)} must name both 'id' and 'text'")


def check_id(doc_id: str) -> str:
    """Return ``doc_id`` if it is usable as a key, else raise :class:`RecordError` saying why."""
    if not doc_id:
        raise RecordError("empty id")
    if doc_id != doc_id.strip():
        raise RecordError(
            f"id {doc_id!r} has leading or trailing whitespace; strip it in the source"
        )
    if "\x00" in doc_id:
        raise RecordError(f"id {doc_id!r} contains a NUL character")
    return doc_id


def _decode(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        bad = e.object[e.start : e.end]
        raise RecordError(
            f"invalid UTF-8 at byte {e.start} of the record ({bad!r}); re-encode the file as "
            "UTF-8, or pass on_error='skip' to skip such records"
        ) from None


def _strip_line_end(raw: bytes) -> bytes:
    if raw.endswith(b"\n"):
        raw = raw[:-1]
        if raw.endswith(b"\r"):
            raw = raw[:-1]
    return raw


# --------------------------------------------------------------------------- parsers


def make_tsv_parser(options: ParseOptions) -> Parser:
    """Parser of one TSV line into a Record, columns named by ``options.columns``."""
    columns = options.columns
    id_pos = columns.index("id")
    text_pos = columns.index("text")
    need = max(id_pos, text_pos) + 1
    expected = "<" + ">\\t<".join(columns) + ">"
    simple = columns == ("id", "text")

    def parse_tsv(raw: bytes) -> Record:
        line = _decode(_strip_line_end(raw))
        if simple:
            doc_id, sep, rest = line.partition("\t")
            if not sep:
                raise RecordError(f'expected "{expected}", found no tab')
            if "\t" not in rest:
                return Record(check_id(doc_id), rest, {})
        parts = line.split("\t")
        if len(parts) < need:
            raise RecordError(f'expected "{expected}", found {len(parts)} column(s)')
        extra = {}
        for i, value in enumerate(parts):
            if i in (id_pos, text_pos):
                continue
            extra[columns[i] if i < len(columns) else f"col{i}"] = value
        return Record(check_id(parts[id_pos]), parts[text_pos], extra)

    return parse_tsv


def _json_scalar_id(value: Any, key: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise RecordError(f"id field {key!r} must be a string or an integer, found {value!r}")
    return check_id(str(value))


def make_jsonl_parser(options: ParseOptions) -> Parser:
    """Parser of one JSON object per line into a Record."""
    id_keys = (options.id_field,) if options.id_field else JSON_ID_FIELDS
    text_keys = (options.text_field,) if options.text_field else JSON_TEXT_FIELDS
    keep = options.keep_fields

    def parse_jsonl(raw: bytes) -> Record:
        obj = json_object(_decode(raw))
        id_key = next((k for k in id_keys if k in obj), None)
        if id_key is None:
            raise RecordError(f"no id field: expected one of {list(id_keys)}; pass id_field=")
        text_key = next((k for k in text_keys if k in obj), None)
        if text_key is None:
            raise RecordError(f"no text field: expected one of {list(text_keys)}; pass text_field=")
        body = obj[text_key]
        if not isinstance(body, str):
            raise RecordError(f"text field {text_key!r} must be a string, found {body!r:.40}")
        fields = {}
        for key in keep:
            value = obj.get(key)
            if value is None:
                continue
            if not isinstance(value, str):
                raise RecordError(f"field {key!r} must be a string, found {value!r:.40}")
            fields[key] = value
        return Record(_json_scalar_id(obj[id_key], id_key), body, fields)

    return parse_jsonl


_DOCNO = re.compile(r"<DOCNO>(.*?)</DOCNO>", re.DOTALL | re.IGNORECASE)
_TEXT = re.compile(r"<TEXT>(.*?)</TEXT>", re.DOTALL | re.IGNORECASE)
_DOCHDR = re.compile(r"<DOCHDR>.*?</DOCHDR>", re.DOTALL | re.IGNORECASE)
_TITLE = re.compile(r"<(TITLE|HEADLINE|HEAD)>(.*?)</\1>", re.DOTALL | re.IGNORECASE)
_DOC_OPEN = re.compile(rb"^\s*<DOC>", re.IGNORECASE)
_DOC_CLOSE = re.compile(rb"</DOC>\s*$", re.IGNORECASE)


def make_trec_parser(options: ParseOptions) -> Parser:
    """Parser of one ``<DOC>…</DOC>`` block into a Record.

    The text is the content of the ``<TEXT>`` elements when there are any (joined by a blank
    line), else everything after ``</DOCNO>`` except a ``<DOCHDR>`` header; leading and
    trailing white space is stripped, inner line breaks are kept. A ``<TITLE>``, ``<HEADLINE>``
    or ``<HEAD>`` element becomes the ``title`` field.
    """
    del options  # TREC documents name their own parts

    def parse_trec(raw: bytes) -> Record:
        doc = _decode(raw).replace("\r\n", "\n")
        match = _DOCNO.search(doc)
        if match is None:
            raise RecordError("<DOC> without <DOCNO>…</DOCNO>")
        doc_id = check_id(match.group(1).strip())
        body = doc[match.end() :]
        close = body.upper().rfind("</DOC>")
        body = body[:close] if close >= 0 else body
        texts = _TEXT.findall(body)
        text = "\n\n".join(t.strip() for t in texts) if texts else _DOCHDR.sub("", body).strip()
        title = _TITLE.search(body)
        fields = {"title": title.group(2).strip()} if title else {}
        return Record(doc_id, text, fields)

    return parse_trec


# --------------------------------------------------------------------------- chunkers


def chunk_lines(
    stream: IO[bytes], first_line: int = 1, first_byte: int = 0, strip_bom: bool = True
) -> Iterator[Chunk]:
    """One chunk per non-blank line; a UTF-8 BOM at the very start is dropped.

    ``first_line``/``first_byte`` number a stream that starts inside a file (a block).
    """
    pos = first_byte
    for number, raw in enumerate(stream, start=first_line):
        start = pos
        pos += len(raw)
        if strip_bom and number == 1 and raw.startswith(_BOM):
            raw = raw[len(_BOM) :]
            start += len(_BOM)
        if not raw.rstrip(b"\r\n"):
            continue  # a blank line separates nothing and holds nothing
        yield Chunk(number, start, pos, raw)


def chunk_trec(stream: IO[bytes]) -> Iterator[Chunk]:
    """One chunk per ``<DOC>…</DOC>`` block.

    Raises RecordError (wrapped by the reader with the file and line) for text outside a block
    and for a block that the end of the file cuts off.
    """
    parts: list[bytes] = []
    start = first_line = 0
    pos = 0
    for number, raw in enumerate(stream, start=1):
        line_start = pos
        pos += len(raw)
        if number == 1 and raw.startswith(_BOM):
            raw = raw[len(_BOM) :]
            line_start += len(_BOM)
        if not parts:
            if raw.isspace() or not raw:
                continue
            if not _DOC_OPEN.match(raw):
                raise _ChunkError(number, f"expected <DOC>, found {raw[:40]!r}")
            start, first_line = line_start, number
        parts.append(raw)
        if _DOC_CLOSE.search(raw):
            yield Chunk(first_line, start, pos, b"".join(parts))
            parts = []
    if parts:
        raise _ChunkError(first_line, "<DOC> has no </DOC> before the end of the file (truncated?)")


class _ChunkError(Exception):
    """A structural error found while cutting the stream; not recoverable by skipping."""

    def __init__(self, line: int, reason: str) -> None:
        super().__init__(reason)
        self.line = line
        self.reason = reason


@dataclass(frozen=True)
class FileFormat:
    """A file format: how to cut it into records and how to parse one."""

    chunker: Callable[[IO[bytes]], Iterator[Chunk]]
    make_parser: Callable[[ParseOptions], Parser]


FILE_FORMATS: dict[str, FileFormat] = {
    "tsv": FileFormat(chunk_lines, make_tsv_parser),
    "jsonl": FileFormat(chunk_lines, make_jsonl_parser),
    "trec": FileFormat(chunk_trec, make_trec_parser),
}
FORMATS: tuple[str, ...] = ("arrow", "beir", "irds", "jsonl", "parquet", "trec", "tsv")
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


# --------------------------------------------------------------------------- files


def open_binary(path: str | os.PathLike[str]) -> IO[bytes]:
    """Open ``path`` for reading bytes, decompressing ``.gz``, ``.bz2`` and ``.zst`` on the fly."""
    name = os.fspath(path)
    if name.endswith(".gz"):
        return gzip.open(name, "rb")  # type: ignore[return-value]
    if name.endswith(".bz2"):
        return bz2.open(name, "rb")
    if name.endswith(".zst"):
        try:
            import zstandard
        except ImportError:
            raise ImportError(
                f"{name} is zstd-compressed and the zstandard package is missing. To install:\n"
                "  pip install zstandard"
            ) from None
        return io.BufferedReader(_ZstdReader(name, zstandard), buffer_size=1 << 20)
    return open(name, "rb")


class _ZstdReader(io.RawIOBase):
    """Decompresses a ``.zst`` file frame after frame, and fails on a truncated last frame.

    zstandard's ``stream_reader`` ends quietly when the input stops in the middle of a frame,
    which would make an interrupted download look like a shorter corpus. Here every frame must
    reach its end (``decompressobj().eof``); otherwise reading raises ``EOFError``, as gzip and
    bz2 do.
    """

    def __init__(self, name: str, zstandard: Any) -> None:
        self._file = open(name, "rb")  # noqa: SIM115 - closed in close()
        self._zstd = zstandard
        self._obj = zstandard.ZstdDecompressor().decompressobj()
        self._in_frame = False  # bytes of the current frame were fed and it has not ended
        self._pending = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        while not self._pending:
            data = self._file.read(1 << 20)
            if not data:
                if self._in_frame:
                    raise EOFError("the zstd stream ends inside a frame (truncated file)")
                return 0
            self._pending = self._feed(data)
        n = min(len(view), len(self._pending))
        view[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n

    def _feed(self, data: bytes) -> bytes:
        out = []
        while data:
            self._in_frame = True
            out.append(self._obj.decompress(data))
            if not self._obj.eof:
                break
            self._in_frame = False  # a frame ended; what is left starts the next one
            data = self._obj.unused_data
            self._obj = self._zstd.ZstdDecompressor().decompressobj()
        return b"".join(out)

    def close(self) -> None:
        self._file.close()
        super().close()


def is_compressed(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` is read through a decompressor (byte offsets are then not seekable)."""
    return os.fspath(path).endswith(COMPRESSED_SUFFIXES)


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


def beir_corpus_file(folder: str | os.PathLike[str]) -> Path | None:
    """The corpus file of a BEIR folder, or None when there is none."""
    for name in ("corpus.jsonl", "corpus.jsonl.gz"):
        candidate = Path(folder) / name
        if candidate.is_file():
            return candidate
    return None


def fingerprint(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Cheap identity of a file: size, mtime and a hash of its first and last 64 KiB.

    Stored in a store's metadata so that opening it can tell whether the source has changed.
    """
    p = Path(path)
    st = p.stat()
    digest = hashlib.sha256()
    with open(p, "rb") as f:
        digest.update(f.read(_FINGERPRINT_BYTES))
        if st.st_size > _FINGERPRINT_BYTES:
            f.seek(max(st.st_size - _FINGERPRINT_BYTES, _FINGERPRINT_BYTES))
            digest.update(f.read(_FINGERPRINT_BYTES))
    return {
        "path": str(p.resolve()),
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "head_tail_sha256": digest.hexdigest(),
    }


def fingerprint_changed(recorded: Mapping[str, Any]) -> str | None:
    """Why the file ``recorded`` describes differs from it now, or None when it looks the same.

    A missing file is not a change (the store may have been copied to another machine).
    """
    path = recorded.get("path")
    if not path or not os.path.exists(path):
        return None
    now = fingerprint(path)
    if now["size"] != recorded.get("size"):
        return f"{path} is now {now['size']} bytes, was {recorded.get('size')} at build time"
    if now["head_tail_sha256"] != recorded.get("head_tail_sha256"):
        return f"{path} has different content than at build time"
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
            options = ParseOptions("_id", options.text_field, options.columns, options.keep_fields)
        return FILE_FORMATS[self.file_format].make_parser(options)

    def fingerprint(self) -> dict[str, Any]:
        """Identity of the source for staleness checks."""
        if self.path is None:
            return {"irds": os.fspath(self.source)[len("irds:") :]}
        return fingerprint(self.path)

    def __iter__(self) -> Iterator[Record]:
        if self.format == "irds":
            yield from _iter_irds(os.fspath(self.source)[len("irds:") :])
            return
        if self.format in ("arrow", "parquet"):
            yield from (record for record, _, _ in self.iter_numbered())
            return
        for record, _ in self.iter_spans():
            yield record

    def iter_numbered(self) -> Iterator[tuple[Record, int, int]]:
        """Records with the line each starts on and the byte where it ends (irds: the record's
        number and 0)."""
        if self.format == "irds":
            for number, record in enumerate(self, start=1):
                yield record, number, 0
            return
        if self.format in ("arrow", "parquet"):
            from lading.table_sources import iter_table  # imports pyarrow only when needed

            assert self.path is not None
            for record, row in iter_table(self.path, self.format, self.options, self._bad):
                yield record, row, 0
            return
        for record, chunk in self.iter_spans():
            yield record, chunk.line, chunk.end

    def iter_spans(self) -> Iterator[tuple[Record, Chunk]]:
        """Records with the raw chunk each came from (byte span in the decompressed file)."""
        path = self.path
        if path is None or self.format not in ("beir", *FILE_FORMATS):
            raise ValueError(
                f"{self.format} sources have no byte spans (an OffsetStore needs a text file)"
            )
        parse = self.parser()
        chunker = FILE_FORMATS[self.file_format].chunker
        with _reading(path) as where, open_binary(path) as stream:
            for chunk in chunker(stream):
                where[0] = chunk.line
                try:
                    record = parse(chunk.data)
                except RecordError as e:
                    self._bad(path, chunk.line, str(e))
                    continue
                yield record, chunk

    @property
    def bulk(self) -> bool:
        """Whether :meth:`iter_bulk` can take whole blocks (plain ``id<TAB>text`` files)."""
        return self.format == "tsv" and self.options.columns == ("id", "text")

    def iter_bulk(self) -> Iterator[TsvBlock | tuple[Record, int, int]]:
        """Like :meth:`iter_numbered`, but clean blocks of a TSV come whole, as a TsvBlock.

        Blocks with any line that needs judging go through the per-line parser, so records,
        errors and skip counts are the same as from :meth:`iter_numbered`.
        """
        path = self.path
        if not self.bulk or path is None:
            yield from self.iter_numbered()
            return
        parse = self.parser()
        with _reading(path) as where, open_binary(path) as stream:
            for raw in read_blocks(stream):
                where[0] = raw.line
                block = scan_block(raw)
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
        if self.on_error == "raise":
            raise SourceError(path, line, reason)
        self.skipped += 1
        if len(self.skip_reasons) < 10:
            self.skip_reasons.append(str(SourceError(path, line, reason)))


@contextlib.contextmanager
def _reading(path: Path) -> Iterator[list[int]]:
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
        raise _corrupt(path, where[0], e) from None


def _corrupt(path: Path, line: int, error: BaseException) -> SourceError:
    return SourceError(
        path,
        line or None,
        f"the compressed stream is corrupt or truncated ({error}); re-download or recompress it",
    )


def _iter_irds(dataset_id: str) -> Iterator[Record]:
    ir_datasets = import_ir_datasets()
    dataset = ir_datasets.load(dataset_id)
    if not dataset.has_docs():
        raise ValueError(f"ir_datasets dataset {dataset_id!r} has no documents")
    for doc in dataset.docs_iter():
        yield irds_record(doc)


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
    id_field: str | None = None,
    text_field: str | None = None,
    columns: Sequence[str] = ("id", "text"),
) -> SourceReader:
    """A reader over the records of ``source``; iterate it, then read ``.skipped``."""
    options = ParseOptions(id_field, text_field, tuple(columns))
    return SourceReader(source, format, on_error, options)
