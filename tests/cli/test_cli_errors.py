"""Bad input through the CLI: one line on stderr naming the input and the fix, exit 2."""

from __future__ import annotations

import re
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
    (tmp_path / "docs.tsv").write_text("D1\thttp://a.com/x\tTitle one\tBody one\n")
    return tmp_path


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["build", "{d}/c.tsv", "{d}/s", "--format", "irds"], "reads an ir_datasets id"),
        (["build", "{d}/c.tsv", "{d}/s", "--format", "beir"], "reads a BEIR folder"),
        (["build", "{d}/folder", "{d}/s"], "the input files have different formats"),
        (["inspect", "{d}/c.tsv"], "is a file, not a lading store"),
        (["inspect", "{d}/c.tsv"], "c.tsv DEST`, then DEST"),
        (["build", "{d}/empty.tsv", "{d}/s"], "a store of 0 documents is refused"),
        (["build", "{d}/bad.tsv", "{d}/s", "--on-error", "skip"], "every record was skipped"),
        (["build", "{d}/docs.tsv", "{d}/s"], "line 1 of"),  # msmarco-docs.tsv's shape
        (["build", "{d}/docs.tsv", "{d}/s"], "--columns id,url,title,text"),
        (["build", "{d}/docs.tsv", "{d}/s"], "'D1' | 'http://a.com/x' | 'Title one'"),
    ],
)
def test_one_line_naming_the_input(
    files: Path, args: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, line = run([a.format(d=files) for a in args], capsys)
    assert code == 2 and says in line and str(files) in line, line
    assert not (files / "s").exists()  # nothing that opens as a store was left behind


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["build", "{d}/c.tsv", "{d}/c.tsv/x.store"], "{d}/c.tsv is a file, not a folder"),
        (["synth", "passages", "10", "{d}/c.tsv/x"], "{d}/c.tsv/x: a part of this path is a file"),
        (["build", "{d}/c.tsv", "/sys/x.store"], "/sys/x.store.lock: Permission denied; choose"),
    ],
)
def test_a_destination_that_cannot_be_written_is_one_line(
    files: Path, args: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A path under a file, or in a folder nobody may write (sysfs refuses even root): one
    line naming the path and the fix, exit 2, no traceback, no bare errno."""
    code, line = run([a.format(d=files) for a in args], capsys)
    assert code == 2 and says.format(d=files) in line and "[Errno" not in line, line


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
    assert len(err.strip().splitlines()) <= 10  # usage + one line, not 74 lines of hub errors


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
    # a flag named beside its keyword, with where it is a flag: once (a review read "pass
    # --no-use-tokens (--no-use-tokens, in lading train cross-encoder ...)")
    said = "or pass use_tokens=False (--no-use-tokens, in lading rerank) to tokenize its text"
    assert cli_spelling(said, {"use_tokens=False": "--no-use-tokens"}) == (
        "or pass --no-use-tokens (in lading rerank) to tokenize its text"
    )


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--world-sizes", "0"], "--world-sizes '0': expected processes per cell, integers >= 1"),
        (["--world-sizes", "-1"], "--world-sizes '-1': expected processes per cell, integers >= 1"),
        (["--world-sizes", "1,x"], "--world-sizes '1,x': expected processes per cell"),
        (["--workers", "0,-2"], "--workers '0,-2': expected DataLoader workers, integers >= 0"),
    ],
)
def test_bench_refuses_a_bad_number_before_any_work(
    flags: list[str], says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--world-sizes 0 built the stores, then died in a ZeroDivisionError; 1,x said Python's
    words (invalid literal for int()), not the flag."""
    code, line = run(["bench", *flags, "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and line.startswith("lading bench: ") and says in line, line
    assert "e.g." in line and not (tmp_path / "out").exists()


@pytest.fixture
def rerank_args(files: Path) -> list[str]:
    (files / "model").mkdir()  # no weights: a refusal must come before the model is read
    tsv = str(files / "c.tsv")
    return ["rerank", "--model", str(files / "model"), "--store", str(files), "--queries", tsv,
            "--run", tsv, "--out", str(files / "r.trec"), "--qrels", tsv]  # fmt: skip


def test_rerank_without_ir_measures_is_refused_before_reranking(
    rerank_args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "ir_measures", None)  # `import ir_measures` fails
    code, line = run(rerank_args, capsys)
    assert code == 2 and "--qrels" in line and "pip install ir-measures" in line, line
    assert "leave --qrels out" in line


def test_rerank_names_an_unknown_measure_before_reranking(
    rerank_args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("ir_measures")
    code, line = run([*rerank_args, "--measures", "nDCG@10", "nDGC@10"], capsys)
    assert code == 2 and "--measures nDGC@10" in line and "nDCG@10" in line, line


def test_ctrl_c_in_build_is_one_line_and_writes_nothing(tmp_path: Path) -> None:
    """A real SIGINT in the middle of a build: one line saying so, exit 130, no store and no
    temporary folder left beside it. The child takes SIGINT as a terminal's Python does: a
    shell's background job (``cmd &``, as a CI runner may start the suite) starts with SIGINT
    ignored, and Python then installs no handler (the build ran to the end and exited 0)."""
    source = tmp_path / "c.tsv"
    source.write_text("".join(f"{i}\ttext {i}\n" for i in range(5000)))
    job = (
        "import os, signal, sys\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)  # as at a terminal\n"
        "import lading.stores.building.writer as w\n"
        "add = w._Columns.add_block\n"
        "def interrupted(self, block):\n"
        "    os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while rows are being written\n"
        "    return add(self, block)\n"
        "w._Columns.add_block = interrupted\n"
        "from lading.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", job, "build", str(source), str(tmp_path / "s"), "--quiet"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 130, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"lading build: interrupted; nothing was written ({tmp_path / 's'} is as it was)"
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.tsv"]


def test_ctrl_c_in_any_command_is_one_line_and_exit_130(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C in a command without a handler of its own (``synth``, ``lm build``) printed a
    KeyboardInterrupt traceback; it is one line naming the command, exit 130, as ``build``."""
    import lading.bench.synth

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(lading.bench.synth, "synth", interrupted)
    code = main(["synth", "passages", "10", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 130 and err.strip().splitlines() == ["lading synth: interrupted"], err


def test_synth_refuses_a_negative_query_count_naming_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--queries -1`` reached numpy ("negative dimensions are not allowed"), naming no flag."""
    with pytest.raises(SystemExit) as exited:
        main(["synth", "passages", "10", str(tmp_path / "out"), "--queries", "-1"])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and "--queries: must be at least 1" in err, err


def test_build_says_what_its_own_flags_accept(
    files: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from lading.cli import build_parser
    from lading.sources import FORMATS

    (files / "x.csv").write_text("a,b\n")
    code, line = run(["build", str(files / "x.csv"), str(files / "s")], capsys)
    assert code == 2 and "pass --format one of" in line and "format=" not in line, line
    for name in FORMATS:  # every format the message offers, --format takes
        assert name in line
        assert build_parser().parse_args(["build", "a", "b", "--format", name]).format == name


def test_build_with_skip_does_not_advise_skip_and_counts_in_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "t.trec"
    path.write_text(TRUNCATED_TREC)
    assert main(["build", str(path), str(tmp_path / "s"), "--on-error", "skip", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert ": 1 document in " in out and "1 documents" not in out
    assert "skipped 1 malformed record" in out and "no </DOC>" in out
    assert "--on-error" not in out and "on_error" not in out, out


def test_every_argument_of_every_command_has_help() -> None:
    """`lading inspect --help` described no positional and several bench flags had no help:
    every positional and flag of every (sub)command says what it is."""
    import argparse

    from lading.cli import build_parser

    missing: list[str] = []

    def walk(parser: argparse.ArgumentParser, name: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub, subparser in action.choices.items():
                    walk(subparser, f"{name} {sub}")
            elif action.dest not in ("help", "version") and not action.help:
                missing.append(f"{name} {'/'.join(action.option_strings) or action.dest}")

    walk(build_parser(), "lading")
    assert missing == [], missing


def test_options_that_would_be_ignored_are_refused(
    files: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--max-length`` without ``--tokenizer`` (the API's ``max_length`` alike) and
    ``--build-id`` without ``--shard`` did nothing, exit 0: each is one line naming the fix."""
    tsv = files / "c.tsv"
    code, out = run(["build", str(tsv), str(tmp_path / "a"), "--max-length", "8"], capsys)
    assert code == 2 and "--tokenizer" in out and not (tmp_path / "a").exists(), out
    with pytest.raises(ValueError, match="tokenizer="):
        lading.build_store(tsv, tmp_path / "b", max_length=8, progress=False)
    code, out = run(["build", str(tsv), str(tmp_path / "c"), "--build-id", "x"], capsys)
    assert code == 2 and "--shard" in out, out


@pytest.mark.parametrize("bad", [0, -1, -2])
def test_a_max_length_below_one_is_refused(
    files: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], bad: int
) -> None:
    """``--max-length -1`` (``max_length=-2`` alike) was a Python slice: each document's last
    tokens dropped without a word, 0 none kept; refused naming the flag (argument) and the
    fix, before anything is built."""
    pytest.importorskip("tokenizers")
    from conftest import word_tokenizer

    tsv, tok = files / "c.tsv", word_tokenizer(["hello", "world"], tmp_path / "tok.json")
    dest = tmp_path / "a"
    args = ["build", str(tsv), str(dest), "--tokenizer", str(tok), f"--max-length={bad}"]
    with pytest.raises(SystemExit) as exit_:
        main(args)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "argument --max-length: must be at least 1" in err, err
    assert not dest.exists()
    for build in (
        lambda: lading.build_store(tsv, dest, tokenizer=tok, max_length=bad, progress=False),
        lambda: lading.build_shard(tsv, dest, (0, 1), tokenizer=tok, max_length=bad),
    ):
        with pytest.raises(ValueError, match=rf"max_length={bad}: .*at least 1"):
            build()
        assert not dest.exists()
    with pytest.raises(ValueError, match=r"max_length='8': .*an int"):
        lading.build_store(tsv, dest, tokenizer=tok, max_length="8", progress=False)  # type: ignore[arg-type]


def test_parallel_help_names_the_choices_each_command_takes() -> None:
    """`lading train lm --help` offered dp, which it refuses: each command's --parallel help
    names its own choices and no other."""
    import argparse
    import re

    from lading.cli import build_parser

    seen = 0

    def walk(parser: argparse.ArgumentParser) -> None:
        nonlocal seen
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for subparser in action.choices.values():
                    walk(subparser)
            elif action.dest == "parallel":
                seen += 1
                named = set(re.findall(r"\b(ddp|dp|none)\b", action.help or ""))
                assert named == set(action.choices or ()), (action.help, action.choices)

    walk(build_parser())
    assert seen >= 3


def test_reusable_says_a_touch_rebuilds(tmp_path: Path) -> None:
    """The docstring said a `touch` of the source does not call for a rebuild; it does (the
    modification time is part of the fingerprint: a same-size edit in the middle changes
    nothing else)."""
    import os

    from lading.stores.building.build import reusable

    source = tmp_path / "c.tsv"
    source.write_text("1\tone\n")
    first = lading.build_store(source, tmp_path / "s", progress=False)
    built = first.meta["build"]["seconds"], (tmp_path / "s" / "meta.json").stat().st_mtime_ns
    stat = source.stat()
    os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # touch
    again = lading.build_store(source, tmp_path / "s", progress=False)
    assert (tmp_path / "s" / "meta.json").stat().st_mtime_ns != built[1]  # rebuilt
    assert again["1"] == "one"
    doc = " ".join((reusable.__doc__ or "").split())
    assert "a copy or a ``touch`` does not call for a rebuild" not in doc
    assert "``touch`` of the source rebuilds" in doc


@pytest.mark.parametrize("command", [["verify"], ["inspect"], ["get"]])
def test_a_missing_store_exits_2_from_every_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    """Nothing there to check is bad input (2), as for inspect and get; 1 is damage found."""
    extra = ["d1"] if command == ["get"] else []
    code, err = run([*command, str(tmp_path / "nope"), *extra], capsys)
    assert code == 2 and "nope" in err and "no such directory" in err


def test_cli_spelling_drops_the_librarys_spellings_where_a_flag_says_it() -> None:
    """A library message names both spellings ("pass tokenizer= (--tokenizer) too"); at the
    command line each read "--tokenizer (--tokenizer)", a bare "max_length" or a
    "parse=ParseOptions(...)" was left as it was, and "eos_token=," or "append_eos=False" (the
    flags are --eos-token and --no-eos) were not seen as keywords at all."""
    from lading.cli import cli_spelling

    build = {"tokenizer": "--tokenizer", "max_length": "--max-length", "columns": "--columns",
             "id_field": "--id-field", "text_field": "--text-field"}  # fmt: skip
    lm = {"eos_token": "--eos-token", "no_eos": "--no-eos", "tokenizer": "--tokenizer"}
    cases = [
        (
            "pass tokenizer= (--tokenizer) too, or leave max_length out",
            build,
            "pass --tokenizer too, or leave --max-length out",
        ),
        (
            "e.g. --columns id,url (parse=ParseOptions(columns=('id', 'url'))); a tab inside",
            build,
            "e.g. --columns id,url; a tab inside",
        ),
        (
            "name it (parse=ParseOptions(id_field=..., text_field=...), or "
            "--id-field/--text-field); the defaults",
            build,
            "name it (--id-field/--text-field); the defaults",
        ),
        (
            "no id field: expected one of ['id']; name it: parse=ParseOptions(id_field=...) or "
            "--id-field",
            build,
            "no id field: expected one of ['id']; name it: --id-field",
        ),
        (
            "naming the columns (--columns, or parse=ParseOptions(columns=[...]))",
            build,
            "naming the columns (--columns)",
        ),
        (
            "none of ['<x>']; pass eos_token=, or append_eos=False to keep documents unseparated",
            lm,
            "none of ['<x>']; pass --eos-token, or --no-eos to keep documents unseparated",
        ),
        (  # a flag with its value named twice (a review: "--clip 1.0, --clip 1.0")
            "or gradient clipping (clip=1.0, --clip 1.0)",
            {"clip": "--clip", "lr": "--lr"},
            "or gradient clipping (--clip 1.0)",
        ),
        # not a flag of this command, in a path or quoted: left alone
        (
            "stage it first (stage_to=); /data/max_length/x 'max_length'",
            build,
            "stage it first (stage_to=); /data/max_length/x 'max_length'",
        ),
    ]
    for said, flags, meant in cases:
        assert cli_spelling(said, flags) == meant


def test_boolean_flags_are_spelled_by_what_they_set() -> None:
    """``--narrow/--no-narrow`` was recorded as its longest option: "narrow=True" read
    "--no-narrow"; a store_false flag (``--no-prefetch``, dest ``prefetch``) read
    "prefetch=False" as "--no-prefetch False"."""
    import argparse

    from lading.cli import build_parser, cli_spelling

    def flags(*path: str) -> dict[str, str]:
        parser = build_parser()
        for name in path:
            sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
            parser = sub.choices[name]
        return dict(parser._defaults["_flags"])

    said = "pass narrow=True, or narrow=False; prefetch=False"
    cross = flags("train", "cross-encoder")
    assert cli_spelling(said, cross) == "pass --narrow, or --no-narrow; --no-prefetch"
    lm = flags("train", "lm")
    assert cli_spelling("document_mask=False", lm) == "--no-document-mask"
    assert cli_spelling("document_mask=True", lm) == "document_mask=True"  # (the default)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (
            ["build", "{d}/c.tsv", "{d}/s", "--max-length", "3"],
            "pass --tokenizer too, or leave --max-length out",
        ),
        (["build", "{d}/docs.tsv", "{d}/s"], "e.g. --columns id,url,title,text; a tab inside"),
        (["build", "{d}/n.jsonl", "{d}/s"], "name it: --id-field"),
    ],
)
def test_build_errors_read_in_flag_spelling(
    files: Path, args: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    (files / "n.jsonl").write_text('{"key": "1", "text": "one"}\n')
    code, line = run([a.format(d=files) for a in args], capsys)
    assert code == 2 and says in line, line
    assert not re.search(r"\b(parse|tokenizer|max_length|id_field)=|ParseOptions", line), line


def test_lm_build_names_its_eos_flags(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("tokenizers")
    from conftest import word_tokenizer

    tok = word_tokenizer(["hello", "world"], files / "tok.json")
    args = ["lm", "build", str(files / "c.tsv"), str(files / "c"), "--tokenizer", str(tok)]
    code, line = run([*args, "--eos-token", "<nope>", "--quiet"], capsys)
    assert code == 2 and "--eos-token" in line and "--no-eos" in line, line
    assert "eos_token=" not in line and "append_eos" not in line, line  # no library keyword


@pytest.mark.parametrize(
    ("args", "prefix"),
    [
        (["lm", "tokenizer", "{d}/nope.tsv", "{d}/tok.json"], "lading lm tokenizer: "),
        (["lm", "merge", "{d}/folder"], "lading lm merge: "),
        (["train", "sessions", "--out", "{d}/o", "--data", "{d}/nope"], "lading train sessions: "),
        (["build", "{d}/nope.tsv", "{d}/s"], "lading build: "),
    ],
)
def test_an_error_names_the_whole_subcommand(
    files: Path, args: list[str], prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`lading lm build` and `lading lm tokenizer` both said "lading lm: ..." (the first word
    of the command only)."""
    code, line = run([a.format(d=files) for a in args], capsys)
    assert code == 2 and line.startswith(prefix), line


@pytest.mark.parametrize("command", [["verify"], ["inspect"], ["get"]])
def test_a_file_given_as_a_store_exits_2_from_every_command(
    files: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    """`lading verify FILE` printed its message with no "lading verify:" and exited 1, the
    status of damage found; a file is nothing to check, as for inspect and get."""
    extra = ["d1"] if command == ["get"] else []
    code, err = run([*command, str(files / "c.tsv"), *extra], capsys)
    assert code == 2 and err.startswith(f"lading {command[0]}: {files / 'c.tsv'} is a file"), err
    assert "not a lading store" in err and "lading build" in err, err


@pytest.mark.parametrize("command", [["verify"], ["inspect"], ["get"]])
def test_an_empty_folder_given_as_a_store_exits_2_from_every_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    """`lading verify EMPTY` exited 1 (damage found) with no "lading verify:" prefix, where
    inspect and get exit 2: a folder holding nothing of a build is no store to check."""
    extra = ["d1"] if command == ["get"] else []
    (tmp_path / "empty").mkdir()
    code, err = run([*command, str(tmp_path / "empty"), *extra], capsys)
    assert code == 2 and err.startswith(f"lading {command[0]}: {tmp_path / 'empty'}"), err
    assert "meta.json is missing" in err, err


@pytest.mark.parametrize(
    ("source", "flags", "says"),
    [
        ("c.tsv", ["--id-field", "nope"], "--id-field names a JSON key or a table column"),
        ("c.tsv", ["--text-field", "nope"], "has columns, not keys: name them with --columns"),
        ("c.tsv", ["--id-field", "a", "--text-field", "b"], "--id-field and --text-field name"),
        ("folder/c.tsv", ["--format", "tsv", "--text-field", "x"], "--text-field names"),
        ("t.trec", ["--id-field", "x"], "its documents name their own id and text"),
        ("d.jsonl", ["--columns", "id,url,text"], "name its id and text with --id-field"),
        ("t.trec", ["--columns", "id,text"], "--columns names the columns of a TSV"),
    ],
)
def test_a_field_flag_the_source_would_ignore_is_refused(
    files: Path, source: str, flags: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`lading build x.tsv --id-field nope --text-field nope` built the store, exit 0: the
    field flags apply to JSON and tables only, --columns to TSV only."""
    (files / "d.jsonl").write_text('{"id": "1", "text": "one"}\n')
    (files / "t.trec").write_text("<DOC>\n<DOCNO>d1</DOCNO>\n<TEXT>one</TEXT>\n</DOC>\n")
    code, line = run(["build", str(files / source), str(files / "s"), *flags], capsys)
    assert code == 2 and line.startswith("lading build: ") and says in line, line
    assert str(files / source) in line and not (files / "s").exists(), line


SAID_ON_STDERR = """
import resource, sys, warnings
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))  # a loop dies, not the machine
from lading.cli.stores import said_on_stderr
from lading.errors import IncompleteBuildWarning
with said_on_stderr("lading merge", IncompleteBuildWarning):
    warnings.warn("ours", IncompleteBuildWarning)
    warnings.warn("a ledger set aside", UserWarning)
print("returned")
"""


def test_a_merge_that_meets_another_warning_shows_it_once_and_returns() -> None:
    """``lading merge`` printed its own warnings as one line each and showed the others as
    Python would, but from inside the ``catch_warnings(record=True)`` that collected them:
    showing one appended it to the list being walked, so any other warning (a node cache's
    ledger set aside, say) looped for ever, growing to 24 GB until the OOM killer ended it."""
    done = subprocess.run(
        [sys.executable, "-c", SAID_ON_STDERR], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and done.stdout.strip() == "returned", done.stderr[-2000:]
    assert done.stderr.count("lading merge: warning: ours") == 1, done.stderr
    assert done.stderr.count("UserWarning: a ledger set aside") == 1, done.stderr


def test_a_file_given_as_a_token_corpus_names_the_command_that_builds_one(files: Path) -> None:
    """The message named `lading build FILE DEST` for every format: followed for a token
    corpus, it built a store, which `train lm` then refused as not a token corpus."""
    from lading.errors import StoreFormatError
    from lading.lm import TokenCorpus

    with pytest.raises(StoreFormatError, match=r"`lading lm build \S+c.tsv DEST --tokenizer"):
        TokenCorpus.open(files / "c.tsv")


@pytest.mark.parametrize("kind", ["store", "token corpus"])
@pytest.mark.parametrize("command", ["verify", "inspect"])
def test_a_folder_of_unmerged_shards_names_the_merge(
    files: Path, capsys: pytest.CaptureFixture[str], kind: str, command: str
) -> None:
    """`lading verify`/`inspect` of a folder holding one shard of a parallel `lading lm build`
    said "meta.json is missing (an interrupted build ...); rebuild the store with `lading
    build`": a token corpus's user was sent to the store command, and a folder waiting for its
    merge was called broken. The line names the build waiting and the merge that commits it."""
    from conftest import word_tokenizer

    # a store's folder whose name holds "lm" was called a token corpus's
    dest, inputs = files / ("films" if kind == "store" else "out"), files / "two"
    inputs.mkdir()
    for i in range(2):
        (inputs / f"{i}.jsonl").write_text(f'{{"id": "d{i}", "text": "hello world"}}\n')
    build = ["build", str(inputs), str(dest)]
    if kind == "token corpus":
        tok = word_tokenizer(["hello", "world"], files / "tok.json")
        build = ["lm", *build, "--tokenizer", str(tok)]
    assert main([*build, "--shard", "0/2", "--quiet"]) == 0
    capsys.readouterr()
    code, err = run([command, str(dest)], capsys)
    merge = "lading lm merge" if kind == "token corpus" else "lading merge"
    assert code == 2 and err.startswith(f"lading {command}: {dest}"), err
    assert "not merged" in err and "build-" in err and f"`{merge} {dest}`" in err, err
    assert f"not a lading {kind} yet" in err, err
    assert "lading build`" not in err and "interrupted" not in err, err


@pytest.mark.parametrize("shard", [[], ["--shard", "0/1"]])
def test_build_says_documents_stored_with_an_empty_text_beside_a_title(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], shard: list[str]
) -> None:
    """`lading build` of CACM's JSONL (1,617 of 3,204 documents a title and no text) said only
    "3,204 documents": it ignored every warning to hide the skip count it prints itself, the
    EmptyTextWarning naming --prefix-fields with it (Python's build_store says it)."""
    src = tmp_path / "docs.jsonl"
    src.write_text(
        '{"id": "1", "title": "Alpha", "text": ""}\n{"id": "2", "title": "Beta", "text": "b"}\n'
    )
    assert main(["build", str(src), str(tmp_path / "s"), "--quiet", *shard]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    said = [line for line in err if line.startswith("lading build: warning: ")]
    assert len(said) == 1 and "1 of 2" in said[0] and "--prefix-fields" in said[0], err


@pytest.mark.parametrize("command", ["inspect", "verify"])
def test_a_killed_token_corpus_build_is_named_with_its_own_rebuild(
    files: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """A review: `lading inspect` and `verify` of a killed `lading lm build` (its scratch
    holding tokens.bin) named the store's rebuild, `lading build`; they name `lading lm
    build`, as TokenCorpus.open does."""
    scratch = files / "corpus" / ".tmp-123-abcd"
    scratch.mkdir(parents=True)
    (scratch / "tokens.bin").write_bytes(b"\0" * 8)
    capsys.readouterr()
    code, err = run([command, str(files / "corpus")], capsys)
    assert code == 2 and "interrupted build" in err, err
    assert "`lading lm build --overwrite`" in err and "token corpus" in err, err


@pytest.mark.parametrize("inside", ["nothing", "a store", "a killed build"])
def test_a_folder_without_meta_json_is_described_by_what_it_holds(
    files: Path, capsys: pytest.CaptureFixture[str], inside: str
) -> None:
    """`lading inspect runs/ce` (a train OUT folder, its store in runs/ce/store) or `verify` of
    a model folder said "an interrupted build leaves no meta.json; rebuild the store with
    `lading build`" of any folder: the interrupted build only where one left its scratch, the
    store inside where there is one."""
    folder = files / "out"
    folder.mkdir()
    if inside == "a store":
        assert main(["build", str(files / "c.tsv"), str(folder / "store"), "--quiet"]) == 0
    elif inside == "a killed build":
        (folder / ".tmp-123-abcd").mkdir()
    capsys.readouterr()
    code, err = run(["inspect", str(folder)], capsys)
    assert code == 2 and "meta.json is missing" in err, err
    assert ("interrupted build" in err) == (inside == "a killed build"), err
    assert (f"{folder / 'store'} holds one" in err) == (inside == "a store"), err
    if inside == "nothing":
        assert "a build makes one: `lading build SOURCE DEST`" in err, err
