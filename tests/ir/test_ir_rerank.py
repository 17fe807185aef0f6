"""Reranking with a trained cross-encoder: nothing of the run left out silently, the query
length the model was trained with, every measure evaluated at any relevance threshold."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

from conftest import RERANK_WORDS, tiny_reranker, write
from lading.errors import SkippedRecordsWarning, UnrankedQueriesWarning
from lading.ir import TrainingGroups, rerank

pytest.importorskip("tokenizers")
pytest.importorskip("transformers")
WORDS = RERANK_WORDS


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A store of 12 documents, a WordPiece tokenizer trained on them, a 2-layer BERT."""
    return tiny_reranker(tmp_path_factory.mktemp("rerank"))


def test_a_run_document_not_in_the_store_is_named_or_skipped_and_counted(
    tiny: dict[str, Any],
) -> None:
    """Run documents missing from the store and run queries without text were left out of
    the reranked run without a word (a query of 250 documents reranked as 217)."""
    queries = {"q1": "w1 w2 w3", "q2": "w4 w5"}
    run = {"q1": ["d1", "gone", "d2"], "q2": ["d3"], "q3": ["d4"]}
    args = (tiny["model"], tiny["store"], queries, run, tiny["tokenizer"])
    with pytest.raises(
        ValueError, match=r"1 run queries with no text .*'q3'.*1 documents .*'gone'"
    ):
        rerank(*args, max_length=96)
    with pytest.warns(SkippedRecordsWarning, match=r"1 run queries .* 1 documents"):
        scores = rerank(*args, max_length=96, on_missing="skip")
    assert {q: sorted(d) for q, d in scores.items()} == {"q1": ["d1", "d2"], "q2": ["d3"]}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # all of it there: nothing said
        rerank(*args[:3], {"q1": ["d1", "d2"]}, tiny["tokenizer"], max_length=96)


@pytest.mark.parametrize("kind", ["trec", "msmarco", "jsonl"])
def test_what_a_run_file_lacks_is_named_with_its_file_and_line(
    tiny: dict[str, Any], tmp_path: Path, kind: str
) -> None:
    """Read from a file, the first query without text and the first document not in the
    store are named with the run's path and line, for the user to look at (the error named
    the ids only: which of the runs given, and where, was theirs to find)."""
    from lading.ir import read_run

    queries = {"q1": "w1 w2 w3", "q2": "w4 w5"}
    rows = [("q1", "d1"), ("q1", "d2"), ("q2", "d3"), ("q2", "gone"), ("q9", "d4")]
    if kind == "trec":
        text = "".join(f"{q} Q0 {d} {i + 1} {9 - i} t\n" for i, (q, d) in enumerate(rows))
    elif kind == "msmarco":
        ranks = [1, 2, 1, 2, 1]
        text = "".join(f"{q}\t{d}\t{r}\n" for (q, d), r in zip(rows, ranks))
    else:
        text = "".join(f'{{"qid": "{q}", "pos": [], "neg": ["{d}"]}}\n' for q, d in rows)
    path = write(tmp_path / f"run.{kind}", text)
    run = read_run(path)
    with pytest.raises(ValueError) as raised:
        rerank(tiny["model"], tiny["store"], queries, run, tiny["tokenizer"], max_length=96)
    said = str(raised.value)
    assert f"'q9' (line 5 of {path})" in said, said
    assert f"'gone' of query 'q2' (line 4 of {path})" in said, said


def test_the_line_named_is_the_one_that_ranks_the_document(
    tiny: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each id is looked for in its own field: a TREC line whose rank and tag are "2" does
    not rank document "2", and a JSON line naming "b" among its ids is not query "b"'s. A
    run file gone since it was read leaves the error without a line, never another error;
    under on_missing="skip" the file is not read again (the review of the first version)."""
    from lading.ir import read_run

    queries = {"q1": "w1 w2 w3"}
    trec = write(tmp_path / "run.trec", "q1 Q0 d1 2 9.0 2\nq1 Q0 2 3 8.0 t\n")
    args = (tiny["model"], tiny["store"], queries)
    with pytest.raises(ValueError, match=rf"'2' of query 'q1' \(line 2 of {trec}\)"):
        rerank(*args, read_run(trec), tiny["tokenizer"], max_length=96)
    jsonl = write(
        tmp_path / "run.jsonl",
        '{"qid": "q1", "pos": ["b"], "neg": ["d1"]}\n{"qid": "b", "pos": [], "neg": ["d2"]}\n',
    )
    with pytest.raises(ValueError, match=rf"'b' \(line 2 of {jsonl}\)"):
        rerank(*args, read_run(jsonl), tiny["tokenizer"], max_length=96)
    run = read_run(trec)
    trec.unlink()
    with pytest.raises(ValueError, match=r"not in the store \(first: '2' of query 'q1'\);"):
        rerank(*args, run, tiny["tokenizer"], max_length=96)
    monkeypatch.setattr(type(run), "where", lambda *a: pytest.fail("read the run again"))
    with pytest.warns(SkippedRecordsWarning):
        rerank(*args, run, tiny["tokenizer"], max_length=96, on_missing="skip")


def test_the_query_length_the_model_was_trained_with_is_kept_and_used(
    tiny: dict[str, Any],
) -> None:
    """A model trained with --max-length 64 --max-query-length 16 could not be reranked at
    its own length (64 query tokens were always kept); its folder now says both."""
    from lading.ir.model import CrossEncoder, trained_inputs

    folder = tiny["tmp"] / "model"
    tiny["model"].save(folder, {"max_length": 64, "max_query_length": 16})
    assert trained_inputs(folder) == {"max_length": 64, "max_query_length": 16}
    assert trained_inputs(tiny["tmp"]) == {}  # a folder of no lading model
    model = CrossEncoder.from_pretrained(folder)
    long_query = {"q": " ".join(WORDS * 3)}
    args = (model, tiny["store"], long_query, {"q": ["d1", "d2"]}, tiny["tokenizer"])
    with pytest.raises(ValueError, match="leaves no room for a document"):
        rerank(*args, max_length=64)  # 64 query tokens of 64
    assert sorted(rerank(*args, max_length=64, max_query_length=16)["q"]) == ["d1", "d2"]


def test_lading_rerank_takes_the_lengths_from_the_model_folder(
    tiny: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from lading.cli import main

    folder = tmp_path / "model"
    tiny["model"].save(folder, {"max_length": 64, "max_query_length": 16})
    (folder / "tokenizer.json").write_bytes(Path(tiny["tokenizer"]).read_bytes())
    queries = write(tmp_path / "q.tsv", f"q\t{' '.join(WORDS * 3)}\n")
    run = write(tmp_path / "run.trec", "q Q0 d1 1 2.0 bm25\nq Q0 d2 2 1.0 bm25\n")
    out = tmp_path / "r"
    code = main(["rerank", "--model", str(folder), "--store", str(tiny["store"].path),
                 "--queries", str(queries), "--run", str(run), "--out", str(out)])  # fmt: skip
    assert code == 0, capsys.readouterr().err  # (was: 512 > the model's 128 positions)
    assert len(out.read_text().splitlines()) == 2


@pytest.mark.parametrize("name", ["NDCG@10", "Judged@10", "P@1", "AP"])
def test_every_measure_evaluates_at_a_relevance_threshold(name: str) -> None:
    """rel= was put on every measure but nDCG: ERR, Judged and NDCG (upper case) raised a
    bare KeyError: 'rel'. Only the measures that take a threshold get one (ERR is left out
    here: ir-measures computes it with a perl script)."""
    pytest.importorskip("ir_measures")
    from lading.ir.rerank import evaluate

    qrels = {"q": {"a": 2, "b": 1, "c": 0}}
    got = evaluate(qrels, {"q": ["b", "a", "c"]}, [name], min_relevance=2)
    assert 0.0 <= got[name] <= 1.0
    if name in ("P@1", "AP"):  # b (relevance 1) is not relevant at 2: a is found second
        assert got[name] == (0.0 if name == "P@1" else 0.5)


def test_evaluate_refuses_qrels_that_judge_none_of_the_runs_queries_and_warns_of_unranked() -> None:
    """The guide says judgements of another collection are refused in Python as on the CLI:
    ``evaluate`` gave nDCG@10 0.0 without a word (a review's find). Judged queries the run
    does not rank (a pool's qrels of two years for one year's run: 0.22 for 0.51) score 0 as
    ir-measures scores them, and are now warned, as the CLI's line says them."""
    pytest.importorskip("ir_measures")
    from lading.ir.rerank import evaluate

    run = {"q1": ["a", "b"], "q2": ["c"]}
    with pytest.raises(ValueError, match=r"judge none of the run's 2 queries \(first 'q1'\)"):
        evaluate({"x1": {"a": 1}, "x2": {"b": 1}}, run)
    with pytest.warns(UnrankedQueriesWarning, match=r"1 of the 2 judged queries .* \(first 'x9'\)"):
        got = evaluate({"q1": {"a": 1}, "x9": {"b": 1}}, run, ["P@1"])
    assert got["P@1"] == 0.5  # x9 scores 0, as before
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert evaluate({"q1": {"a": 1}, "q2": {"c": 1}}, run, ["P@1"])["P@1"] == 1.0


def test_a_query_whose_relevant_documents_are_none_in_the_store_is_counted(
    tiny: dict[str, Any],
) -> None:
    """Such a query was left out of the groups and of every count of the report."""
    qrels = {"q1": {"d1": 1}, "q2": {"gone": 1, "d2": 0}}
    queries = {"q1": "w1 w2", "q2": "w3"}
    with pytest.warns(UserWarning, match="1 query with none of its relevant documents in the"):
        groups = TrainingGroups(
            tiny["store"], queries, qrels, group_size=2, sampling="random", on_missing="skip"
        )
    assert groups.report.queries == 1 and groups.report.queries_without_relevant_in_store == 1


def test_rows_are_never_padded_past_max_length(tiny: dict[str, Any]) -> None:
    """Rows were padded to a multiple of 8 past max_length: a model of 100 positions, told
    max_length=100 (what the refusal of 128 suggested), got rows of 104 and crashed."""
    from lading.ir import CrossEncoderCollator

    collate = CrossEncoderCollator(tiny["store"], tiny["tokenizer"], max_length=70)
    items = [{"query": " ".join(WORDS * 2), "doc_ids": ["d1"], "doc_codes": [0]}]
    batch = collate(items)  # a query of 64 tokens, 3 of the document, 3 special: 70, not 72
    assert batch["input_ids"].shape[1] == 70 == int(batch["attention_mask"].sum())


def test_a_written_run_keeps_the_order_of_scores_that_differ_past_six_decimals(
    tmp_path: Path,
) -> None:
    """trec_eval and ir-measures rank a run file by the scores written (ties by docno, in
    reverse); written with six decimals, scores 3e-7 apart became a tie and the file ranked
    d2 above d1, where the model had d1 above d2."""
    import ir_measures

    from lading.ir.rerank import write_trec_run

    scores = {"q1": {"d1": 0.1234564, "d2": 0.1234561, "d0": -3.0e-9, "d3": -4.0e-9}}
    path = tmp_path / "run.txt"
    write_trec_run(scores, path)
    read = [(r.doc_id, r.score) for r in ir_measures.read_trec_run(str(path))]
    by_docno_reversed = sorted(read, key=lambda r: r[0], reverse=True)
    ranked = [d for d, _ in sorted(by_docno_reversed, key=lambda r: -r[1])]  # trec_eval's order
    assert ranked == ["d1", "d2", "d0", "d3"]
    assert dict(read) == scores["q1"]  # the scores as given, not rounded


def test_lading_rerank_reads_the_qrels_before_the_reranking(
    tiny: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A --qrels that does not read (CISI's ``1 28 0 0.000000``) was read after the whole
    run was reranked (hours at MS MARCO depth 100), to fail then; it fails first now."""
    pytest.importorskip("ir_measures")
    from lading.cli import main

    folder = tmp_path / "model"
    tiny["model"].save(folder, {"max_length": 64, "max_query_length": 16})
    (folder / "tokenizer.json").write_bytes(Path(tiny["tokenizer"]).read_bytes())
    queries = write(tmp_path / "q.tsv", "q\tw1 w2\n")
    run = write(tmp_path / "run.trec", "q Q0 d1 1 2.0 bm25\nq Q0 d2 2 1.0 bm25\n")
    qrels = write(tmp_path / "CISI.REL", "     1     28\t0\t0.000000\r\n")
    out = tmp_path / "r"
    code = main(["rerank", "--model", str(folder), "--store", str(tiny["store"].path),
                 "--queries", str(queries), "--run", str(run), "--out", str(out),
                 "--qrels", str(qrels)])  # fmt: skip
    assert code == 2 and "line 1 of" in capsys.readouterr().err
    assert not out.exists(), "the run was reranked before the qrels were read"


def test_a_query_rerank_left_out_is_left_out_of_the_measures(tiny: dict[str, Any]) -> None:
    """A run query without text, skipped under on_missing="skip", was scored 0 by evaluate
    (ir-measures scores a judged query missing from the run 0): one query of two skipped
    halved every measure of a run that found everything."""
    pytest.importorskip("ir_measures")
    from lading.ir.rerank import evaluate

    queries = {"q1": "w1 w2 w3", "q4": "w4"}
    run = {"q1": ["d1", "d2"], "q2": ["d3"], "q4": ["gone"]}  # q4: no document to rerank
    qrels = {"q1": {"d1": 1}, "q2": {"d3": 1}, "q3": {"d4": 1}, "q4": {"gone": 1}}
    with pytest.warns(SkippedRecordsWarning, match="1 run queries with no text"):
        scores = rerank(
            tiny["model"], tiny["store"], queries, run, tiny["tokenizer"], max_length=96,
            on_missing="skip",
        )  # fmt: skip
    assert scores.left_out == ["q2", "q4"]
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        got = evaluate(qrels, scores, ["R@100"])
    assert got == {"R@100": 0.5}  # q1 found, q3 not (judged, not in the run): q2, q4 out
    assert [str(w.message) for w in said if w.category is SkippedRecordsWarning] == [
        "evaluate left out 2 judged queries that rerank left out (first: 'q2'); the means are "
        "over 2 judged queries"
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error", SkippedRecordsWarning)  # nothing left out: not said
        with pytest.warns(UnrankedQueriesWarning, match="first 'q3'"):  # judged, not ranked
            assert evaluate(qrels, run, ["R@100"]) == {"R@100": 0.75}  # all found but q3


def test_lading_rerank_scores_both_runs_over_the_queries_it_reranked(
    tiny: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--on-missing skip printed measures where a skipped query counted 0 in both columns."""
    pytest.importorskip("ir_measures")
    from lading.cli import main

    folder = tmp_path / "model"
    tiny["model"].save(folder, {"max_length": 64, "max_query_length": 16})
    (folder / "tokenizer.json").write_bytes(Path(tiny["tokenizer"]).read_bytes())
    queries = write(tmp_path / "q.tsv", "q1\tw1 w2\n")
    run = write(tmp_path / "run.trec", "q1 Q0 d1 1 2.0 bm25\nq1 Q0 d2 2 1.0 bm25\n"
                "q2 Q0 d3 1 2.0 bm25\n")  # fmt: skip
    qrels = write(tmp_path / "qrels.txt", "q1 0 d1 1\nq2 0 d3 1\n")
    out = tmp_path / "r"
    code = main(["rerank", "--model", str(folder), "--store", str(tiny["store"].path),
                 "--queries", str(queries), "--run", str(run), "--out", str(out),
                 "--qrels", str(qrels), "--measures", "R@100", "--on-missing", "skip"])  # fmt: skip
    said = capsys.readouterr().out
    assert code == 0
    assert "R@100          1.0000     1.0000" in said, said  # q2 was 0 in both: 0.5000
    assert "over 1 judged query" in said and "'q2'" in said, said


def test_a_run_nothing_of_which_can_be_reranked_is_refused_even_when_skipping(
    tiny: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`lading rerank --on-missing skip` over a store of another collection scored no
    document, printed "reranked the top 5 of 53 queries", wrote the run less its top 5 and a
    table of NaN, and exited 0. Nothing to rerank is refused; what was reranked is counted."""
    from lading.cli import main

    queries = {"q1": "w1 w2", "q2": "w4"}
    other = {"q1": ["x1", "x2"], "q2": ["x3"]}  # the documents of another collection
    args = (tiny["model"], tiny["store"], queries, other, tiny["tokenizer"])
    with pytest.raises(ValueError, match=r"nothing of the run can be reranked .*'x1'"):
        rerank(*args, max_length=96, on_missing="skip")
    folder = tmp_path / "model"
    tiny["model"].save(folder, {"max_length": 64, "max_query_length": 16})
    (folder / "tokenizer.json").write_bytes(Path(tiny["tokenizer"]).read_bytes())
    q = write(tmp_path / "q.tsv", "q1\tw1 w2\n")
    run = write(tmp_path / "run.trec", "q1 Q0 d1 1 2.0 bm25\nq2 Q0 d3 1 2.0 bm25\n")
    common = ["rerank", "--model", str(folder), "--store", str(tiny["store"].path),
              "--queries", str(q), "--run", str(run), "--on-missing", "skip"]  # fmt: skip
    assert main([*common, "--out", str(tmp_path / "r")]) == 0  # q2 has no text: skipped
    assert "reranked the top 100 of 1 queries (of the run's 2)" in capsys.readouterr().out
    gone = write(tmp_path / "gone.trec", "q1 Q0 x1 1 2.0 bm25\n")
    assert main([*common[:-4], "--run", str(gone), "--on-missing", "skip",
                 "--out", str(tmp_path / "g")]) == 2  # fmt: skip
    assert "nothing of the run can be reranked" in capsys.readouterr().err
    assert not (tmp_path / "g").exists()


def test_lading_rerank_reads_a_wider_queries_tsv_by_query_columns(
    tiny: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A third column of the queries (a query type) was reranked as part of every query's
    text; it is refused naming the line and --query-columns, which reads it."""
    from lading.cli import main

    folder = tmp_path / "model"
    tiny["model"].save(folder, {"max_length": 64, "max_query_length": 16})
    (folder / "tokenizer.json").write_bytes(Path(tiny["tokenizer"]).read_bytes())
    queries = write(tmp_path / "q.tsv", "q\tw1 w2\tfactoid\n")
    run = write(tmp_path / "run.trec", "q Q0 d1 1 2.0 bm25\nq Q0 d2 2 1.0 bm25\n")
    out = tmp_path / "r"
    args = ["rerank", "--model", str(folder), "--store", str(tiny["store"].path),
            "--queries", str(queries), "--run", str(run), "--out", str(out)]  # fmt: skip
    assert main(args) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"line 1 of {queries}" in line and "--query-columns id,text,field2" in line, line
    assert not out.exists()
    assert main([*args, "--query-columns", "id,text,type"]) == 0
    assert len(out.read_text().splitlines()) == 2


def test_a_query_its_run_ranks_nothing_for_is_scored_not_left_out(tiny: dict[str, Any]) -> None:
    """A run query of no documents (a first stage that found nothing: ``{"q5": []}``) is not
    one rerank failed to rerank: it has its text and no document is missing. It was put in
    ``left_out`` (even under the default on_missing="raise", without a word), and evaluate
    then left it out of the means, raising them over a query the system found nothing for
    (ir-measures scores it 0)."""
    pytest.importorskip("ir_measures")
    from lading.ir.rerank import evaluate

    queries = {"q1": "w1 w2 w3", "q5": "w4"}
    run: dict[str, list[str]] = {"q1": ["d1", "d2"], "q5": []}
    qrels = {"q1": {"d1": 1}, "q5": {"d3": 1}}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing is missing: nothing said
        args = (tiny["model"], tiny["store"], queries, run, tiny["tokenizer"])
        scores = rerank(*args, max_length=96)
        assert scores.left_out == []
        assert evaluate(qrels, scores, ["R@100"]) == {"R@100": 0.5}  # q5 found nothing: 0
    assert scores["q5"] == {}


def test_what_the_docs_name_is_exported_from_lading_ir() -> None:
    """docs/cross-encoder.md names ``with_tail`` and ``GroupsWarning`` by ``lading.ir``."""
    import lading.ir
    from lading.ir.groups import GroupsWarning
    from lading.ir.rerank import with_tail

    assert lading.ir.with_tail is with_tail and lading.ir.GroupsWarning is GroupsWarning
    assert {"with_tail", "GroupsWarning"} <= set(lading.ir.__all__)


def test_a_top_document_rerank_could_not_score_stays_in_the_written_run_below_the_head() -> None:
    """Under ``--on-missing skip`` a top document not in the store was dropped from the
    written run (a reviewer's ``NOPE`` at rank 4 of 5: one line fewer than the input, and a
    relevant one so lost would lower recall). It stays, in the run's order, below the
    documents the model scored and above the tail: a reranker reorders, it does not drop."""
    from lading.ir.rerank import Reranked, with_tail

    scores = Reranked()
    scores["q1"] = {"d1": 0.5, "d3": 0.9}  # d2 (rank 2) was not in the store
    run = {"q1": ["d1", "d2", "d3", "d4", "d5"]}
    merged = with_tail(scores, run, depth=3)["q1"]
    assert sorted(merged, key=merged.__getitem__, reverse=True) == ["d3", "d1", "d2", "d4", "d5"]
    assert merged["d3"] == 0.9 and merged["d1"] == 0.5  # the model's scores, as they were
