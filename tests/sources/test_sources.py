"""Readers of TSV, JSONL, TREC and BEIR: records, deliberate edge cases, errors with file+line."""

from __future__ import annotations

import bz2
import gzip
import json
from pathlib import Path

import pytest

from conftest import write
from lading.errors import SourceError
from lading.sources import ParseOptions, SourceReader, detect_format, read_records


def ids_texts(path: Path, **kwargs: object) -> list[tuple[str, str]]:
    return [(r.id, r.text) for r in read_records(path, **kwargs)]  # type: ignore[arg-type]


def test_a_tsv_of_more_columns_than_named_is_refused_naming_them_and_the_fix(
    tmp_path: Path,
) -> None:
    """msmarco-docs.tsv's shape read as the default id<TAB>text would store the URL as the
    text and the body as a field ``col3``: refused at line 1, its columns and the fix named."""
    path = write(tmp_path / "docs.tsv", "D1\thttp://a.com/x\tTitle one\tBody one\n")
    with pytest.raises(SourceError) as refused:
        list(read_records(path))
    message = str(refused.value)
    assert "line 1 of" in message and "found 4 columns" in message
    assert "'D1' | 'http://a.com/x' | 'Title one' | 'Body one'" in message
    assert "--columns id,url,title,text" in message
    skipped = read_records(path, on_error="skip")
    assert list(skipped) == [] and "--columns" in skipped.skip_reasons[0]  # never half-read
    # a tab inside one text of a two-column file would cut that text at the tab
    path = write(tmp_path / "c.tsv", "1\thello world\n2\tsecond\tpart\n")
    with pytest.raises(SourceError, match=r"line 2 of .*found 3 columns \('2' \| 'second'"):
        list(read_records(path))
    # named columns: a line with more than named is refused the same way
    named = ParseOptions(columns=("id", "title", "text"))
    path = write(tmp_path / "t.tsv", "1\tT\tbody\n2\tT\tbody\tmore\n")
    with pytest.raises(SourceError, match=r"line 2 .*found 4 columns.*3 named"):
        list(read_records(path, parse=named))
    (first,) = read_records(write(tmp_path / "ok.tsv", "1\tT\tbody\n"), parse=named)
    assert (first.text, dict(first.fields)) == ("body", {"title": "T"})


def test_tsv_named_columns(tmp_path: Path) -> None:
    path = write(tmp_path / "docs.tsv", "D1\thttp://x\tTitle one\tBody one\n")
    (record,) = read_records(path, parse=ParseOptions(columns=("id", "url", "title", "text")))
    assert (record.id, record.text, dict(record.fields)) == (
        "D1",
        "Body one",
        {"url": "http://x", "title": "Title one"},
    )


def test_bom_and_crlf_are_dropped_blank_lines_ignored(tmp_path: Path) -> None:
    path = write(tmp_path / "c.tsv", b"\xef\xbb\xbf1\tone\r\n\r\n2\ttwo\r\n")
    assert ids_texts(path) == [("1", "one"), ("2", "two")]


def test_missing_tab_names_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path / "c.tsv", "1\tone\n2 two\n")
    with pytest.raises(
        SourceError, match=r"line 2 of .*c\.tsv: expected \"<id>\\t<text>\", found no tab"
    ):
        ids_texts(path)


def test_a_txt_file_of_texts_alone_is_told_how_it_is_read(tmp_path: Path) -> None:
    """``lading build docs.txt`` of one text a line said "expected <id>\\t<text>, found no
    tab", no word of why a .txt is a TSV nor what to do (a review's find)."""
    path = write(tmp_path / "docs.txt", "The first document.\nThe second.\n")
    with pytest.raises(SourceError, match=r"line 1 of .*docs\.txt: .*found no tab: .*\.txt.*an id"):
        ids_texts(path)


def test_invalid_utf8_raises_or_is_skipped_and_counted(tmp_path: Path) -> None:
    path = write(tmp_path / "c.tsv", b"1\tok\n2\tbad \xff byte\n3\tok too\n")
    with pytest.raises(SourceError, match=r"line 2 .*invalid UTF-8 at byte 6"):
        ids_texts(path)
    reader = read_records(path, on_error="skip")
    assert [r.id for r in reader] == ["1", "3"]
    assert reader.skipped == 1
    assert "line 2" in reader.skip_reasons[0]


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("\ttext", "empty id"),
        (" 5\ttext", "leading or trailing whitespace"),
        ("5 \ttext", "leading or trailing whitespace"),
    ],
)
def test_bad_ids_are_errors(tmp_path: Path, line: str, reason: str) -> None:
    path = write(tmp_path / "c.tsv", f"1\tok\n{line}\n")
    with pytest.raises(SourceError, match=f"line 2 .*{reason}"):
        ids_texts(path)


def test_jsonl_finds_id_and_text_fields_and_keeps_title(tmp_path: Path) -> None:
    lines = [
        {"doc_id": "a", "title": "T", "text": "x"},
        {"_id": "b", "contents": "y"},
        {"pid": 3, "body": "z"},
    ]
    path = write(tmp_path / "c.jsonl", "".join(json.dumps(o) + "\n" for o in lines))
    records = list(read_records(path))
    assert [(r.id, r.text) for r in records] == [("a", "x"), ("b", "y"), ("3", "z")]
    assert records[0].fields == {"title": "T"}


def test_jsonl_explicit_fields_and_errors(tmp_path: Path) -> None:
    path = write(tmp_path / "c.jsonl", '{"key": "k1", "passage": "p1", "id": "ignored"}\n')
    named = ParseOptions(id_field="key", text_field="passage")
    assert ids_texts(path, parse=named) == [("k1", "p1")]
    bad = write(tmp_path / "bad.jsonl", '{"id": "1", "text": "ok"}\n{"id": "2", "text": \n')
    with pytest.raises(SourceError, match=r"line 2 .*invalid JSON"):
        ids_texts(bad)
    no_text = write(tmp_path / "nt.jsonl", '{"id": "1", "words": "x"}\n')
    with pytest.raises(SourceError, match=r"line 1 .*no text field.*text_field="):
        ids_texts(no_text)
    bool_id = write(tmp_path / "bi.jsonl", '{"id": true, "text": "x"}\n')
    with pytest.raises(SourceError, match="must be a string or an integer"):
        ids_texts(bool_id)


TREC = """<DOC>
<DOCNO> FT911-1 </DOCNO>
<HEADLINE>A headline</HEADLINE>
<TEXT>
First part.
</TEXT>
<TEXT>Second part.</TEXT>
</DOC>
<DOC>
<DOCNO>2</DOCNO>
plain body
  two lines
</DOC>
"""


def test_trec_text_elements_title_and_plain_bodies(tmp_path: Path) -> None:
    records = list(read_records(write(tmp_path / "d.trec", TREC)))
    assert [r.id for r in records] == ["FT911-1", "2"]
    assert records[0].text == "First part.\n\nSecond part."
    assert records[0].fields == {"title": "A headline"}
    assert records[1].text == "plain body\n  two lines"


def test_trec_truncated_and_stray_text_are_errors(tmp_path: Path) -> None:
    cut = write(tmp_path / "cut.trec", TREC + "<DOC>\n<DOCNO>3</DOCNO>\nno end\n")
    with pytest.raises(SourceError, match=r"line 14 .*no </DOC> before the end"):
        ids_texts(cut)
    stray = write(tmp_path / "stray.trec", "junk\n" + TREC)
    with pytest.raises(SourceError, match=r"line 1 .*expected <DOC>"):
        ids_texts(stray)


@pytest.mark.parametrize("suffix", [".gz", ".bz2", ".zst"])
def test_compressed_files_read_like_plain_ones(tmp_path: Path, suffix: str) -> None:
    data = b"1\tone\n2\ttwo\n"
    if suffix == ".gz":
        payload = gzip.compress(data)
    elif suffix == ".bz2":
        payload = bz2.compress(data)
    else:
        zstandard = pytest.importorskip("zstandard")
        payload = zstandard.ZstdCompressor().compress(data)
    path = write(tmp_path / f"c.tsv{suffix}", payload)
    assert detect_format(path) == "tsv"
    assert ids_texts(path) == [("1", "one"), ("2", "two")]


def test_truncated_gzip_is_an_error_never_a_shorter_corpus(tmp_path: Path) -> None:
    payload = gzip.compress(b"".join(b"%d\tpassage number %d\n" % (i, i) for i in range(2000)))
    path = write(tmp_path / "c.tsv.gz", payload[: len(payload) // 2])
    with pytest.raises(SourceError, match="corrupt or truncated"):
        ids_texts(path)


def test_beir_folder_and_format_detection(tmp_path: Path) -> None:
    write(tmp_path / "beir" / "corpus.jsonl", '{"_id": "d1", "title": "t", "text": "body"}\n')
    assert detect_format(tmp_path / "beir") == "beir"
    assert ids_texts(tmp_path / "beir") == [("d1", "body")]
    assert detect_format("irds:msmarco-passage") == "irds"
    with pytest.raises(ValueError, match="pass format="):
        detect_format(tmp_path / "corpus.weird")
    with pytest.raises(ValueError, match="unknown format 'csv'"):
        SourceReader(tmp_path / "beir", format="csv")


def test_a_bom_is_dropped_by_every_line_reader(tmp_path: Path) -> None:
    """A UTF-8 BOM (what Windows editors write) never reaches an id or a text: documents in
    each format, queries, qrels, runs and LM text all go through the one line reader."""
    from lading import read_records
    from lading.ir import read_qrels, read_queries, read_run
    from lading.lm.texts import iter_texts

    bom = b"\xef\xbb\xbf"
    docs = {
        "d.tsv": b"d1\tfirst doc\nd2\tsecond\n",
        "d.jsonl": b'{"id": "d1", "text": "first doc"}\n{"id": "d2", "text": "second"}\n',
        "d.trec": b"<DOC>\n<DOCNO>d1</DOCNO>\nfirst doc\n</DOC>\n"
        b"<DOC>\n<DOCNO>d2</DOCNO>\nsecond\n</DOC>\n",
    }
    for name, data in docs.items():
        records = list(read_records(write(tmp_path / name, bom + data)))
        assert [(r.id, r.text.strip()) for r in records] == [
            ("d1", "first doc"),
            ("d2", "second"),
        ], name
    assert read_queries(write(tmp_path / "q.tsv", bom + b"q1\twhat is it\n")) == {
        "q1": "what is it"
    }
    assert read_qrels(write(tmp_path / "qrels", bom + b"q1 0 d1 1\n")) == {"q1": {"d1": 1}}
    run = read_run(write(tmp_path / "r.run", bom + b"q1 Q0 d2 1 9.5 bm25\n"))
    assert list(run) == ["q1"] and list(run["q1"]) == ["d2"]
    text = write(tmp_path / "t.txt", bom + b"alpha beta\n\ngamma\n")
    assert list(iter_texts(text, "blank")) == ["alpha beta", "gamma"]


def test_a_bom_mid_file_is_kept_when_a_part_starts_at_its_line(tmp_path: Path) -> None:
    """Only byte 0 of the file can hold the BOM that is dropped: a BOM opening a later line
    (``cat a.tsv b.tsv``, b.tsv written by a Windows editor) is read as the whole-file reader
    reads it by a part (a shard's range) that starts at that line: TSV keeps it in the id, on
    the bulk and the per-line path; JSONL refuses the line."""
    bom = b"\xef\xbb\xbf"
    tsv = write(tmp_path / "c.tsv", bom + b"d0\tzero\nd1\tone\n" + bom + b"d2\ttwo\nd3\tx\n")
    at = tsv.read_bytes().index(bom + b"d2")
    whole = SourceReader(tsv)
    assert [r.id for r in whole] == ["d0", "d1", "\ufeffd2", "d3"]
    part = SourceReader(tsv, span=(at, 10**6))
    assert [r.id for r in part] == ["\ufeffd2", "d3"]
    assert [r.id for r, _, _ in part.iter_numbered()] == ["\ufeffd2", "d3"]
    bulk = [b.ids.values() for b in SourceReader(tsv, span=(at, 10**6)).iter_bulk()]
    assert [i for ids in bulk for i in ids] == ["\ufeffd2".encode(), b"d3"]
    assert [r.id for r in SourceReader(tsv, span=(0, at))] == ["d0", "d1"]
    jsonl = write(
        tmp_path / "c.jsonl", b'{"id": "a", "text": "x"}\n' + bom + b'{"id": "b", "text": "y"}\n'
    )
    at = jsonl.read_bytes().index(bom)
    for span in (None, (at, 10**6)):
        with pytest.raises(SourceError, match=r"line 2 of .*Unexpected UTF-8 BOM"):
            list(SourceReader(jsonl, span=span))


def test_an_ir_datasets_download_that_fails_is_one_line_naming_the_dataset_and_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no network ``lading build irds:vaswani`` printed ir_datasets' 40-line traceback
    ending in ``RuntimeError('All download sources failed', [...])``; now one line names the
    dataset, what was tried and the fix, for documents and queries, and no store is left."""
    pytest.importorskip("ir_datasets")
    import lading
    import lading.sources.reader as reader
    from lading.errors import LadingError
    from lading.ir import read_queries

    class Url:
        url = "https://mirror.example/vaswani.tar.gz"

    def offline() -> object:
        raise RuntimeError("All download sources failed", [(Url(), OSError("no route"))])

    class Dataset:
        def has_docs(self) -> bool:
            return True

        def docs_iter(self) -> object:
            return iter(offline, None)  # (raises on the first read, as ir_datasets does)

        queries_iter = docs_iter

    class Irds:
        @staticmethod
        def load(dataset_id: str) -> Dataset:
            return Dataset()

    monkeypatch.setattr(reader, "import_ir_datasets", lambda: Irds)
    monkeypatch.setattr("lading.ir.inputs.import_ir_datasets", lambda: Irds)
    message = r"irds:vaswani: ir_datasets could not download its {} \(tried https://mirror"
    with pytest.raises(LadingError, match=message.format("documents")) as e:
        lading.build_store("irds:vaswani", tmp_path / "s", progress=False)
    assert "IR_DATASETS_HOME" in str(e.value) and not (tmp_path / "s").exists()
    with pytest.raises(LadingError, match=message.format("queries")):
        read_queries("irds:vaswani")


@pytest.mark.parametrize("bad", ["a\tb", "a\nb", "a\rb"])
def test_an_id_holding_a_tab_or_a_line_break_is_refused_in_jsonl_and_parquet(
    tmp_path: Path, bad: str
) -> None:
    """A JSONL or parquet id of ``a<TAB>b`` was stored, yet no qrels, run or TSV line can name
    it (each is split there): every judgement of it missed, nothing said. It is refused
    naming the record and the fix; under ``skip`` it is counted."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    ids = ["d1", bad, "d3"]
    jsonl = write(
        tmp_path / "c.jsonl", "".join(json.dumps({"id": d, "text": f"t {d}"}) + "\n" for d in ids)
    )
    parquet = tmp_path / "c.parquet"
    pq.write_table(pa.table({"id": ids, "text": [f"t {d}" for d in ids]}), parquet)
    for path, where in ((jsonl, "line 2 of"), (parquet, "row 2:")):
        with pytest.raises(SourceError, match="holds a tab or a line break") as e:
            list(read_records(path))
        assert where in str(e.value), str(e.value)
        reader = read_records(path, on_error="skip")
        kept = [r.id for r in reader]
        assert kept == ["d1", "d3"] and reader.skipped == 1
