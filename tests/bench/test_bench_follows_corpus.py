"""The bench's offsets index and trained tokenizer (``<out>/stores``) follow --corpus: each was
made once, when missing, so a second bench of another corpus into the same --out timed the
offsets cell on the first corpus (nothing said), and an edited corpus failed that cell as a
stale index (a review's repros)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("tokenizers")


def _files(folder: Path, docs: dict[str, str]) -> tuple[Path, Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    corpus = folder / "c.tsv"
    corpus.write_text("".join(f"{k}\t{v}\n" for k, v in docs.items()))
    queries, qrels = folder / "q.tsv", folder / "qrels.txt"
    queries.write_text("q\talpha\n")
    qrels.write_text("q 0 a 1\n")
    return corpus, queries, qrels


def test_the_offsets_index_and_tokenizer_follow_the_corpus(tmp_path: Path) -> None:
    from lading.bench.data import prepare
    from lading.stores import OffsetStore

    work = tmp_path / "work"
    first = _files(tmp_path / "one", {"a": "alpha one", "b": "beta two", "c": "gamma"})
    prepare(*first, None, work, ["offsets", "packed"])
    trained = (work / "tokenizer" / "tokenizer.json").read_text()
    assert len(OffsetStore(work / "offsets")) == 3
    other = _files(tmp_path / "two", {"a": "delta epsilon zeta", "b": "eta theta"})
    prepare(*other, None, work, ["offsets", "packed"])
    index = OffsetStore(work / "offsets")
    assert len(index) == 2 and index["a"] == "delta epsilon zeta"
    said = json.loads((work / "tokenizer" / "trained_on.json").read_text())
    assert said["path"] == str(other[0].resolve())
    assert (work / "tokenizer" / "tokenizer.json").read_text() != trained
    other[0].write_text("a\tdelta edited\nb\teta theta\n")  # edited in place
    prepare(*other, None, work, ["offsets"])
    assert OffsetStore(work / "offsets")["a"] == "delta edited"
    before = (work / "offsets" / "meta.json").read_text()
    prepare(*other, None, work, ["offsets"])  # the same corpus, unchanged: reused
    assert (work / "offsets" / "meta.json").read_text() == before


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--seconds", "nan"], "--seconds nan: expected a window of 0 seconds or more, finite"),
        (["--seconds", "inf"], "--seconds inf: expected"),
        (["--strategies", "packed,packed"], "names packed twice: name each once"),
    ],
)
def test_a_window_that_never_ends_or_a_strategy_named_twice_is_refused(
    flags: list[str], says: str
) -> None:
    """``--seconds nan`` (or ``inf``) ran the first cell until its 900 s timeout; ``--strategies
    packed,packed`` ranked packed against itself."""
    from lading.cli import bench_plan, build_parser

    with pytest.raises(ValueError, match=says.replace("(", r"\(")):
        bench_plan(build_parser().parse_args(["bench", *flags]))


def test_parallel_dp_is_refused_without_cuda(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """On CPU ``--parallel dp`` ran DDP rank processes and results.json said ``dp``."""
    import torch

    from lading.cli import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["bench", "--parallel", "dp", "--out", "unused"]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("lading bench: --parallel dp") and "no CUDA device" in error
