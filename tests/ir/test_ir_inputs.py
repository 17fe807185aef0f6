"""Queries, qrels and runs in their common formats; errors with file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import write
from lading.errors import SourceError
from lading.ir import read_qrels, read_queries, read_run


def test_queries_tsv_jsonl_beir(tmp_path: Path) -> None:
    assert read_queries(write(tmp_path / "q.tsv", "1\tfirst query\n2\tsecond\n")) == {
        "1": "first query",
        "2": "second",
    }
    beir = write(
        tmp_path / "queries.jsonl", '{"_id": "q1", "text": "beir query", "metadata": {}}\n'
    )
    assert read_queries(beir) == {"q1": "beir query"}
    with pytest.raises(SourceError, match=r"line 2 of .*q2\.tsv.*no tab"):
        read_queries(write(tmp_path / "q2.tsv", "1\tok\nbroken\n"))
    skipped = read_queries(write(tmp_path / "q3.tsv", "1\tok\nbroken\n"), on_error="skip")
    assert (dict(skipped), skipped.skipped) == ({"1": "ok"}, 1)


def test_qrels_trec_and_beir_header(tmp_path: Path) -> None:
    trec = write(tmp_path / "qrels.txt", "1 0 d1 2\n1 0 d2 0\n2 0 d1 1\n")
    assert read_qrels(trec) == {"1": {"d1": 2, "d2": 0}, "2": {"d1": 1}}
    beir = write(tmp_path / "test.tsv", "query-id\tcorpus-id\tscore\nq1\tdoc9\t1\n")
    assert read_qrels(beir) == {"q1": {"doc9": 1}}
    with pytest.raises(SourceError, match=r"line 2 .*relevance 'high' is not an integer"):
        read_qrels(write(tmp_path / "bad.txt", "1 0 d1 1\n1 0 d2 high\n"))
    with pytest.raises(SourceError, match=r"line 1 .*found 2 fields"):
        read_qrels(write(tmp_path / "bad2.txt", "1 d1\n"))


def test_a_query_or_judgement_given_twice_differently_is_refused_naming_both_lines(
    tmp_path: Path,
) -> None:
    """A query id twice kept its last text, a (query, document) judged twice its last grade,
    without a word; each is now an error naming the file and both lines (or, under
    ``on_error="skip"``, the later line skipped and counted). An exact repeat is taken as
    one: real TREC files carry them."""
    queries = write(tmp_path / "q.tsv", "1000\twhat is rust\n1001\tbread\n1000\tasyncio\n")
    with pytest.raises(SourceError, match=r"line 3 of .*q\.tsv: query id '1000' .*line 1"):
        read_queries(queries)
    kept = read_queries(queries, on_error="skip")
    assert (dict(kept), kept.skipped) == ({"1000": "what is rust", "1001": "bread"}, 1)
    jsonl = write(tmp_path / "q.jsonl", '{"_id": 1, "text": "a"}\n{"_id": "1", "text": "b"}\n')
    with pytest.raises(SourceError, match=r"line 2 of .*q\.jsonl: query id '1' .*line 1"):
        read_queries(jsonl)
    same = write(tmp_path / "same.tsv", "1\tfirst\n2\tsecond\n1\tfirst\n")
    assert read_queries(same) == {"1": "first", "2": "second"}

    qrels = write(tmp_path / "qrels.txt", "1000 0 d0 2\n1000 0 d1 1\n1000 0 d1 0\n")
    with pytest.raises(SourceError, match=r"line 3 of .*qrels\.txt: .*'1000'.*'d1'.*line 2"):
        read_qrels(qrels)
    graded = read_qrels(qrels, on_error="skip")
    assert (dict(graded), graded.skipped) == ({"1000": {"d0": 2, "d1": 1}}, 1)
    repeat = write(tmp_path / "repeat.txt", "1 0 d1 1\n1 0 d2 0\n1 Q0 d1 1\n")
    assert read_qrels(repeat) == {"1": {"d1": 1, "d2": 0}}


def test_trec_run_is_ordered_by_score(tmp_path: Path) -> None:
    run = read_run(write(tmp_path / "r.run", "1 Q0 a 2 5.0 x\n1 Q0 b 1 9.5 x\n2 Q0 c 1 1 x\n"))
    assert run == {"1": ["b", "a"], "2": ["c"]}
    with pytest.raises(SourceError, match=r"line 2 .*score 'high'"):
        read_run(write(tmp_path / "bad.run", "1 Q0 a 1 1.0 x\n1 Q0 b 2 high x\n"))


def test_tied_scores_are_ordered_as_trec_eval_orders_them(tmp_path: Path) -> None:
    """trec_eval and ir-measures read no rank column: tied scores go by document id,
    descending. lading went by rank, then id ascending, so its rerank candidates and its
    scores of the input run differed from ir-measures' on the same file (RR 1.0 against
    0.5 in a reviewer's run of two documents tied at 10.0)."""
    import ir_measures

    from lading.ir.rerank import evaluate

    lines = "q1 Q0 docA 1 10.0 x\nq1 Q0 docB 2 10.0 x\nq1 Q0 docC 3 9.0 x\n"
    path, qrels = write(tmp_path / "r.run", lines), write(tmp_path / "qrels", "q1 0 docA 1\n")
    run = read_run(path)
    assert run == {"q1": ["docB", "docA", "docC"]}
    theirs = ir_measures.calc_aggregate(
        [ir_measures.RR],
        ir_measures.read_trec_qrels(str(qrels)),
        ir_measures.read_trec_run(str(path)),
    )
    assert evaluate(read_qrels(qrels), run, ["RR"]) == {"RR": theirs[ir_measures.RR]} == {"RR": 0.5}


def test_hard_negatives_and_triples(tmp_path: Path) -> None:
    hard = read_run(
        write(tmp_path / "h.jsonl", '{"qid": 7, "query": "q", "pos": ["p"], "neg": ["n1", "n2"]}\n')
    )
    assert hard == {"7": ["n1", "n2"]} and hard.positives == {"7": ["p"]}
    triples = read_run(write(tmp_path / "t.tsv", "1\tp1\tn1\n1\tp1\tn2\n2\tp2\tn1\n"))
    assert triples == {"1": ["n1", "n2"], "2": ["n1"]}
    assert triples.positives == {"1": ["p1"], "2": ["p2"]}


def test_bad_ids_in_triples_and_jsonl_queries_are_named_or_counted(tmp_path: Path) -> None:
    """An empty or space-padded id in an MS MARCO triple, and a query id that is a JSON bool,
    float or container, were taken as ids (``""``, ``"p2 "``, ``"True"``, ``"['x']"``), no
    error, nothing counted: each is now an error naming file and line, or skipped and counted,
    as the hard-negative and store readers do."""
    triples = write(tmp_path / "t.tsv", "q1\tp1\tn1\nq1\t\tn2\nq2\tp2 \tn3\nq3\tp3\t\n")
    with pytest.raises(SourceError, match=r"line 2 of .*t\.tsv: .*empty id"):
        read_run(triples)
    kept = read_run(triples, on_error="skip")
    assert kept == {"q1": ["n1"]} and kept.skipped == 3 and kept.positives == {"q1": ["p1"]}
    queries = write(
        tmp_path / "q.jsonl",
        '{"_id": 1, "text": "a"}\n{"_id": true, "text": "b"}\n{"_id": 1.5, "text": "c"}\n'
        '{"_id": ["x"], "text": "d"}\n',
    )
    with pytest.raises(SourceError, match=r"line 2 of .*q\.jsonl: .*not a string or integer"):
        read_queries(queries)
    read = read_queries(queries, on_error="skip")
    assert read == {"1": "a"} and read.skipped == 3


def test_real_files_read(data_dir: Path) -> None:
    pool = data_dir / "ir/normalized/msmarco-passage-trecdl1920-pool"
    queries = read_queries(pool / "queries.tsv")
    qrels = read_qrels(pool / "qrels.txt")
    run = read_run(pool / "runs/dl19.bm25.run")
    hard = read_run(pool / "hard_negatives.jsonl")
    assert len(queries) == 97 and set(qrels) <= set(queries)
    assert sum(len(j) for j in qrels.values()) == 20646
    assert len(run) == 43 and all(len(r) == 100 for r in run.values())  # rank_llm top-100
    assert len(hard) == 97 and all(hard.positives[q] for q in hard)


def test_a_store_url_made_into_a_path_is_refused_naming_the_string(tmp_path: Path) -> None:
    """``Path("s3://b/x")`` is ``s3:/b/x``: it was opened as the local folder ``s3:/b/x``."""
    from lading.errors import LadingError
    from lading.ir.train import TrainConfig

    with pytest.raises(LadingError, match=r"store='s3://bucket/stores/msmarco'"):
        TrainConfig(
            queries=tmp_path / "q", qrels=tmp_path / "r", out=tmp_path,
            store=Path("s3://bucket/stores/msmarco"),
        )  # fmt: skip
    url = TrainConfig(queries=tmp_path / "q", qrels=tmp_path / "r", out=tmp_path,
                      store="s3://bucket/stores/msmarco")  # fmt: skip
    assert url.store == "s3://bucket/stores/msmarco"


def test_a_document_ranked_twice_for_a_query_is_refused_naming_both_lines(
    tmp_path: Path,
) -> None:
    """A TREC run listing d185 twice for query 1000 kept both: its last rank scored the input
    run (RR@10 0.5 where d185, relevant, is first) and the repeat took a ``--depth`` slot of
    the rerank. trec_eval refuses such runs; so does lading now, naming both lines (under
    ``on_error="skip"``, the later line skipped and counted). An exact repeat is one entry."""
    text = "1000 Q0 d185 1 9.0 bm25\n1000 Q0 d85 2 8.0 bm25\n1000 Q0 d185 3 7.0 bm25\n"
    run = write(tmp_path / "run.txt", text + "1000 Q0 d295 4 6.0 bm25\n")
    with pytest.raises(SourceError, match=r"line 3 of .*run\.txt: .*'1000'.*'d185'.*line 1"):
        read_run(run)
    kept = read_run(run, on_error="skip")
    assert (kept["1000"], kept.skipped) == (["d185", "d85", "d295"], 1)
    same = write(tmp_path / "same.txt", "1 Q0 a 1 2.0 t\n1 Q0 b 2 1.0 t\n1 Q0 a 1 2.0 t\n")
    assert read_run(same)["1"] == ["a", "b"]


@pytest.mark.parametrize("kind", ["queries", "qrels", "run"])
def test_many_conflicting_lines_are_skipped_reading_the_file_twice_not_once_each(
    tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each conflicting repeat names the line of its key's first occurrence. That line was
    found by reading the whole file again for every conflict: a file with many of them (a
    damaged .gz decodes to such lines) took minutes under ``on_error="skip"``."""
    import lading.ir.inputs as inputs

    n = 300
    line = {
        "queries": lambda i, v: f"q{i % 10}\tquery {i % 10} version {v}\n",
        "qrels": lambda i, v: f"q{i % 10} 0 d{i % 10} {v % 2}\n",
        "run": lambda i, v: f"q{i % 10} Q0 d{i % 10} 1 {v}.5 sys\n",
    }[kind]
    path = tmp_path / f"{kind}.txt"
    path.write_text("".join(line(i, i // 10) for i in range(n)))
    reads = []
    real = inputs._lines
    monkeypatch.setattr(inputs, "_lines", lambda file: reads.append(file) or real(file))
    read = {"queries": inputs.read_queries, "qrels": inputs.read_qrels, "run": inputs.read_run}
    got = read[kind](path, on_error="skip")
    assert got.skipped > 0  # the conflicts were found and counted
    assert len(reads) <= 2, f"{path} read {len(reads)} times"


def test_a_nan_score_in_a_run_is_refused_naming_the_line(tmp_path: Path) -> None:
    """``nan`` parsed as a float: the query's documents sorted in no order at all (NaN does
    not compare), silently, so its top ``depth`` (hard negatives, what rerank scores) was
    chance. Refused naming file and line, or skipped and counted."""
    lines = ["1 Q0 d1 1 0.1 t", "1 Q0 d2 2 nan t", "1 Q0 d3 3 0.9 t", "1 Q0 d4 4 0.5 t"]
    run = write(tmp_path / "nan.run", "\n".join(lines) + "\n")
    with pytest.raises(SourceError, match=r"line 2 of .*nan\.run.*nan"):
        read_run(run)
    skipped = read_run(run, on_error="skip")
    assert skipped["1"] == ["d3", "d4", "d1"] and skipped.skipped == 1


def test_a_beir_header_after_blank_lines_is_a_header(tmp_path: Path) -> None:
    qrels = write(tmp_path / "qrels.tsv", "\nquery-id\tcorpus-id\tscore\n1\td1\t1\n")
    assert read_qrels(qrels) == {"1": {"d1": 1}}


def test_a_file_with_old_mac_line_ends_is_refused_not_read_as_one_line(tmp_path: Path) -> None:
    """Lines ended by a bare CR were one line: query 2 lost, query 1's text ``foo\\r2\\tbar``,
    nothing said."""
    queries = tmp_path / "q.tsv"
    queries.write_bytes(b"1\tfoo\r2\tbar\r")
    with pytest.raises(SourceError, match=r"line 1 of .*q\.tsv.*carriage return"):
        read_queries(queries)
    # a stray CR inside a text of a file of LF lines is text, as it always was
    queries.write_bytes(b"q1\thello\rworld\nq2\tsecond\n")
    assert read_queries(queries) == {"q1": "hello\rworld", "q2": "second"}


def test_a_smart_qrels_file_is_refused_not_read_as_judgements_of_document_0(
    tmp_path: Path,
) -> None:
    """CACM's ``qrels.text`` is ``<qid> <docid> 0 0`` (SMART), four fields like TREC's
    ``<qid> <iteration> <docid> <rel>``: read as TREC, each query judged document "0"
    with relevance 0, and its other lines, the same (query, "0", 0) again, were taken as
    exact repeats: 796 judgements became 52 of a document "0", nothing said. A line whose
    (query, document, relevance) repeats an earlier one's under another iteration is
    refused naming both lines and the layout TREC expects."""
    smart = write(tmp_path / "qrels.text", "01 1410  0 0\n01 1572  0 0\n02 2434  0 0\n")
    with pytest.raises(
        SourceError, match=r"line 2 of .*qrels\.text: .*'01'.*'0'.*'1572'.*'1410'.*line 1"
    ):
        read_qrels(smart)
    skipped = read_qrels(smart, on_error="skip")
    assert skipped.skipped == 1
    # TREC files repeat lines, and spell iteration 0 as "0" or as a run's "Q0": one judgement
    same = write(tmp_path / "same.txt", "1 0 d1 1\n1 Q0 d1 1\n1 0 d1 1\n")
    assert read_qrels(same) == {"1": {"d1": 1}}


def test_real_smart_qrels_are_refused(data_dir: Path) -> None:
    """CACM's ``qrels.text`` (``01 1410 0 0``) and CISI's ``CISI.REL`` (``1 28 0 0.000000``,
    which named no fix: "relevance '0.000000' is not an integer") each say the layout."""
    with pytest.raises(SourceError, match=r"line 2 of .*qrels\.text: .*iteration"):
        read_qrels(data_dir / "ir/raw/cacm/qrels.text")
    with pytest.raises(SourceError, match=r"line 1 of .*CISI\.REL: .*'0\.000000'.*rewritten"):
        read_qrels(data_dir / "ir/raw/glasgow/cisi/CISI.REL")


def test_a_folder_given_for_a_file_is_named_a_folder_not_a_corrupt_stream(tmp_path: Path) -> None:
    """A BEIR folder passed as the queries (``lading train --queries scifact/``: the option
    takes folders) was "the compressed stream is corrupt or truncated ([Errno 21] Is a
    directory ...); re-download or recompress it": a fix that fixes nothing."""
    beir = tmp_path / "scifact"
    write(beir / "queries.jsonl", '{"_id": "1", "text": "q"}\n')
    for read in (read_queries, read_qrels, read_run):
        with pytest.raises(SourceError, match=r"scifact: a folder, not a file") as raised:
            read(beir)
        assert "corrupt" not in str(raised.value)


def test_a_query_of_no_text_is_refused_naming_the_line(tmp_path: Path) -> None:
    """``3<TAB>`` (a query cut at its tab) was read as the query ``""``: its groups trained
    the model on ``[CLS] [SEP] document [SEP]`` as relevant, and a rerank scored documents
    against nothing, nothing said. Such a line is refused naming file and line, or skipped
    and counted."""
    tsv = write(tmp_path / "q.tsv", "1\tfirst\n3\t\n4\t  \n5\tfifth\n")
    with pytest.raises(SourceError, match=r"line 2 of .*q\.tsv: query '3' has no text"):
        read_queries(tsv)
    kept = read_queries(tsv, on_error="skip")
    assert (dict(kept), kept.skipped) == ({"1": "first", "5": "fifth"}, 2)
    jsonl = write(tmp_path / "q.jsonl", '{"_id": "1", "text": "a"}\n{"_id": "2", "text": ""}\n')
    with pytest.raises(SourceError, match=r"line 2 of .*q\.jsonl: query '2' has no text"):
        read_queries(jsonl)


@pytest.mark.parametrize("kind", ["queries", "qrels", "run"])
def test_a_line_not_in_utf8_is_skipped_and_counted_under_skip(tmp_path: Path, kind: str) -> None:
    """A Latin-1 byte in one line raised under ``on_error="skip"`` too (the store build skips
    and counts such a record), and the error named no fix."""
    lines = {
        "queries": (b"1\tcaf\xe9\n", b"2\tbread\n"),
        "qrels": (b"1 0 d\xe9 1\n", b"2 0 d2 1\n"),
        "run": (b"1 Q0 d\xe9 1 2.0 t\n", b"2 Q0 d2 1 1.0 t\n"),
    }[kind]
    path = write(tmp_path / f"{kind}.txt", b"".join(lines))
    read = {"queries": read_queries, "qrels": read_qrels, "run": read_run}[kind]
    kept = read(path, on_error="skip")
    assert list(kept) == ["2"] and kept.skipped == 1
    with pytest.raises(SourceError, match=r"line 1 of .*: invalid UTF-8 .*on_error='skip'"):
        read(path)
    only = write(tmp_path / "only.txt", lines[0])
    assert read(only, on_error="skip").skipped == 1


def test_triples_of_many_negatives_a_query_keep_first_seen_order_once(tmp_path: Path) -> None:
    """A query's negatives (and positives) from id triples: each once, in first-seen order,
    however many the query has. They were a list searched at every triple, n²/2 comparisons
    for a query of n (20,000 negatives of one query read in 1.7 s against 0.04 s for 20,000
    queries of one: measured once when it was fixed; no timing here, speed is for
    benchmarks/): now ordered sets, with the order asserted here unchanged."""
    n = 20_000
    lines = [f"1\t{7 + i % 3}\t{(i * 7919) % n}\n" for i in range(n)]  # every id once
    lines += [f"1\t7\t{(i * 7919) % n}\n" for i in range(0, n, 97)]  # repeats, kept once
    path = write(tmp_path / "one.tsv", "".join(lines))
    read = read_run(path)
    assert read["1"] == [str((i * 7919) % n) for i in range(n)]
    assert read.positives == {"1": ["7", "8", "9"]}


def test_an_msmarco_run_is_read_as_a_ranking_not_as_triples(tmp_path: Path) -> None:
    """Pyserini's ``--output-format msmarco`` run (``qid<TAB>pid<TAB>rank``, MS MARCO's own
    dev runs) has three tab-separated fields, as id triples do: it was read as triples, each
    query's negatives the ranks "1", "2", "3" (in MS MARCO, passages 1, 2 and 3, for every
    query) and its ranked passages taken as positives, nothing said. Such a file is read as
    the ranking it is, by rank; a document ranked twice is refused naming both lines."""
    text = "1048585\t7187158\t1\n1048585\t7187157\t2\n1048585\t7187163\t3\n2\t8\t1\n2\t9\t2\n"
    run = read_run(write(tmp_path / "run.dev.tsv", text))
    assert run == {"1048585": ["7187158", "7187157", "7187163"], "2": ["8", "9"]}
    assert run.positives == {}
    shuffled = write(tmp_path / "out_of_order.tsv", "5\ta\t1\n5\tb\t2\n5\td\t4\n5\tc\t3\n")
    assert read_run(shuffled) == {"5": ["a", "b", "c", "d"]}
    twice = write(tmp_path / "twice.tsv", "5\ta\t1\n5\tb\t2\n5\ta\t3\n")
    with pytest.raises(SourceError, match=r"line 3 of .*twice\.tsv: query '5' ranks .*'a'.*line 1"):
        read_run(twice)
    short = write(tmp_path / "short.tsv", "1\ta\t1\n1\tb\t2\n1\n1\ta\t3\n")
    skipped = read_run(short, on_error="skip")  # (a line of one field, then a conflict)
    assert skipped == {"1": ["a", "b"]} and skipped.skipped == 2
    # id triples whose first negative is an id other than "1": triples as before
    triples = read_run(write(tmp_path / "t.tsv", "1\t7\t1\n1\t7\t5\n"))
    assert triples == {"1": ["1", "5"]} and triples.positives == {"1": ["7"]}


def test_a_queries_tsv_of_more_columns_is_refused_or_read_by_the_columns_named(
    tmp_path: Path,
) -> None:
    """``qid<TAB>text<TAB>type`` was read with "text<TAB>type" as the query's text: the
    category glued to every query a model was trained and reranked on, without a word. As the
    documents' TSV reader does, a line of more columns than named is refused, naming the
    file, the line, its columns and the columns= to pass; columns= reads the text from its
    column and leaves the others out."""
    tsv = write(tmp_path / "queries.tsv", "1\twhat is a cat\tfactoid\n2\tcats or dogs\tlist\n")
    with pytest.raises(SourceError) as raised:
        read_queries(tsv)
    said = str(raised.value)
    assert said.startswith(f"line 1 of {tsv}: "), said
    assert "found 3 columns ('1' | 'what is a cat' | 'factoid')" in said, said
    assert "columns=('id', 'text', 'field2')" in said and "--query-columns id,text,field2" in said
    kept = read_queries(tsv, on_error="skip")
    assert (dict(kept), kept.skipped) == ({}, 2)
    assert read_queries(tsv, columns=("id", "text", "type")) == {
        "1": "what is a cat",
        "2": "cats or dogs",
    }
    assert read_queries(tsv, columns=("id", "type", "text")) == {"1": "factoid", "2": "list"}
    short = write(tmp_path / "short.tsv", "1\twhat is a cat\tfactoid\n2\tcats or dogs\n")
    with pytest.raises(SourceError, match=r"line 2 of .*found 2 columns"):
        read_queries(short, columns=("id", "type", "text"))
    with pytest.raises(ValueError, match=r"must name both 'id' and 'text'"):
        read_queries(tsv, columns=("id", "query"))
    jsonl = write(tmp_path / "queries.jsonl", '{"_id": "q1", "text": "a"}\n')
    with pytest.raises(ValueError, match=r"queries.jsonl: columns=.* names a TSV's columns"):
        read_queries(jsonl, columns=("id", "text", "type"))


TOPICS = """<top>
<num>1</num><title>
MEASUREMENT OF DIELECTRIC
CONSTANT
</title>
</top>

<top>
<num> Number: 301
<title> Topic: International Organized Crime
<desc> Description:
Identify organizations that participate in international criminal activity.
</top>
"""


def test_trec_topics_give_each_topics_title(tmp_path: Path) -> None:
    """TREC topic files (``<top>``, ``<num>``, ``<title>``: Vaswani's query-text.trec, the
    TREC ad hoc topics) give each topic's title as its query (they were read as TSV: "line 1:
    expected qid<TAB>text, found no tab", with no word of the format). A topic without a title
    or cut off is named by its line, or skipped and counted."""
    topics = read_queries(write(tmp_path / "topics.trec", TOPICS))
    assert topics == {
        "1": "MEASUREMENT OF DIELECTRIC CONSTANT",
        "301": "International Organized Crime",
    }
    cut = write(tmp_path / "cut.trec", TOPICS + "<top>\n<num>7</num>\n</top>\n<top>\n<num>8\n")
    with pytest.raises(SourceError, match=r"line 14 of .*cut.trec: topic '7' has no <title>"):
        read_queries(cut)
    skipped = read_queries(cut, on_error="skip")
    assert len(skipped) == 2 and skipped.skipped == 2


def test_real_vaswani_topics_read(data_dir: Path) -> None:
    topics = read_queries(data_dir / "ir" / "raw" / "vaswani" / "query-text.trec")
    assert len(topics) == 93
    assert topics["3"].startswith("USE OF DIGITAL COMPUTERS IN THE DESIGN OF BAND PASS")
