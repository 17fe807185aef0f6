"""The source layer: every document format read as records, streamed in constant memory.

- :mod:`~lading.sources.chunks`: decompression and the chunkers that cut a byte stream into raw
  records with their line and byte span.
- :mod:`~lading.sources.parsers`: one raw record into a :class:`Record` (TSV, JSONL, TREC).
- :mod:`~lading.sources.tsv_blocks`: large TSV blocks scanned at once (the bulk build path).
- :mod:`~lading.sources.tables`: parquet and Arrow files, a record batch at a time.
- :mod:`~lading.sources.reader`: :class:`SourceReader` puts them together for a path, a BEIR
  folder or ``irds:<id>``, and :func:`read_records`.
- :mod:`~lading.sources.stream`: :class:`RecordStream`, records from any iterator.
- :mod:`~lading.sources.fingerprint`: the source identity stores compare on reuse.

Imports nothing of lading's but :mod:`lading.errors`; the stores are built on top of it.
"""

from __future__ import annotations

from lading.sources.chunks import (
    COMPRESSED_SUFFIXES,
    Chunk,
    chunk_lines,
    chunk_trec,
    is_compressed,
    open_binary,
)
from lading.sources.fingerprint import (
    changed_during,
    fingerprint,
    fingerprint_changed,
    refuse_if_changed,
)
from lading.sources.parsers import (
    JSON_ID_FIELDS,
    JSON_TEXT_FIELDS,
    ParseOptions,
    Parser,
    Record,
    RecordError,
    check_id,
    json_object,
    make_jsonl_parser,
    make_trec_parser,
    make_tsv_parser,
)
from lading.sources.reader import (
    FILE_FORMATS,
    FORMATS,
    ON_ERROR_MODES,
    FileFormat,
    OnError,
    SourceReader,
    beir_corpus_file,
    check_source_shape,
    detect_format,
    import_ir_datasets,
    irds_record,
    read_records,
)
from lading.sources.stream import RecordStream

__all__ = [
    "COMPRESSED_SUFFIXES",
    "FILE_FORMATS",
    "FORMATS",
    "JSON_ID_FIELDS",
    "JSON_TEXT_FIELDS",
    "ON_ERROR_MODES",
    "Chunk",
    "FileFormat",
    "OnError",
    "ParseOptions",
    "Parser",
    "Record",
    "RecordError",
    "RecordStream",
    "SourceReader",
    "beir_corpus_file",
    "changed_during",
    "check_id",
    "check_source_shape",
    "chunk_lines",
    "chunk_trec",
    "detect_format",
    "fingerprint",
    "fingerprint_changed",
    "import_ir_datasets",
    "irds_record",
    "is_compressed",
    "json_object",
    "make_jsonl_parser",
    "make_trec_parser",
    "make_tsv_parser",
    "open_binary",
    "read_records",
    "refuse_if_changed",
]
