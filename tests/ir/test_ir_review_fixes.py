"""Fixes of a review of lading.ir: reranking a store tokenized by another tokenizer, MS MARCO
runs ranked from 0, id triples not kept line by line, qrels layouts told apart, tied scores
ranked one way everywhere, and non-finite scores refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conftest import tiny_reranker, write
from lading.errors import SourceError
from lading.ir import read_qrels, read_run

# ------------------------------------------------------------------ MS MARCO runs and triples


def test_an_msmarco_run_ranked_from_0_is_read_as_a_run(tmp_path: Path) -> None:
    """``qid<TAB>pid<TAB>rank`` with ranks from 0 was read as id triples: every query's
    negatives the ranks "0", "1", "2" and its ranked passages taken as positives, nothing
    said. Ranks counting up by one from 0, like from 1, make the file a run."""
    text = "1\td5\t0\n1\td3\t1\n1\td9\t2\n2\tdx\t0\n2\tdy\t1\n"
    run = read_run(write(tmp_path / "run0.tsv", text))
    assert run == {"1": ["d5", "d3", "d9"], "2": ["dx", "dy"]} and run.positives == {}
    one_each = read_run(write(tmp_path / "one_each.tsv", "1\td5\t0\n2\td7\t0\n3\td8\t0\n"))
    assert one_each == {"1": ["d5"], "2": ["d7"], "3": ["d8"]} and one_each.positives == {}
    shuffled = write(tmp_path / "shuffled.tsv", "5\tb\t1\n5\ta\t0\n5\td\t3\n5\tc\t2\n")
    assert read_run(shuffled) == {"5": ["a", "b", "c", "d"]}


def test_a_run_whose_ranks_do_not_start_at_0_or_1_is_refused_not_read_as_triples(
    tmp_path: Path,
) -> None:
    """Ranks counting up from 11 (the second page of a run) would be read as id triples,
    the ranks as negatives; the file is refused naming its line and what to do."""
    paged = write(tmp_path / "paged.tsv", "1\tdA\t11\n1\tdB\t12\n1\tdC\t13\n2\tdD\t11\n")
    with pytest.raises(SourceError, match=r"line 1 of .*paged\.tsv: .*11, 12.*start at 11.*renum"):
        read_run(paged)
    with pytest.raises(SourceError, match=r"MS MARCO run"):  # under skip too: not a bad line
        read_run(paged, on_error="skip")
    # triples whose negatives are ids (even integers that do not count up) stay triples
    triples = read_run(write(tmp_path / "t.tsv", "1\t7\t1\n1\t7\t5\n1\t8\t44\n2\t9\t3\n"))
    assert triples == {"1": ["1", "5", "44"], "2": ["3"]}
    assert triples.positives == {"1": ["7", "8"], "2": ["9"]}
    # two negatives one apart are not enough to call a file a run: triples, as before
    pair = read_run(write(tmp_path / "p.tsv", "1\t7\t3\n1\t7\t4\n2\t8\t9\n"))
    assert pair == {"1": ["3", "4"], "2": ["9"]}


def test_id_triples_are_not_kept_line_by_line(tmp_path: Path) -> None:
    """``read_run`` kept every triple as a tuple of three strings in ``run.triples`` (183 B
    a line, 68 GiB for the 397M lines of qidpidtriples.train.full), which nothing reads:
    the run keeps each query's negatives and positives, once each."""
    run = read_run(write(tmp_path / "t.tsv", "1\tp1\tn1\n1\tp1\tn2\n2\tp2\tn1\n1\tp3\tn1\n"))
    assert not hasattr(run, "triples")
    assert run == {"1": ["n1", "n2"], "2": ["n1"]}
    assert run.positives == {"1": ["p1", "p3"], "2": ["p2"]}


# ------------------------------------------------------------------------------------ qrels

SMART_CRANFIELD = "1 184 2\n1 29 2\n1 31 3\n2 12 4\n2 400 -1\n3 5 1\n"


def test_a_three_field_qrels_file_without_the_beir_header_is_refused(tmp_path: Path) -> None:
    """Any line of three fields was read as BEIR: Cranfield's SMART cranqrel (``qid docid
    code``, code 1 the most relevant .. 4 the least, -1 not relevant) read with its grades
    inverted, nothing said. Without the BEIR header three fields are refused, naming both
    layouts lading reads, and SMART where the codes look like its codes."""
    cran = write(tmp_path / "cranqrel", SMART_CRANFIELD)
    with pytest.raises(SourceError, match=r"line 1 of .*cranqrel: .*3 fields.*TREC.*BEIR") as e:
        read_qrels(cran)
    assert "SMART" in str(e.value) and "5 - " in str(e.value)
    with pytest.raises(SourceError, match="no BEIR header"):
        read_qrels(cran, on_error="skip")  # the file's layout, not one bad line
    plain = write(tmp_path / "plain.txt", "q1\td1\t1\nq1\td2\t0\n")
    with pytest.raises(SourceError, match=r"line 1 of .*no BEIR header") as e:
        read_qrels(plain)
    assert "SMART" not in str(e.value)  # grades 0 and 1: nothing like SMART's codes
    beir = write(tmp_path / "beir.tsv", "query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\t0\n")
    assert read_qrels(beir) == {"q1": {"d1": 1, "d2": 0}}


def test_a_qrels_file_mixing_three_and_four_field_lines_is_refused(tmp_path: Path) -> None:
    """A TREC line without its iteration (``1 d2 1``) was read as a BEIR line, and one
    without its grade (``1 0 d2``) said "relevance 'd2' is not an integer": both are a line
    of three fields in a file of four, named as such with both layouts."""
    no_iteration = write(tmp_path / "no_iter.txt", "1 0 d1 1\n1 d2 1\n")
    with pytest.raises(SourceError, match=r"line 2 of .*no_iter\.txt: 3 fields.*line 1.*4") as e:
        read_qrels(no_iteration)
    assert "iteration" in str(e.value) and "BEIR" in str(e.value)
    no_grade = write(tmp_path / "no_grade.txt", "1 0 d1 1\n1 0 d2\n")
    with pytest.raises(SourceError, match=r"line 2 of .*3 fields.*grade") as e:
        read_qrels(no_grade)
    assert "is not an integer" not in str(e.value)
    skipped = read_qrels(write(tmp_path / "one_bad.txt", "1 0 d1 1\n1 d2 1\n2 0 d3 2\n"), "skip")
    assert (dict(skipped), skipped.skipped) == ({"1": {"d1": 1}, "2": {"d3": 2}}, 1)
    beir = write(tmp_path / "mixed.tsv", "query-id\tcorpus-id\tscore\nq1\td1\t1\nq1 0 d2 1\n")
    with pytest.raises(SourceError, match=r"line 3 of .*4 fields.*line 2.*3"):
        read_qrels(beir)


# ------------------------------------------------------------------------------------- ties


def test_a_written_run_ranks_tied_scores_as_trec_eval_does(tmp_path: Path) -> None:
    """The rank column broke tied scores by doc id ascending, trec_eval (and lading's own
    read_run) by doc id descending: the file's ranks said a, b where every evaluator ranked
    b, a."""
    from lading.ir.rerank import write_trec_run

    path = tmp_path / "ties.trec"
    write_trec_run({"q": {"a": 1.0, "c": 0.5, "b": 1.0}}, path)
    lines = [line.split() for line in path.read_text().splitlines()]
    assert [(f[2], f[3]) for f in lines] == [("b", "1"), ("a", "2"), ("c", "3")]
    assert read_run(path)["q"] == ["b", "a", "c"]


def test_every_measure_ranks_tied_scores_one_way(tmp_path: Path) -> None:
    """ir-measures computes RR@10 with one provider (ties by doc id ascending) and RR, P,
    nDCG with another (descending): evaluate gave the same scores RR@10 = 1.0 and RR = 0.5.
    Every measure now ranks ties as trec_eval does, as the run file is read back."""
    pytest.importorskip("ir_measures")
    from lading.ir.rerank import Reranked, evaluate, write_trec_run

    scores = Reranked()
    scores.update({"q": {"a": 1.0, "b": 1.0, "c": 0.5}})
    qrels = {"q": {"a": 1}}
    names = ["RR@10", "RR", "P@1", "nDCG@1", "nDCG@10"]
    got = evaluate(qrels, scores, names)
    assert got["RR@10"] == got["RR"] == 0.5 and got["P@1"] == 0.0
    write_trec_run(scores, tmp_path / "ties.trec")
    assert evaluate(qrels, read_run(tmp_path / "ties.trec"), names) == got


# ------------------------------------------------------------------------- reranking


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """tiny_reranker's store, tokenizer and model, plus stores of the same documents
    tokenized by another tokenizer (of 150 ids, the model's has 200) and by the model's."""
    pytest.importorskip("tokenizers")
    pytest.importorskip("transformers")
    import lading
    from lading.stores.tokens import save_tokenizer, train_tokenizer

    made = tiny_reranker(tmp_path_factory.mktemp("review_fixes"))
    texts = [line.split("\t")[1] for line in (made["tmp"] / "docs.tsv").read_text().splitlines()]
    other = save_tokenizer(train_tokenizer(texts, "wordpiece", 150), made["tmp"] / "other.json")
    made["other_store"] = lading.build_store(
        made["tmp"] / "docs.tsv", made["tmp"] / "other_store", tokenizer=other, progress=False
    )
    made["own_store"] = lading.build_store(
        made["tmp"] / "docs.tsv", made["tmp"] / "own", tokenizer=made["tokenizer"], progress=False
    )
    return made


QUERIES = {"q1": "w1 w2 w3", "q2": "w4 w5"}
RUN = {"q1": ["d1", "d2", "d3"], "q2": ["d4", "d5"]}


def test_rerank_tokenizes_the_text_of_a_store_tokenized_by_another_tokenizer(
    tiny: dict[str, Any],
) -> None:
    """A model trained with --no-use-tokens on a store tokenized by another tokenizer could
    not rerank on that store: rerank took no use_tokens. It does now, and the refusal
    without it names use_tokens=False, with the flag that both commands now have."""
    from lading.ir import rerank

    model, tok = tiny["model"], tiny["tokenizer"]
    with pytest.raises(ValueError, match=r"another tokenizer.*use_tokens=False \(--no-use-tok"):
        rerank(model, tiny["other_store"], QUERIES, RUN, tok, max_length=96)
    got = rerank(model, tiny["other_store"], QUERIES, RUN, tok, max_length=96, use_tokens=False)
    from_text = rerank(model, tiny["store"], QUERIES, RUN, tok, max_length=96)  # no tokens
    assert sorted(got) == ["q1", "q2"] and sorted(got["q1"]) == ["d1", "d2", "d3"]
    assert all(got[q] == pytest.approx(from_text[q]) for q in got)  # the text path's scores
    with pytest.raises(ValueError, match="has no tokens"):
        rerank(model, tiny["store"], QUERIES, RUN, tok, max_length=96, use_tokens=True)
    own = rerank(model, tiny["own_store"], QUERIES, RUN, tok, max_length=96)  # its tokens
    assert all(own[q] == pytest.approx(from_text[q]) for q in own)


def test_a_model_folder_keeps_whether_it_read_the_stores_tokens(
    tiny: dict[str, Any], tmp_path: Path
) -> None:
    """lading.json keeps use_tokens beside the lengths (trained_inputs gives it back), for
    lading rerank to default to it."""
    from lading.ir.model import trained_inputs

    folder = tmp_path / "model"
    tiny["model"].save(folder, {"max_length": 64, "max_query_length": 16, "use_tokens": False})
    assert trained_inputs(folder) == {"max_length": 64, "max_query_length": 16, "use_tokens": False}
    tiny["model"].save(folder, {"max_length": 64, "max_query_length": 16})
    assert trained_inputs(folder) == {"max_length": 64, "max_query_length": 16}


def test_non_finite_scores_are_refused_naming_the_query_and_document(
    tiny: dict[str, Any], tmp_path: Path
) -> None:
    """A model that scores NaN (a diverged fp16 run) had 'nan' written to the run file for
    every document, nothing said; read_run then refused the file. rerank refuses the first
    non-finite score, naming its query and document and the likely cause."""
    import torch

    from lading.ir import rerank
    from lading.ir.model import CrossEncoder, tiny_bert_config
    from lading.ir.rerank import write_trec_run

    model = CrossEncoder.from_config(tiny_bert_config(200, 128))
    for bad in (float("nan"), float("inf")):
        with torch.no_grad():
            model.classifier.bias.fill_(bad)
        with pytest.raises(ValueError, match=r"query 'q1' .*document 'd1'.*fp32.*checkpoint"):
            rerank(model, tiny["store"], QUERIES, RUN, tiny["tokenizer"], max_length=96)
    with pytest.raises(ValueError, match=r"query 'q' .*document 'b'.*NaN"):
        write_trec_run({"q": {"a": 1.0, "b": float("nan")}}, tmp_path / "nan.trec")
    assert not (tmp_path / "nan.trec").exists()


@pytest.mark.parametrize("header", ["qid\tquery", "id\ttext", "query_id\ttext"])
def test_a_queries_header_line_is_refused_not_read_as_a_query(tmp_path: Path, header: str) -> None:
    """``qid<TAB>query`` first was kept as a query of id "qid" (the documents' reader refused
    ``id<TAB>text``): now both refuse a line that names the columns, naming it and the
    line; under ``on_error="skip"`` it is skipped and counted."""
    from lading.ir import read_queries

    path = tmp_path / "queries.tsv"
    path.write_text(f"{header}\n1\tfoo bar\n2\tbaz\n")
    with pytest.raises(SourceError, match=r"line 1 of .*a header line \(column names: "):
        read_queries(path)
    kept = read_queries(path, on_error="skip")
    assert dict(kept) == {"1": "foo bar", "2": "baz"} and kept.skipped == 1
