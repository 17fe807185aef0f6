"""TrainingGroups says what the files did not give: queries the run has no negative for, judged
documents absent from the store (one readable line, the file and first id named), and refuses
files of two collections (a run of other queries, a store of other documents)."""

from __future__ import annotations

import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest

import lading
from conftest import write
from lading.ir.groups import MIN_JUDGED_STORED, GroupsWarning
from lading.ir.train import groups_from_files


def _files(tmp_path: Path, run: str, qrels: str | None = None) -> dict[str, Path]:
    queries = "".join(f"q{i}\tquery {i}\n" for i in range(1, 5))
    judged = qrels or "".join(f"q{i} 0 d{i} 1\n" for i in range(1, 5))
    return {
        "queries": write(tmp_path / "queries.tsv", queries),
        "qrels": write(tmp_path / "qrels.txt", judged),
        "run": write(tmp_path / "other.run", run),
    }


def _groups(
    files: dict[str, Path], sampling: str = "run", min_relevance: int = 1
) -> lading.ir.TrainingGroups:
    store = lading.InMemoryStore({f"d{i}": f"text {i}" for i in range(40)})
    settings = SimpleNamespace(
        group_size=4, sampling=sampling, depth=100, min_relevance=min_relevance, seed=0
    )
    return groups_from_files(store, files["queries"], files["qrels"], files["run"], settings)


def test_a_run_of_none_of_the_judged_queries_is_refused_under_sampling_run(
    tmp_path: Path,
) -> None:
    """--negatives of another collection (no judged query in it) trained on random negatives
    only, under the default --sampling run, without a word."""
    run = "".join(f"x{q} Q0 d{10 + r} {r} {10 - r} bm25\n" for q in (7, 8) for r in range(1, 4))
    files = _files(tmp_path, run)
    with pytest.raises(ValueError) as refused:
        _groups(files)
    message = str(refused.value)
    assert str(files["run"]) in message and str(files["qrels"]) in message, message
    assert "none of the 4 judged queries" in message and "2 queries" in message, message
    assert "'q1'" in message and "'x7'" in message, message  # the first of each side
    assert "sampling='random'" in message, message  # the fix, or the choice of random
    with pytest.raises(ValueError, match="none of the 4 judged queries"):
        _groups(files, "run+random")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # random asks for no run negative: nothing to say
        assert _groups(files, "random").report.queries == 4


def test_queries_the_run_has_no_negative_for_are_counted_and_said(tmp_path: Path) -> None:
    """dl19.bm25.run with the DL19+20 qrels: 54 of 97 queries got only random negatives,
    nothing said and nothing counted."""
    run = "".join(f"q{q} Q0 d{10 + r} {r} {10 - r} bm25\n" for q in (1, 3) for r in range(1, 4))
    files = _files(tmp_path, run)
    with pytest.warns(GroupsWarning) as said:
        groups = _groups(files)
    assert groups.report.queries_without_candidates == 2
    lines = [str(w.message) for w in said]
    line = next(x for x in lines if "run" in x)
    assert "2 of 4 queries" in line and "'q2'" in line and str(files["run"]) in line, line
    assert "at random" in line, line
    for i in range(len(groups)):
        if groups[i]["qid"] in ("q1", "q3"):
            assert set(groups[i]["doc_ids"][1:]) <= {"d11", "d12", "d13"}


def test_what_was_left_out_is_one_readable_line_naming_the_first_id_and_its_file(
    tmp_path: Path,
) -> None:
    """It was ``UserWarning: TrainingGroups left out: GroupsReport(pairs=3, ...)``."""
    qrels = "q1 0 d1 1\nq2 0 d2 1\nq3 0 d3 1\nq3 0 zz9 0\n"
    run = "".join(f"q{q} Q0 d{10 + r} {r} {10 - r} bm25\n" for q in (1, 2, 3) for r in range(1, 4))
    files = _files(tmp_path, run + "q1 Q0 ghost 9 0 bm25\n", qrels)
    with pytest.warns(GroupsWarning) as said:
        _groups(files)
    (line,) = [str(w.message) for w in said]
    assert "GroupsReport(" not in line and "\n" not in line, line
    assert "1 judged document" in line and "'zz9' of query 'q3'" in line, line
    assert str(files["qrels"]) in line and str(files["run"]) in line, line
    assert "'ghost' of query 'q1'" in line, line


def test_judged_documents_left_out_say_how_many_of_them_were_relevant(tmp_path: Path) -> None:
    """MS MARCO's pool at min_relevance=2: "left out 11,292 judged documents" read as 11k
    training pairs lost, where 1,280 were relevant and the rest judged not relevant, never a
    positive (a review's count). The line says how many could have been positives."""
    qrels = "q1 0 d1 2\nq2 0 d2 2\nq3 0 d3 2\nq3 0 zz9 0\nq1 0 zz8 1\nq2 0 zz7 2\n"
    run = "".join(f"q{q} Q0 d{10 + r} {r} {10 - r} bm25\n" for q in (1, 2, 3) for r in range(1, 4))
    files = _files(tmp_path, run, qrels)
    with pytest.warns(GroupsWarning) as said:
        groups = _groups(files, min_relevance=2)
    (line,) = [str(w.message) for w in said]
    assert "3 judged documents" in line, line
    assert "1 of them relevant at min_relevance=2, 2 judged below it (never positives)" in line
    assert groups.report.relevant_missing_from_store == 1


def test_a_store_of_almost_none_of_the_judged_documents_is_refused(tmp_path: Path) -> None:
    """A store of another collection trained on the few judged ids that collide by accident
    (numeric ids of two collections), said only in a raw warning."""
    qrels = "".join(f"q{i % 4 + 1} 0 p{i} 1\n" for i in range(100)) + "q1 0 d1 1\n"
    files = _files(tmp_path, "q1 Q0 d2 1 1 bm25\n", qrels)
    with pytest.raises(ValueError) as refused:
        _groups(files, "random")
    message = str(refused.value)
    assert f"{MIN_JUDGED_STORED:.0%}" in message, message
    assert "1 of 101 judged" in message and "'p0' of query 'q1'" in message, message
    assert str(files["qrels"]) in message and "InMemoryStore" in message, message
    assert "store (--store, --corpus) of the collection the qrels" in message, message


def test_lading_train_cross_encoder_says_it_in_one_line_without_python_s_source_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CLI printed ``.../ir/train.py:194: UserWarning: TrainingGroups left out: ...``
    and then the source line of the warn call."""
    pytest.importorskip("transformers")
    pytest.importorskip("tokenizers")
    from lading.cli import main

    corpus = write(tmp_path / "c.tsv", "".join(f"d{i}\tword{i} text {i}\n" for i in range(40)))
    run = "".join(f"q{q} Q0 d{10 + r} {r} {10 - r} bm25\n" for q in (1, 3) for r in range(1, 4))
    files = _files(tmp_path, run, "q1 0 d1 1\nq2 0 d2 1\nq3 0 d3 1\nq4 0 d4 1\nq4 0 gone 0\n")
    code = main(["train", "cross-encoder", "--corpus", str(corpus), "--queries",
                 str(files["queries"]), "--qrels", str(files["qrels"]), "--negatives",
                 str(files["run"]), "--model", "tiny", "--steps", "1", "--group-size", "2",
                 "--max-length", "32", "--max-query-length", "8", "--parallel", "none",
                 "--log-every", "0", "--out", str(tmp_path / "out")])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 0, err
    said = [x for x in err.splitlines() if "warning:" in x]
    assert "UserWarning" not in err and "warnings.warn" not in err, err
    assert any("'gone' of query 'q4'" in x for x in said), err
    assert any("2 of 4 queries" in x for x in said), err
    assert all(x.startswith("lading train cross-encoder: warning: ") for x in said), err
