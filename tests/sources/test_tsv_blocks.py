"""The bulk TSV path gives exactly what the per-line path gives: records, lines, skips, errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lading.sources.tsv_blocks
from lading.errors import SkippedRecordsWarning, SourceError
from lading.sources import ParseOptions, SourceReader
from lading.sources.tsv_blocks import Column, TsvBlock, int_values
from lading.stores.index import canonical_int

PIECES = [
    b"1",
    b"42",
    b"007",
    b"abc",
    b"\t",
    b"\t",
    b"\r",
    b" ",
    b"\x00",
    b"\xff",
    b"\xc3\xa9",
    b"text",
    b"id",
    b"\xef\xbb\xbf",
    b"\x0b",
    b"x" * 40,
]
line_strategy = st.lists(st.sampled_from(PIECES), max_size=8).map(b"".join)
file_strategy = st.lists(line_strategy, max_size=40).map(lambda ls: b"\n".join(ls))


Row = tuple[str, str, dict[str, str], int]


def flatten(reader: SourceReader, bulk: bool) -> list[Row]:
    """Every record as (id, text, fields, line); an empty field is left out, as a store keeps
    a field a record lacks as empty (records gathered into a block get empty ones)."""
    out = []
    items = reader.iter_bulk() if bulk else reader.iter_numbered()
    for item in items:
        if isinstance(item, TsvBlock):
            fields = {k: v.values() for k, v in item.fields.items()}
            for i, (doc_id, text) in enumerate(zip(item.ids.values(), item.texts.values())):
                extra = {k: v[i].decode() for k, v in fields.items() if v[i]}
                out.append((doc_id.decode(), text.decode(), extra, int(item.lines[i])))
        else:
            record, line, _ = item
            out.append(
                (record.id, record.text, {k: v for k, v in record.fields.items() if v}, line)
            )
    return out


def outcome(
    path: Path, on_error: str, bulk: bool, columns: tuple[str, ...] = ("id", "text")
) -> tuple[object, ...]:
    options = ParseOptions(columns=columns)
    reader = SourceReader(path, "tsv", on_error, options)  # type: ignore[arg-type]
    try:
        return ("ok", flatten(reader, bulk), reader.skipped, reader.skip_reasons)
    except SourceError as e:
        return ("error", str(e))


COLUMNS = [("id", "text"), ("id", "url", "title", "text"), ("text", "id"), ("title", "id", "text")]


@settings(max_examples=300, deadline=None)
@given(
    content=file_strategy,
    on_error=st.sampled_from(["raise", "skip"]),
    block=st.integers(1, 64),
    columns=st.sampled_from(COLUMNS),
)
def test_bulk_equals_per_line(
    tmp_path_factory: pytest.TempPathFactory,
    content: bytes,
    on_error: str,
    block: int,
    columns: tuple[str, ...],
) -> None:
    path = tmp_path_factory.mktemp("tsv") / "c.tsv"
    path.write_bytes(content)
    old = lading.sources.tsv_blocks.BLOCK_BYTES
    lading.sources.tsv_blocks.BLOCK_BYTES = block  # tiny blocks: lines cross block edges
    try:
        bulk = outcome(path, on_error, bulk=True, columns=columns)
        assert bulk == outcome(path, on_error, bulk=False, columns=columns)
    finally:
        lading.sources.tsv_blocks.BLOCK_BYTES = old


def test_clean_blocks_are_taken_whole(tmp_path: Path) -> None:
    path = tmp_path / "c.tsv"
    path.write_bytes(b"".join(b"%d\tpassage %d\r\n" % (i, i) for i in range(1000)))
    items = list(SourceReader(path).iter_bulk())
    assert len(items) == 1 and isinstance(items[0], TsvBlock)
    assert items[0].lines.tolist() == list(range(1, 1001))


def column(values: list[bytes]) -> Column:
    return Column(b"".join(values), np.array([len(v) for v in values], dtype=np.int64))


def test_int_values_are_canonical_only() -> None:
    assert int_values(column([b"0", b"7", b"8841822"])).tolist() == [0, 7, 8841822]  # type: ignore[union-attr]
    assert int_values(column([b"9" * 18])).tolist() == [10**18 - 1]  # type: ignore[union-attr]
    for bad in ([b"07"], [b"1", b"x"], [b"1" * 19], [b"-1"], [b"1", b""]):
        assert int_values(column(bad)) is None


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text("0123456789x-", min_size=1, max_size=20), min_size=1, max_size=30))
def test_int_values_agree_with_canonical_int(ids: list[str]) -> None:
    """The numpy parse gives what the per-id parse gives, or refuses where it refuses."""
    expected = [canonical_int(i) for i in ids]
    got = int_values(column([i.encode() for i in ids]))
    if any(e is None for e in expected):
        assert got is None
    else:
        assert got is not None and got.tolist() == expected


def test_four_column_store_equals_the_per_line_build(tmp_path: Path) -> None:
    """Clean blocks of an MS MARCO-style 4-column TSV are taken whole; a block that is not
    (a line of an extra column, refused and here skipped) goes line by line; the store is the
    same."""
    from lading.stores import build_store

    lines = [b"D%d\thttp://x/%d\ttitle %d\tbody %d" % (i, i, i, i) for i in range(300)]
    lines[250] += b"\textra"
    path = tmp_path / "docs.tsv"
    path.write_bytes(b"\n".join(lines) + b"\n")
    parse = ParseOptions(columns=("id", "url", "title", "text"))
    old = lading.sources.tsv_blocks.BLOCK_BYTES
    lading.sources.tsv_blocks.BLOCK_BYTES = 1024  # several blocks, most of them clean
    try:
        reader = SourceReader(path, "tsv", on_error="skip", options=parse)
        paths = {type(item).__name__ for item in reader._bulk_items()}
        kinds = {type(item).__name__ for item in reader.iter_bulk()}
        with pytest.warns(UserWarning, match="skipped 1 malformed record"):
            store = build_store(
                path, tmp_path / "store", parse=parse, on_error="skip", progress=False
            )
    finally:
        lading.sources.tsv_blocks.BLOCK_BYTES = old
    assert paths == {"TsvBlock", "tuple"}  # both paths were taken
    assert kinds == {"TsvBlock"}  # and came out in one shape
    expected = list(SourceReader(path, "tsv", on_error="skip", options=parse))
    assert len(store) == len(expected) == 299 and "D250" not in store
    for record in expected:
        got = store.record(record.id)
        assert (got.id, got.text) == (record.id, record.text)
        assert {k: v for k, v in got.fields.items() if v} == dict(record.fields)


@settings(max_examples=200, deadline=None)
@given(
    data=st.binary(min_size=1, max_size=300),
    cuts=st.lists(st.integers(0, 300), max_size=40),
    slice_cost=st.sampled_from([0, 10**9]),
)
def test_every_way_of_cutting_a_column_gives_the_same_bytes(
    data: bytes, cuts: list[int], slice_cost: int
) -> None:
    """Row-by-width gather, block mask and one slice per row agree with plain slicing."""
    bounds = sorted(min(c, len(data)) for c in cuts)
    starts = np.array(bounds[0::2][: len(bounds) // 2], dtype=np.int64)
    ends = np.array(bounds[1::2][: len(starts)], dtype=np.int64)
    if len(starts) == 0:
        return
    old = lading.sources.tsv_blocks._SLICE_COST
    lading.sources.tsv_blocks._SLICE_COST = slice_cost  # 0: a slice per row; 10**9: the mask
    try:
        got = lading.sources.tsv_blocks._cut(np.frombuffer(data, np.uint8), starts, ends)
    finally:
        lading.sources.tsv_blocks._SLICE_COST = old
    assert got.values() == [data[a:b] for a, b in zip(starts.tolist(), ends.tolist())]


@pytest.mark.parametrize(
    "content",
    [
        b"1\thello\n2\tlast\r",  # a last line ending in \r without \n keeps its \r
        b"1\thello\r\n2\tlast\r",
        b"1\thello\r\n2\tlast\r\n",
        b"\xc3\xa9\thello\n2\tlast\r",  # a non-ASCII id sends the block to the per-line parser
        b"1\thello\n2\tlast\r\r\n",
    ],
)
def test_every_store_reads_the_same_text(tmp_path: Path, content: bytes) -> None:
    import lading
    from lading.sources import read_records

    path = tmp_path / "c.tsv"
    path.write_bytes(content)
    want = {r.id: r.text for r in read_records(path)}
    stores = {
        "packed": lading.build_store(path, tmp_path / "packed"),
        "offsets": lading.OffsetStore.build(path, tmp_path / "offsets"),
        "memory": lading.InMemoryStore.from_source(path),
    }
    for name, store in stores.items():
        assert {i: store[i] for i in want} == want, name


def test_closing_the_blocks_while_the_reader_waits_to_say_it_is_done_returns(
    tmp_path: Path,
) -> None:
    """The reading thread, done with the file, waited without end to queue its "done" when the
    queue was full; a consumer that stopped early (a bad line raising) joined it: a hang."""
    import io
    import threading
    import time

    from lading.sources.tsv_blocks import scanned_blocks

    stream = io.BytesIO(b"a\tx\n" * 4)
    old = lading.sources.tsv_blocks.BLOCK_BYTES
    lading.sources.tsv_blocks.BLOCK_BYTES = 8  # two blocks
    try:
        blocks = scanned_blocks(stream, ahead=1)
        next(blocks)  # the second block fills the queue; "done" waits behind it
        time.sleep(0.5)
        closer = threading.Thread(target=blocks.close, daemon=True)
        closer.start()
        closer.join(timeout=10)
        assert not closer.is_alive()
    finally:
        lading.sources.tsv_blocks.BLOCK_BYTES = old


@pytest.mark.parametrize("columns", [("id", "text"), ("id", "url", "title", "text")])
def test_a_header_line_is_refused_not_stored_as_a_document(
    tmp_path: Path, columns: tuple[str, ...]
) -> None:
    """pandas' ``to_csv(sep="\\t")`` writes the column names first: ``id<TAB>text`` was
    stored as a document of id "id" and text "text", nothing said (and MS MARCO's integer
    ids, one id now a word, got the string-id index). A line of the column names is refused
    naming it, or skipped and counted, on either path; so is one inside the file (two such
    exports joined with ``cat``)."""
    import lading

    header = "\t".join(columns)
    rows = ["\t".join(str(i) if c == "id" else f"{c} {i}" for c in columns) for i in range(500)]
    path = tmp_path / "c.tsv"
    path.write_text("\n".join([header, *rows[:250], header, *rows[250:]]) + "\n")
    for bulk in (True, False):
        refused = outcome(path, "raise", bulk, columns)
        assert refused[0] == "error" and "line 1 of" in str(refused[1]), refused
        assert "header" in str(refused[1])
        kept = outcome(path, "skip", bulk, columns)
        assert kept[0] == "ok" and kept[2] == 2, kept[2:]
        assert [row[0] for row in kept[1]] == [str(i) for i in range(500)]  # type: ignore[index]
    with pytest.warns(SkippedRecordsWarning, match="skipped 2 malformed record"):
        store = lading.build_store(
            path, tmp_path / "s", parse=ParseOptions(columns=columns), on_error="skip"
        )
    assert "id" not in store and store._maps().index.kind == "runs"


@pytest.mark.parametrize(
    ("header", "columns"),
    [
        ("pid\tpassage", ("id", "text")),
        ("docid\ttext", ("id", "text")),
        ("doc_id\tcontents", ("id", "text")),
        ("_id\ttext", ("id", "text")),
        ("ID\tTEXT", ("id", "text")),
        ("docid\turl\ttitle\tbody", ("id", "url", "title", "text")),
        # a column's own name past 24 bytes, or not ASCII: the bulk path stored it (a review)
        ("id\ta_very_long_column_name_here\ttext", ("id", "a_very_long_column_name_here", "text")),
        ("id\tüberschrift_des_dokuments\ttext", ("id", "überschrift_des_dokuments", "text")),
    ],
)
def test_an_exports_header_is_refused_not_stored_as_a_document(
    tmp_path: Path, header: str, columns: tuple[str, ...]
) -> None:
    """A header is refused only where it was the column names to the letter: ``pid<TAB>passage``
    (an MS MARCO export), ``docid<TAB>text``, ``ID<TAB>TEXT`` were stored as a document of id
    "pid", drawn as a negative, and moved an all-integer corpus off the integer index. A
    first line whose id and text are the usual names of such columns is a header on both
    paths (refused naming it, or skipped and counted)."""
    rows = ["\t".join(str(i) if c == "id" else f"{c} {i}" for c in columns) for i in range(300)]
    path = tmp_path / "c.tsv"
    path.write_text("\n".join([header, *rows]) + "\n")
    for bulk in (True, False):
        refused = outcome(path, "raise", bulk, columns)
        assert refused[0] == "error" and "line 1 of" in str(refused[1]), refused
        assert "a header line" in str(refused[1]) and header.split("\t")[0] in str(refused[1])
        kept = outcome(path, "skip", bulk, columns)
        assert kept[0] == "ok" and kept[2] == 1, kept[2:]
        assert [row[0] for row in kept[1]] == [str(i) for i in range(300)]  # type: ignore[index]


def test_documents_that_only_look_like_names_are_kept(tmp_path: Path) -> None:
    """The header rule wants every field a name: a document whose id is a word but whose text
    is prose, or whose text is a name but whose id is a number, is a document."""
    lines = ["id\tthe text of the first document", "pid\tcat", "1\ttext", "title\tpassage 2"]
    path = tmp_path / "c.tsv"
    path.write_text("\n".join(lines) + "\n")
    for bulk in (True, False):
        kept = outcome(path, "raise", bulk, ("id", "text"))
        assert kept[0] == "ok", kept
        assert [row[0] for row in kept[1]] == ["id", "pid", "1", "title"]  # type: ignore[index]


def test_an_id_holding_a_cr_is_refused_on_both_paths(tmp_path: Path) -> None:
    """``1\\r1<TAB>text``: the per-line parser refuses an id holding a CR (no qrels or run line
    can name it), and the bulk path stored it; the property check found them apart. A CRLF
    file's line ends are not ids' CRs."""
    path = tmp_path / "c.tsv"
    path.write_bytes(b"1\t\xc3\xa0 a\r\n1\r1\tb\r\n2\tc\r\n")
    for bulk in (True, False):
        refused = outcome(path, "raise", bulk)
        assert refused[0] == "error" and "line 2 of" in str(refused[1]), refused
        kept = outcome(path, "skip", bulk)
        assert kept[0] == "ok" and kept[2] == 1, kept
        assert [row[0] for row in kept[1]] == ["1", "2"]  # type: ignore[index]
    path.write_bytes(b"1\ta\r\n2\tb\r\n")
    assert outcome(path, "raise", True) == outcome(path, "raise", False)


@pytest.mark.parametrize("columns", [("id", "text"), ("id", "url", "title", "text")])
def test_lines_ended_by_a_lone_cr_are_named_not_read_as_one_record(
    tmp_path: Path, columns: tuple[str, ...]
) -> None:
    """A classic Mac OS file (lines ended by CR alone): three records read as one line. With
    two columns it was called a TSV of more columns ("--columns id,url,title,text"), and with
    those columns it was stored as one document of id 1 (a review's find). Both paths name
    the line ends now; a CR inside a text with no column after it stays text."""
    path = tmp_path / "c.tsv"
    path.write_bytes(b"1\tfirst doc\r2\tsecond doc\r3\tthird doc\r")
    for bulk in (True, False):
        refused = outcome(path, "raise", bulk, columns)
        assert refused[0] == "error", refused
        text = str(refused[1])
        assert "line 1 of" in text and "lone CR" in text and "tr '\\r' '\\n'" in text, text
        skipped = outcome(path, "skip", bulk, columns)
        assert skipped[0] == "ok" and skipped[1] == [] and skipped[2] == 1, skipped
    path.write_bytes(b"1\tsee\rthis\n2\tb\n")
    kept = outcome(path, "raise", True)
    assert kept == outcome(path, "raise", False)
    assert kept[0] == "ok" and [row[1] for row in kept[1]] == ["see\rthis", "b"], kept  # type: ignore[index]
    # a stray CR in a middle column of an LF file is that column's text (a diff review: it
    # was refused as lone-CR line ends, whose fix would have cut the record in two)
    path.write_bytes(b"D1\thttp://a\tTitle with\ra CR\tbody one\nD2\thttp://b\tplain\tbody two\n")
    wide = ("id", "url", "title", "text")
    for bulk in (True, False):
        kept = outcome(path, "raise", bulk, wide)
        assert kept[0] == "ok", kept
        assert kept[1][0][2]["title"] == "Title with\ra CR", kept  # type: ignore[index]
