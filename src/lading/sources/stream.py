"""A source made of records from any iterator (an HF dataset, a database cursor, ...)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from lading.sources.chunks import Chunk
from lading.sources.parsers import (
    ParseOptions,
    Parser,
    Record,
    RecordError,
    check_id,
    refuse_lone_surrogates,
)
from lading.sources.reader import OnError, SourceReader
from lading.sources.tables import make_record


class RecordStream(SourceReader):
    """A source made of records from ``records()``, for :func:`lading.build_store`.

    Args:
        records: called once per build; yields the documents, or ``(id, text, fields)`` triples.
        name: what error messages and ``meta.json`` call this source.
        identity: what distinguishes this source from another (e.g. an HF dataset's
            fingerprint); a store built from a stream of equal identity with the same options
            is reused instead of rebuilt.
        on_error: ``"raise"`` stops at a bad record (null id, non-text text), ``"skip"``
            skips and counts it; a lone surrogate (``"\\ud800"``, which UTF-8 cannot hold)
            in an id, a text or a field is such a bad record.
    """

    def __init__(
        self,
        records: Callable[[], Iterable[Record | tuple[Any, Any, Mapping[str, Any]]]],
        name: str,
        identity: Mapping[str, Any],
        on_error: OnError = "raise",
    ) -> None:
        if on_error not in ("raise", "skip"):
            raise ValueError(f"unknown on_error {on_error!r}; choose from ['raise', 'skip']")
        self.source, self.format, self.on_error = name, "records", on_error
        self.options, self.skipped, self.skip_reasons = ParseOptions(), 0, []
        self._records, self._identity = records, dict(identity)

    @property
    def path(self) -> Path | None:
        return None

    def fingerprint(self) -> dict[str, Any]:
        return dict(self._identity)

    def parser(self) -> Parser:
        raise ValueError(f"{self.source} is a stream of records: it has no parser")

    def iter_spans(self) -> Iterator[tuple[Record, Chunk]]:
        raise ValueError(f"{self.source} is a stream of records: it has no byte spans")

    @property
    def bulk(self) -> bool:
        return False

    def __iter__(self) -> Iterator[Record]:
        for record, _, _ in self.iter_numbered():
            yield record

    def iter_numbered(self) -> Iterator[tuple[Record, int, int]]:
        """Records with their 1-based position in the stream (no byte offsets: 0)."""
        for number, item in enumerate(self._records(), start=1):
            try:
                record = item if isinstance(item, Record) else make_record(*item)
                check_id(record.id)
                refuse_lone_surrogates(
                    (("id", record.id), ("text", record.text), *record.fields.items())
                )
            except RecordError as e:
                self._bad(Path(os.fspath(self.source)), number, f"record {number}: {e}")
                continue
            yield record, number, 0
