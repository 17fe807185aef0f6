"""Bad input through the CLI: one line on stderr naming the input and the fix, exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import lading
from lading.cli import main


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(args)
    err = capsys.readouterr().err.strip().splitlines()
    return code, err[-1] if err else ""


@pytest.fixture
def files(tmp_path: Path) -> Path:
    (tmp_path / "c.tsv").write_text("1\thello\n2\tworld\n")
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "c.tsv").write_text("1\thello\n")
    (tmp_path / "folder" / "d.jsonl").write_text('{"id": "2", "text": "world"}\n')
    (tmp_path / "empty.tsv").write_text("")
    (tmp_path / "bad.tsv").write_text("no tab here\n")
    return tmp_path


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["build", "{d}/c.tsv", "{d}/s", "--format", "irds"], "reads an ir_datasets id"),
        (["build", "{d}/c.tsv", "{d}/s", "--format", "beir"], "reads a BEIR folder"),
        (["build", "{d}/folder", "{d}/s"], "the input files have different formats"),
        (["inspect", "{d}/c.tsv"], "is a file, not a lading store"),
        (["build", "{d}/empty.tsv", "{d}/s"], "a store of 0 documents is refused"),
        (["build", "{d}/bad.tsv", "{d}/s", "--on-error", "skip"], "every record was skipped"),
    ],
)
def test_one_line_naming_the_input(
    files: Path, args: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, line = run([a.format(d=files) for a in args], capsys)
    assert code == 2 and says in line and str(files) in line, line
    assert not (files / "s").exists()  # nothing that opens as a store was left behind


def test_unknown_irds_dataset_is_named(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("ir_datasets")
    code, line = run(["build", "irds:msmarco-passage/nope", str(files / "s")], capsys)
    assert code == 2 and "no dataset 'msmarco-passage/nope'" in line
    assert "msmarco-passage/dev" in line  # what that family does have


def test_every_store_refuses_an_empty_source(files: Path) -> None:
    for build in (
        lambda p: lading.build_store(p, files / "p"),
        lambda p: lading.OffsetStore.build(p, files / "o"),
        lading.InMemoryStore.from_source,
    ):
        with pytest.raises(lading.SourceError, match="0 documents is refused"):
            build(files / "empty.tsv")


@pytest.mark.parametrize("command", [["inspect", "{s}"], ["get", "{s}", "1", "2"]])
def test_a_closed_pipe_ends_quietly(files: Path, command: list[str]) -> None:
    store = lading.build_store(files / "c.tsv", files / "s")
    args = [a.format(s=store.path) for a in command]
    cmd = [sys.executable, "-m", "lading", *args]
    # `lading ... | head -0`: the reader is gone before the first line is written
    done = subprocess.run(
        f"{' '.join(cmd)} | head -c 0", shell=True, capture_output=True, text=True, timeout=60
    )
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr


def test_a_missing_input_is_named_before_any_work(
    files: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # --queries is missing: refused while the command line is read, before a tokenizer is
    # trained or a store built (nothing is written to --out)
    args = ["train", "cross-encoder", "--corpus", str(files / "c.tsv"), "--out",
            str(files / "out"), "--queries", str(files / "nope.tsv"), "--qrels",
            str(files / "c.tsv")]  # fmt: skip
    with pytest.raises(SystemExit) as exit_:
        main(args)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "argument --queries" in err and "nope.tsv does not exist" in err
    assert not (files / "out").exists()


def test_rerank_names_a_model_that_is_not_here(
    files: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tsv = str(files / "c.tsv")
    args = ["rerank", "--model", "nope", "--store", str(files), "--queries", tsv,
            "--run", tsv, "--out", str(files / "r")]  # fmt: skip
    with pytest.raises(SystemExit):
        main(args)
    err = capsys.readouterr().err
    assert "not a model folder on this machine" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) <= 6  # usage + one line, not 74 lines of hub errors


def test_a_file_that_is_not_a_tokenizer_is_one_line(
    files: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        main(["build", str(files / "c.tsv"), str(files / "s"), "--tokenizer", str(files / "c.tsv")])
    err = capsys.readouterr().err
    assert "c.tsv is not a tokenizer" in err and "Tokenizer.save" in err
    with pytest.raises(ValueError, match="is not a tokenizer"):
        lading.build_store(files / "c.tsv", files / "s", tokenizer=files / "c.tsv")


TRUNCATED_TREC = (
    "<DOC>\n<DOCNO>d1</DOCNO>\n<TEXT>one</TEXT>\n</DOC>\n<DOC>\n<DOCNO>d2</DOCNO>\n<TEXT>cut off"
)


def test_a_cut_off_last_trec_document_is_skipped_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "t.trec"
    path.write_text(TRUNCATED_TREC)
    store = lading.build_store(path, tmp_path / "s", on_error="skip")
    assert store.ids() == ["d1"] and store["d1"] == "one"
    reader = lading.sources.SourceReader(path, on_error="skip")
    assert [r.id for r in reader] == ["d1"] and reader.skipped == 1
    with pytest.raises(lading.SourceError, match=r"line 5 of .*no </DOC>.*on_error='skip'"):
        lading.build_store(path, tmp_path / "s2")


def test_hints_name_the_cli_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "t.trec"
    path.write_text(TRUNCATED_TREC)
    code, line = run(["build", str(path), str(tmp_path / "s")], capsys)
    assert code == 2 and "pass --on-error skip to leave" in line and "on_error=" not in line


def test_cli_spelling_rewrites_only_this_commands_flags() -> None:
    from lading.cli import cli_spelling

    flags = {"on_error": "--on-error", "overwrite": "--overwrite", "max_length": "--max-length"}
    said = "pass on_error='skip', or overwrite=True, max_length=512; seed=3 stays"
    assert cli_spelling(said, flags) == (
        "pass --on-error skip, or --overwrite, --max-length 512; seed=3 stays"
    )
