"""Random bytes into every reader: a result, or an error naming file and line; never a crash."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lading.errors import SourceError
from lading.ir import read_qrels, read_queries, read_run
from lading.sources import read_records

PIECES = [
    b"1",
    b"d7",
    b"\t",
    b" ",
    b"\n",
    b"\r\n",
    b"\x00",
    b"\xff",
    b"\xef\xbb\xbf",
    b"{",
    b"}",
    b'"id": 3',
    b'"text": "x"',
    b'"qid": "q"',
    b'"neg": ["a"]',
    b",",
    b":",
    b"<DOC>",
    b"</DOC>",
    b"<DOCNO>",
    b"</DOCNO>",
    b"<TEXT>",
    b"Q0",
    b"0",
    b"2.5",
    b"\xc3\xa9",
]
content = st.lists(st.sampled_from(PIECES), max_size=60).map(b"".join)
fuzz = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def check(call, path: Path) -> None:  # type: ignore[no-untyped-def]
    try:
        result = call()
    except SourceError as e:
        assert str(path) in str(e) and ("line" in str(e) or "compressed" in str(e)), str(e)
        return
    assert result is not None


@pytest.mark.parametrize("suffix", ["tsv", "jsonl", "trec"])
@fuzz
@given(data=content, skip=st.booleans())
def test_document_readers(tmp_path: Path, suffix: str, data: bytes, skip: bool) -> None:
    path = tmp_path / f"c.{suffix}"
    path.write_bytes(data)
    reader = read_records(path, on_error="skip" if skip else "raise")
    check(lambda: [(r.id, r.text) for r in reader], path)


@pytest.mark.parametrize("read", [read_queries, read_qrels, read_run])
@fuzz
@given(data=content)
def test_ir_readers(tmp_path: Path, read, data: bytes) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "input.txt"
    path.write_bytes(data)
    check(lambda: read(path), path)
