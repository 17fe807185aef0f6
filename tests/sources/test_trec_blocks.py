"""TREC ``<DOC>`` blocks that run into the next document: a record error at the line where the
next document begins, never one record that silently holds two documents."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import write
from lading.errors import SourceError
from lading.sources import SourceReader, read_records

# a's </DOC> is missing (a cut or concatenated file): b's <DOC> opens inside a
MISSING_CLOSE = """<DOC>
<DOCNO>a</DOCNO>
<TEXT>text of a</TEXT>
<DOC>
<DOCNO>b</DOCNO>
<TEXT>text of b</TEXT>
</DOC>
<DOC>
<DOCNO>c</DOCNO>
<TEXT>text of c</TEXT>
</DOC>
"""

# a's </DOC> and b's <DOC> on one line
CLOSE_OPEN_ONE_LINE = """<DOC>
<DOCNO>a</DOCNO>
body of a
</DOC><DOC>
<DOCNO>b</DOCNO>
body of b
</DOC>
<DOC>
<DOCNO>c</DOCNO>
body of c
</DOC>
"""

# b's <DOC> line lost along with a's </DOC>: two <DOCNO> in one block
TWO_DOCNOS = """<DOC>
<DOCNO>a</DOCNO>
body of a
<DOCNO>b</DOCNO>
body of b
</DOC>
<DOC>
<DOCNO>c</DOCNO>
body of c
</DOC>
"""


@pytest.mark.parametrize(
    ("text", "line", "what", "kept"),
    [
        (MISSING_CLOSE, 4, "<DOC>", ["b", "c"]),  # a is refused, b and c are read
        (CLOSE_OPEN_ONE_LINE, 4, "<DOC>", ["c"]),  # the block holding a and b is refused
        (TWO_DOCNOS, 4, "<DOCNO>", ["c"]),
    ],
)
def test_a_document_running_into_the_next_is_an_error_at_the_inner_line(
    tmp_path: Path, text: str, line: int, what: str, kept: list[str]
) -> None:
    path = write(tmp_path / "d.trec", text)
    with pytest.raises(SourceError, match=rf"line {line}\b.*a second {what}.*</DOC>") as e:
        list(read_records(path))
    assert str(path) in str(e.value)
    reader = SourceReader(path, on_error="skip")
    assert [r.id for r in reader] == kept
    assert reader.skipped == 1
    assert f"line {line}" in reader.skip_reasons[0]


def test_the_recovered_document_after_a_missing_close_keeps_its_own_text_and_span(
    tmp_path: Path,
) -> None:
    path = write(tmp_path / "d.trec", MISSING_CLOSE)
    reader = SourceReader(path, on_error="skip")
    spans = {r.id: (r.text, c.line, c.data) for r, c in reader.iter_spans()}
    assert spans["b"][:2] == ("text of b", 4)
    data = path.read_bytes()
    assert spans["b"][2] == data[data.index(b"<DOC>\n<DOCNO>b") : data.index(b"<DOC>\n<DOCNO>c")]


def test_one_line_documents_and_well_formed_files_read_as_before(tmp_path: Path) -> None:
    path = write(
        tmp_path / "d.trec",
        "<DOC><DOCNO>1</DOCNO>one</DOC>\n<doc>\n<docno>2</docno>\ntwo\n</doc>\n",
    )
    assert [(r.id, r.text) for r in read_records(path)] == [("1", "one"), ("2", "two")]


def test_markup_quoted_inside_a_documents_text_is_text(tmp_path: Path) -> None:
    """A web page's text may quote ``<doc>`` (or ``<DOCNO>``) inside a line: the first cut of
    the run-together check counted every such mark and refused (or, under skip, dropped) the
    document, which the older reader read."""
    text = (
        "An XML file starts with <doc> as its root, e.g. <doc><title>x</title></doc>; "
        "a TREC file names one with <DOCNO>."
    )
    path = write(
        tmp_path / "q.trec",
        f"<DOC>\n<DOCNO>d1</DOCNO>\n<TEXT>\n{text}\n</TEXT>\n</DOC>\n"
        "<DOC>\n<DOCNO>d2</DOCNO>\n<TEXT>\nplain\n</TEXT>\n</DOC>\n",
    )
    records = read_records(path, format="trec")
    assert [(r.id, text in r.text) for r in records] == [("d1", True), ("d2", False)]
    assert records.skipped == 0
