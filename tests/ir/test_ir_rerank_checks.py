"""``lading rerank --qrels``: judgements of other queries are refused, judged queries without
a ranking said; the input run is scored as given and the reranked run keeps its tail."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import tiny_reranker, write

pytest.importorskip("tokenizers")
pytest.importorskip("transformers")
pytest.importorskip("ir_measures")


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A store of 12 documents and a model folder (2-layer BERT, WordPiece tokenizer)."""
    tiny = tiny_reranker(tmp_path_factory.mktemp("rerank_checks"))
    folder = tiny["tmp"] / "model"
    tiny["model"].save(folder, {"max_length": 64, "max_query_length": 16})
    (folder / "tokenizer.json").write_bytes(Path(tiny["tokenizer"]).read_bytes())
    return {"store": tiny["store"].path, "model": folder}


def _rerank(model: dict[str, Path], tmp: Path, run: str, qrels: str, *extra: str) -> list[str]:
    files = {
        "queries": write(tmp / "q.tsv", "q1\tw1 w2\nq2\tw3 w4\nq3\tw5\n"),
        "run": write(tmp / "in.run", run),
        "qrels": write(tmp / "judged.qrels", qrels),
    }
    args = ["rerank", "--model", str(model["model"]), "--store", str(model["store"]),
            "--queries", str(files["queries"]), "--run", str(files["run"]),
            "--qrels", str(files["qrels"]), "--out", str(tmp / "out.run"), *extra]  # fmt: skip
    return [str(files["run"]), str(files["qrels"]), *args]


def test_qrels_of_none_of_the_run_queries_are_refused_naming_both_files(
    model: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A --qrels of other queries printed every measure 0.0000 in both columns, no word."""
    from lading.cli import main

    run_file, qrels_file, *args = _rerank(
        model, tmp_path, "q1 Q0 d1 1 2.0 bm25\nq2 Q0 d2 1 2.0 bm25\n", "x7 0 d1 1\nx8 0 d2 1\n"
    )
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert run_file in err and qrels_file in err, err
    assert "none of the 2 queries" in err and "'q1'" in err and "'x7'" in err, err
    assert not (tmp_path / "out.run").exists()  # refused before the reranking


def test_judged_queries_the_run_does_not_rank_are_said(
    model: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """They score 0 in both columns (as documented), but nothing said how many there were."""
    from lading.cli import main

    run_file, qrels_file, *args = _rerank(
        model, tmp_path, "q1 Q0 d1 1 2.0 bm25\n", "q1 0 d1 1\nq2 0 d2 1\nq3 0 d3 1\n",
        "--measures", "R@100",
    )  # fmt: skip
    assert main(args) == 0
    out = capsys.readouterr().out
    line = next((x for x in out.splitlines() if "no ranking" in x), out)
    assert "2 of the 3 judged queries" in line and "'q2'" in line, line
    assert run_file in line and qrels_file in line and "score 0" in line, line
    assert "R@100          0.3333     0.3333" in out, out


def test_the_input_run_is_scored_as_given_and_the_reranked_run_keeps_its_tail(
    model: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--depth 1 scored the input run cut to its first document (R@100 0.0 for a run that
    found the relevant one at rank 3), and the reranked run was written with 1 line."""
    from lading.cli import main

    run = "q1 Q0 d5 1 3.0 bm25\nq1 Q0 d6 2 2.0 bm25\nq1 Q0 d1 3 1.0 bm25\n"
    _, _, *args = _rerank(model, tmp_path, run, "q1 0 d1 1\n", "--measures", "R@100",
                          "--depth", "1")  # fmt: skip
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "R@100          1.0000     1.0000" in out, out
    assert "below rank 1" in out, out
    written = [line.split() for line in (tmp_path / "out.run").read_text().splitlines()]
    assert [(x[2], x[3]) for x in written] == [("d5", "1"), ("d6", "2"), ("d1", "3")]
    scores = [float(x[4]) for x in written]
    assert scores == sorted(scores, reverse=True) and len(set(scores)) == 3
