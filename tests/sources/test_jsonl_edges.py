"""JSONL edge cases pinned record by record: ids, fields, line numbers, byte spans, skip counts
and the exact error of each kind of bad line, read whole, as a part (a span starting mid-file)
and through each of the reader's iterators (they share one loop and one parser)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lading.errors import SourceError
from lading.sources import SourceReader

LINES = [
    b'\xef\xbb\xbf{"id": "a", "text": "x", "title": "T"}\r\n',
    b"\r\n",
    b"\n",
    b"\r\r\n",
    b'{"id": 7, "text": "int id"}\n',
    b'{"id": true, "text": "bool"}\n',
    b'{"id": 1.5, "text": "float"}\n',
    b"[1, 2]\n",
    b'"str"\n',
    b"null\n",
    b'{"text": "no id"}\n',
    b'{"id": "n"}\n',
    b'{"id": "t", "text": 5}\n',
    b'{"id": "f", "text": "x", "title": 3}\n',
    b'{"id": "f2", "text": "x", "title": null}\n',
    b'{"id": " pad", "text": "x"}\n',
    b'{"id": "", "text": "x"}\n',
    b'{"id": "nu\\u0000l", "text": "x"}\n',
    b'{"id": "u", "text": "bad \xff"}\n',
    b'{"id": "j", "text": \n',
    b'\xef\xbb\xbf{"id": "midbom", "text": "x"}\n',
    b"  \n",
    b'{"id": "crlf", "text": "y"}\r\n',
    b'{"doc_id": "d", "id": "i", "contents": "c", "text": "t"}\n',
    b'{"id": -3, "text": "neg"} \n',
    b'{"id": "last", "text": "no line end"}',
]
FIX_JSON = "; fix the line (a JSON object a line), or pass on_error='skip' to skip such records"
FIX_OBJECT = "; give each line one object, or pass on_error='skip' to skip such records"
BOM_JSON = "invalid JSON (Unexpected UTF-8 BOM (decode using utf-8-sig) at column 1)" + FIX_JSON
NOT_ID = "id field 'id' must be a string or an integer, found"
NO_ID = (
    "no id field: expected one of ['id', 'doc_id', 'docid', '_id', 'pid']; name it: "
    "parse=ParseOptions(id_field=...) or --id-field"
)
NO_TEXT = (
    "no text field: expected one of ['text', 'contents', 'body']; name it: "
    "parse=ParseOptions(text_field=...) or --text-field"
)
BAD_UTF8 = "invalid UTF-8 at byte 25 of the record (b'\\xff'); re-encode the file as UTF-8"
# what the line of LINES at each index does after a good first line: its record, or the error
AFTER_A_GOOD_LINE: dict[int, tuple[str, str] | str | None] = {
    0: BOM_JSON,  # a BOM is dropped only at the very start of the file
    1: None,
    2: None,
    3: None,
    4: ("7", "int id"),
    5: f"{NOT_ID} True",
    6: f"{NOT_ID} 1.5",
    7: "expected a JSON object, found list" + FIX_OBJECT,
    8: "expected a JSON object, found str" + FIX_OBJECT,
    9: "expected a JSON object, found NoneType" + FIX_OBJECT,
    10: NO_ID,
    11: NO_TEXT,
    12: "text field 'text' must be a string, found 5",
    13: "field 'title' must be a string, found 3",
    14: ("f2", "x"),
    15: "id ' pad' has leading or trailing whitespace; strip it in the source",
    16: "empty id",
    17: "id 'nu\\x00l' contains a NUL character",
    18: BAD_UTF8 + ", or pass on_error='skip' to skip such records",
    19: "invalid JSON (Expecting value at column 21)" + FIX_JSON,  # cut at its end (not 1)
    20: BOM_JSON,
    21: None,  # white space alone holds no record, as an empty line (it was invalid JSON)
    22: ("crlf", "y"),
    23: "two id fields differ: 'id' is 'i' and 'doc_id' is 'd'; name the one that is the "
    "record's id: parse=ParseOptions(id_field='doc_id') or --id-field doc_id, or the other",
    24: ("-3", "neg"),
    25: ("last", "no line end"),
}


@pytest.mark.parametrize("index", sorted(AFTER_A_GOOD_LINE))
def test_each_kind_of_line_gives_its_record_or_its_exact_error(tmp_path: Path, index: int) -> None:
    after_a_good_line(tmp_path, LINES[index], AFTER_A_GOOD_LINE[index])


def after_a_good_line(tmp_path: Path, line: bytes, expected: tuple[str, str] | str | None) -> None:
    """``line`` after a good first line reads as ``expected``: its record, or its error."""
    path = tmp_path / "c.jsonl"
    path.write_bytes(b'{"id": "ok", "text": "first"}\n' + line)
    if isinstance(expected, str):
        with pytest.raises(SourceError) as caught:
            list(SourceReader(path, "jsonl"))
        assert str(caught.value) == f"line 2 of {path}: {expected}"
        return
    records = [(r.id, r.text) for r in SourceReader(path, "jsonl")]
    assert records == [("ok", "first")] + ([expected] if expected else [])


def test_every_iterator_gives_the_same_records_lines_spans_and_skips(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    path.write_bytes(b"".join(LINES))
    spans = [
        ("a", "x", {"title": "T"}, 1, 3, 43),
        ("7", "int id", {}, 5, 49, 77),
        ("f2", "x", {}, 15, 243, 284),
        ("crlf", "y", {}, 23, 455, 484),
        ("-3", "neg", {}, 25, 541, 568),
        ("last", "no line end", {}, 26, 568, 605),
    ]
    reader = SourceReader(path, "jsonl", "skip")
    got = [(r.id, r.text, dict(r.fields), c.line, c.start, c.end) for r, c in reader.iter_spans()]
    assert got == spans
    assert all(c.data == path.read_bytes()[c.start : c.end] for _, c in reader.iter_spans())
    assert reader.skipped == 2 * 16
    numbered = SourceReader(path, "jsonl", "skip")
    assert [(r.id, line, end) for r, line, end in numbered.iter_numbered()] == [
        (s[0], s[3], s[5]) for s in spans
    ]
    plain = SourceReader(path, "jsonl", "skip")
    assert [tuple(r) for r in plain] == [s[:3] for s in spans]
    assert numbered.skipped == plain.skipped == 16
    assert len(plain.skip_reasons) == 10
    assert plain.skip_reasons[0] == f"line 6 of {path}: {NOT_ID} True"


def test_a_part_starting_mid_line_numbers_as_the_file_does_in_its_errors(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    path.write_bytes(b"".join(LINES))
    first = SourceReader(path, "jsonl", "skip", span=(60, 300))  # 60 is inside line 5
    assert [(r.id, line, end) for r, line, end in first.iter_numbered()] == [("f2", 10, 207)]
    assert first.skipped == 10 and first.skip_reasons[0] == f"line 6 of {path}: {NOT_ID} True"
    rest = SourceReader(path, "jsonl", "skip", span=(300, 10**6))
    assert [r.id for r in rest] == ["crlf", "-3", "last"]
    assert rest.skipped == 6
    assert rest.skip_reasons[2] == f"line 19 of {path}: {BAD_UTF8}"
    assert [r.id for r in SourceReader(path, "jsonl", span=(0, 60))] == ["a", "7"]
    assert list(SourceReader(path, "jsonl", span=(44, 45))) == []
    with pytest.raises(SourceError) as caught:
        list(SourceReader(path, "jsonl", span=(300, 10**6)))
    assert str(caught.value) == f"line 17 of {path}: empty id"


# lines the parser's short path (json's scanner called directly) hands to the long one: what
# surrounds the value; each reads as json.loads reads it
AROUND_THE_VALUE: dict[bytes, tuple[str, str] | str] = {
    b'  {"id": "lead", "text": "white space first"}\n': ("lead", "white space first"),
    b'{"id": "tail", "text": "x"} \t \n': ("tail", "x"),
    b'{"id": "g", "text": "x"} x\n': "invalid JSON (Extra data at column 26)" + FIX_JSON,
    b'{"id": "g2", "text": "x"}{"id": "g3", "text": "y"}\n': (
        "invalid JSON (Extra data at column 26)" + FIX_JSON
    ),
    b'{"id": "n", "text": "x", "score": NaN}\n': ("n", "x"),
}


@pytest.mark.parametrize("line", sorted(AROUND_THE_VALUE))
def test_what_surrounds_a_value_reads_as_json_loads_reads_it(tmp_path: Path, line: bytes) -> None:
    after_a_good_line(tmp_path, line, AROUND_THE_VALUE[line])


# a \u escape of half a UTF-16 pair is valid JSON but no text UTF-8 can hold: a malformed record
# named where it is read (it crashed the build's encode, or the tokenizer, with no file or line)
LONE = "; write the pair whole or drop the escape"
SURROGATES: dict[bytes, tuple[str, str] | str] = {
    b'{"id": "s", "text": "bad \\ud800 surrogate"}\n': (
        f'a lone surrogate \\ud800 in "text" (a \\u escape of half a UTF-16 pair){LONE}'
    ),
    b'{"id": "a\\uDC80", "text": "x"}\n': (
        f'a lone surrogate \\udc80 in "id" (a \\u escape of half a UTF-16 pair){LONE}'
    ),
    b'{"id": "t", "text": "x", "title": "\\udfff"}\n': (
        f'a lone surrogate \\udfff in "title" (a \\u escape of half a UTF-16 pair){LONE}'
    ),
    b'{"id": "pair", "text": "\\ud83d\\ude00"}\n': ("pair", "\U0001f600"),
    b'{"id": "other", "text": "x", "note": "\\ud800"}\n': ("other", "x"),  # a key not kept
}


@pytest.mark.parametrize("line", sorted(SURROGATES))
def test_a_lone_surrogate_escape_is_a_malformed_record(tmp_path: Path, line: bytes) -> None:
    expected = SURROGATES[line]
    if isinstance(expected, str):
        expected += ", or pass on_error='skip' to skip such records"
    after_a_good_line(tmp_path, line, expected)
    reader = SourceReader(tmp_path / "c.jsonl", "jsonl", "skip")
    kept = [r.id for r in reader]
    if isinstance(expected, str):
        assert (kept, reader.skipped) == (["ok"], 1)
        assert reader.skip_reasons == [f"line 2 of {tmp_path / 'c.jsonl'}: {SURROGATES[line]}"]
    else:
        assert (kept, reader.skipped) == (["ok", expected[0]], 0)


def test_a_raw_control_character_is_named_once_at_its_column() -> None:
    """json's message ends in "at" for this case: the error read "... at at column 12"."""
    from lading.sources.parsers import RecordError, json_object

    with pytest.raises(RecordError) as bad:
        json_object('{"id": "a\x01"}')
    assert " at at " not in str(bad.value) and "at column 10" in str(bad.value)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (b'{"id": 5, "docid": "5", "text": "same id twice"}\n', ("5", "same id twice")),
        (  # MS MARCO v2's passages: their document's id and their own
            b'{"docid": "D1", "pid": "P1", "text": "v2"}\n',
            "two id fields differ: 'docid' is 'D1' and 'pid' is 'P1'; name the one that is the "
            "record's id: parse=ParseOptions(id_field='pid') or --id-field pid, or the other",
        ),
    ],
)
def test_two_id_fields_read_as_one_id_only_where_they_agree(
    tmp_path: Path, line: bytes, expected: tuple[str, str] | str
) -> None:
    after_a_good_line(tmp_path, line, expected)


def test_a_named_id_field_reads_its_id_beside_another_id_field(tmp_path: Path) -> None:
    """The fix the refusal of two differing id fields names: ``id_field=`` picks one."""
    from lading.sources import ParseOptions

    path = tmp_path / "v2.jsonl"
    path.write_bytes(b'{"docid": "D1", "pid": "P1", "text": "x"}\n')
    records = SourceReader(path, "jsonl", options=ParseOptions(id_field="pid"))
    assert [(r.id, r.text) for r in records] == [("P1", "x")]
    texts = SourceReader(path, "jsonl", options=ParseOptions(need_id=False))  # a token corpus's
    assert [r.text for r in texts] == ["x"]  # (no id asked for: no refusal over which)
