"""A TSV of more columns than two through every command that takes a corpus file: the refusal
names a fix that the command has (issue 33 item 3, round two). `lading build` has --columns;
`lading train cross-encoder` builds its store from --corpus, so it has --columns too; `lading
bench` reads --corpus as id<TAB>text in every strategy (its stores, ir_datasets' docstore and the
peers' formats), so it refuses a wider file before any work, naming a two-column file as the fix.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lading.cli import build_parser, main

DOCS = "D1\thttp://a.com/x\tTitle one\tBody one\nD2\thttp://b.com/y\tTitle two\tBody two\n"


@pytest.fixture
def files(tmp_path: Path) -> Path:
    (tmp_path / "docs.tsv").write_text(DOCS)
    (tmp_path / "queries.tsv").write_text("q1\tfirst question\nq2\tsecond question\n")
    (tmp_path / "qrels.txt").write_text("q1 0 D1 1\nq2 0 D2 1\n")
    return tmp_path


def cross_encoder_args(files: Path, *extra: str) -> list[str]:
    return ["train", "cross-encoder", "--corpus", str(files / "docs.tsv"),
            "--queries", str(files / "queries.tsv"), "--qrels", str(files / "qrels.txt"),
            "--out", str(files / "out"), "--max-length", "32", *extra]  # fmt: skip


@pytest.mark.e2e  # a whole training run (2.8 s): the default run, not the unit tier
def test_cross_encoder_builds_a_wider_tsv_named_by_columns(files: Path) -> None:
    """The refusal said --columns id,url,title,text, which `train cross-encoder` did not take
    (argparse: unrecognized arguments)."""
    pytest.importorskip("transformers")
    from lading.cli.train import _config
    from lading.ir.train import TrainConfig, prepare
    from lading.world import World

    args = build_parser().parse_args(cross_encoder_args(files, "--columns", "id,url,title,text"))
    config = _config(TrainConfig, args, ("out", "queries", "qrels", "corpus"))
    assert config.columns == ("id", "url", "title", "text")
    store, _, _ = prepare(config, World())
    assert store["D2"] == "Body two" and store.field("D2", "url") == "http://b.com/y"


def test_cross_encoder_columns_are_checked_while_the_line_is_read(
    files: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(cross_encoder_args(files, "--columns", "id,url,title"))
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "argument --columns" in err and "'id' and 'text'" in err
    assert not (files / "out").exists()


def test_cross_encoder_without_columns_names_its_own_flag(
    files: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("transformers")
    code = main(cross_encoder_args(files))
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2 and "docs.tsv" in line and "--columns id,url,title,text" in line, line
    flags = build_parser().parse_args(cross_encoder_args(files, "--columns", "id,url,title,text"))
    assert flags.columns  # the flag the line names is one the command takes


def test_bench_refuses_a_wider_tsv_naming_a_fix_it_has(
    files: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The bench's refusal came from the reader, after planning and inside the preparation,
    and advised --columns, which `lading bench` does not take."""
    args = ["bench", "--corpus", str(files / "docs.tsv"), "--queries", str(files / "queries.tsv"),
            "--qrels", str(files / "qrels.txt"), "--out", str(files / "out")]  # fmt: skip
    code = main(args)
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2 and line.startswith("lading bench: --corpus ") and "docs.tsv" in line, line
    assert "--columns" not in line and "cut -f1,4" in line and "4 columns" in line, line
    assert not (files / "out").exists()  # refused before any work


def test_cross_encoder_refuses_columns_beside_a_store(
    files: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("transformers")
    args = ["train", "cross-encoder", "--store", str(files), "--columns", "id,url,title,text",
            "--queries", str(files / "queries.tsv"), "--qrels", str(files / "qrels.txt"),
            "--out", str(files / "out")]  # fmt: skip
    code = main(args)
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2 and "--columns" in line and "leave --columns out" in line, line


def test_cross_encoder_refuses_columns_beside_a_corpus_that_is_not_tsv(
    files: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The library's refusal reached the command line in the API's words
    (``ParseOptions(columns=...)``, ``id_field=/text_field=``, flags this command lacks)."""
    pytest.importorskip("transformers")
    (files / "docs.jsonl").write_text('{"id": "D1", "text": "Body one"}\n')
    args = cross_encoder_args(files, "--columns", "id,url,text")
    args[args.index("--corpus") + 1] = str(files / "docs.jsonl")
    code = main(args)
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2 and "docs.jsonl" in line and "leave --columns out" in line, line
    assert "ParseOptions" not in line and "_field" not in line, line
    assert not (files / "out" / "store").exists()  # refused before a tokenizer or a store


def test_cross_encoder_reads_a_wider_queries_tsv_named_by_query_columns(
    files: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A queries TSV of a third column (a query type) was read with the type glued to every
    query's text; it is refused naming the flag that reads it, which the command takes."""
    pytest.importorskip("transformers")
    import lading
    from lading.cli.train import _config
    from lading.ir.train import TrainConfig, groups_from_files

    (files / "queries.tsv").write_text("q1\tfirst question\tfactoid\nq2\tsecond question\tlist\n")
    (files / "two.tsv").write_text("D1\tBody one\nD2\tBody two\n")
    store = lading.build_store(files / "two.tsv", files / "store", progress=False)
    plain = build_parser().parse_args(
        cross_encoder_args(files, "--sampling", "random", "--group-size", "2")
    )
    config = _config(TrainConfig, plain, ("out", "queries", "qrels", "corpus"))
    with pytest.raises(lading.SourceError, match=r"line 1 of .*queries.tsv.*--query-columns"):
        groups_from_files(store, config.queries, config.qrels, None, config)
    named = cross_encoder_args(
        files, "--query-columns", "id,text,type", "--sampling", "random", "--group-size", "2"
    )
    config = _config(TrainConfig, build_parser().parse_args(named), ("out", "queries", "qrels"))
    assert config.query_columns == ("id", "text", "type")
    groups = groups_from_files(store, config.queries, config.qrels, None, config)
    assert sorted(groups.query_texts) == ["first question", "second question"]
    with pytest.raises(SystemExit) as exit_:
        main(cross_encoder_args(files, "--query-columns", "id,query,type"))
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "argument --query-columns" in err and "'id' and 'text'" in err, err


def test_cross_encoder_refuses_a_bad_queries_line_before_it_builds_its_store(
    files: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The queries, judgements and negatives were read after the store was built from
    --corpus (minutes to hours on MS MARCO): a malformed queries line now stops the run first,
    with no tokenizer trained and no store written (seen on the old code: out/store built)."""
    pytest.importorskip("transformers")
    (files / "two.tsv").write_text("D1\tBody one\nD2\tBody two\n")
    (files / "queries.tsv").write_text("q1\tfirst question\tfactoid\n")
    args = cross_encoder_args(files, "--sampling", "random", "--group-size", "2")
    args[args.index("--corpus") + 1] = str(files / "two.tsv")
    code = main(args)
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert code != 0 and "queries.tsv" in line and "--query-columns" in line, line
    assert not (files / "out" / "store").exists()
    assert not (files / "out" / "tokenizer").exists()
