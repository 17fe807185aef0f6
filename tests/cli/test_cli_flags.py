"""A flag's value is checked when the command line is read (argparse's one line, exit 2,
before any work), and the advice an error gives names a flag the command has."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lading.cli import main

# a count or a length of each ``lading train`` kind, ``rerank`` and ``bench``: 0 means nothing
# ("{d}": a folder that exists, for the flags that check their input exists)
CROSS_ENCODER = ["train", "cross-encoder", "--out", "o", "--queries", "{d}", "--qrels", "{d}"]
LM = ["train", "lm", "--out", "o", "--corpus", "{d}"]
SESSIONS = ["train", "sessions", "--out", "o", "--data", "d"]
RERANK = ["rerank", "--model", "{d}", "--store", "{d}", "--queries", "{d}", "--run", "{d}"]
POSITIVE = [
    (CROSS_ENCODER, "--max-length"),
    (CROSS_ENCODER, "--group-size"),
    (CROSS_ENCODER, "--batch-size"),
    (LM, "--bptt"),
    (LM, "--steps"),
    (SESSIONS, "--max-len"),
    (SESSIONS, "--epochs"),
    ([*RERANK, "--out", "o"], "--max-length"),
    (["bench"], "--max-length"),
    (["bench"], "--passages"),
    (["bench"], "--repeats"),
    (["bench"], "--batch-size"),  # (the grid's stores were built, then a ZeroDivisionError)
    (["bench"], "--group-size"),
]  # fmt: skip


@pytest.mark.parametrize(("command", "flag"), POSITIVE)
@pytest.mark.parametrize("bad", ["0", "-3", "x"])
def test_a_count_below_one_is_an_argparse_error(
    command: list[str], flag: str, bad: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--max-length 0`` reached the API (after a model, a store or a grid was set up) or was
    Python's ``invalid literal for int()``: now argparse's one line naming the flag."""
    with pytest.raises(SystemExit) as exit_:
        main([*(a.format(d=tmp_path) for a in command), f"{flag}={bad}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and f"argument {flag}: " in err[-1], err
    assert "at least 1" in err[-1], err


@pytest.mark.parametrize(("flag", "least"), [("--warmup", 0), ("--num-workers", 0)])
def test_zero_stays_a_meaningful_count(flag: str, least: int, tmp_path: Path) -> None:
    """No warm-up steps, no DataLoader workers: 0 is allowed where it means something."""
    from lading.cli import build_parser

    command = ["bench"] if flag == "--warmup" else [a.format(d=tmp_path) for a in LM]
    args = build_parser().parse_args([*command, f"{flag}={least}"])
    assert getattr(args, flag[2:].replace("-", "_")) == least
    with pytest.raises(SystemExit):
        build_parser().parse_args([*command, f"{flag}={least - 1}"])


@pytest.fixture
def bad_text(tmp_path: Path) -> Path:
    """Two documents, the second with a line of invalid UTF-8."""
    path = tmp_path / "docs.txt"
    path.write_bytes(b"alpha beta gamma\n\n\xff\xfe delta\n\nbeta gamma alpha\n")
    return path


def test_the_precisions_offered_are_the_trainers() -> None:
    """The CLI names them without importing torch; they must be what the trainer takes."""
    pytest.importorskip("torch")
    from lading.cli.inputs import PRECISIONS
    from lading.ir.train import PRECISION

    assert sorted(PRECISIONS) == sorted(PRECISION)


def test_lm_tokenizer_advises_its_own_flag(
    bad_text: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The error advised ``on_error='skip'``, a keyword ``lading lm tokenizer`` had no flag
    for: it now has ``--on-error``, and the advice names it."""
    pytest.importorskip("tokenizers")
    code = main(["lm", "tokenizer", str(bad_text), str(tmp_path / "t.json"), "--vocab-size", "300"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "--on-error skip" in err and "on_error=" not in err, err
    assert not (tmp_path / "t.json").exists()


def test_lm_tokenizer_skips_and_counts_with_on_error_skip(
    bad_text: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("tokenizers")
    out = tmp_path / "t.json"
    code = main(["lm", "tokenizer", str(bad_text), str(out), "--vocab-size", "300",
                 "--on-error", "skip"])  # fmt: skip
    said = capsys.readouterr().out
    assert code == 0 and out.is_file(), said
    assert "skipped 1 malformed record(s)" in said and "docs.txt" in said, said


@pytest.mark.parametrize("flag", ["--corpus", "--queries", "--qrels", "--negatives", "--tokenizer"])
def test_bench_names_a_missing_input_when_the_line_is_read(
    flag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """As ``lading train`` and ``rerank`` do: argparse's one line, not a check after parsing."""
    with pytest.raises(SystemExit) as exit_:
        main(["bench", flag, str(tmp_path / "nothing.tsv")])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and f"argument {flag}: " in err[-1] and "does not exist" in err[-1]


KIND_LRS = [(LM, "LMConfig", 3e-3), (SESSIONS, "SessionsConfig", 1e-3)]
KIND_LRS += [(CROSS_ENCODER, "TrainConfig", 2e-5)]


@pytest.mark.parametrize(("command", "config", "default"), KIND_LRS)
def test_lr_not_given_at_a_resume_keeps_the_checkpoints(
    command: list[str], config: str, default: float, tmp_path: Path
) -> None:
    """``lading train ... --lr 5e-4``, killed, then ``... --resume`` without ``--lr`` went on
    at the kind's default lr (said on stderr, but not what a rerun of the shorter command
    means); a ``--lr`` given at the resume is still applied."""
    from lading.cli import build_parser
    from lading.cli.train import _config, int_list
    from lading.ir.train import TrainConfig
    from lading.lm.train import LMConfig
    from lading.tabular.train import SessionsConfig

    kind = {"LMConfig": LMConfig, "SessionsConfig": SessionsConfig, "TrainConfig": TrainConfig}
    argv = [part.format(d=tmp_path) for part in command]
    for extra, lr, keep in [([], default, ("lr",)), (["--lr", "5e-4"], 5e-4, ())]:
        args = build_parser().parse_args([*argv, "--resume", *extra])
        if config == "SessionsConfig":  # as the command does before its config
            args.train_days = int_list(args.train_days)
        made = _config(kind[config], args, ())
        assert (made.lr, made.keep_on_resume) == (lr, keep)


@pytest.mark.parametrize("asked", ["100000", "1"])
def test_lm_tokenizer_prints_the_vocabulary_it_made(
    asked: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It printed the size asked for: 100,000 for a file whose tokenizer holds 274 entries,
    1 for one that holds 257 (the byte alphabet and the end-of-text token)."""
    pytest.importorskip("tokenizers")
    src = tmp_path / "ok.tsv"
    src.write_text("d1\thello world\nd2\tsecond doc\n")
    out = tmp_path / "tok.json"
    assert main(["lm", "tokenizer", str(src), str(out), "--vocab-size", asked]) == 0
    made = len(json.loads(out.read_text())["model"]["vocab"])
    said = capsys.readouterr().out
    assert f"{made:,} entries" in said and made != int(asked), said


@pytest.mark.parametrize("text", ["", "\n\n  \n"])
def test_lm_tokenizer_refuses_a_source_without_documents(
    text: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """As ``lading lm build`` does: once it wrote a byte-only tokenizer trained on nothing."""
    pytest.importorskip("tokenizers")
    src = tmp_path / "empty.txt"
    src.write_text(text)
    out = tmp_path / "tok.json"
    assert main(["lm", "tokenizer", str(src), str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert str(src) in err and "no documents" in err, err
    assert not out.exists()


@pytest.fixture
def lm_source(tmp_path: Path) -> tuple[Path, Path]:
    """A two-document TSV and a byte-level BPE tokenizer trained on it (``<|endoftext|>``)."""
    pytest.importorskip("tokenizers")
    src = tmp_path / "ok.tsv"
    src.write_text("d1\thello world\nd2\tsecond doc\n")
    tok = tmp_path / "tok.json"
    assert main(["lm", "tokenizer", str(src), str(tok), "--vocab-size", "300"]) == 0
    return src, tok


def test_lm_build_refuses_an_eos_token_with_no_eos(
    lm_source: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--no-eos --eos-token X`` built without an end of text, X taken and ignored."""
    src, tok = lm_source
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        main(["lm", "build", str(src), str(tmp_path / "c"), "--tokenizer", str(tok),
              "--no-eos", "--eos-token", "<nope>", "--quiet"])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert exit_.value.code == 2 and "--no-eos" in err and "--eos-token" in err, err
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize("shard", [[], ["--shard", "0/1"]])
def test_lm_build_names_an_eos_token_the_tokenizer_lacks(
    shard: list[str],
    lm_source: tuple[Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """It said "the tokenizer has none of ['<nope>']; pass eos_token=, or append_eos=False":
    no file, and keywords the command has no flag for."""
    src, tok = lm_source
    capsys.readouterr()
    code = main(["lm", "build", str(src), str(tmp_path / "c"), "--tokenizer", str(tok),
                 "--eos-token", "<nope>", "--quiet", *shard])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2 and "--eos-token '<nope>'" in err and str(tok) in err, err
    assert "--no-eos" in err and "=" not in err and "<|endoftext|>" in err, err
    assert not (tmp_path / "c").exists()


def test_lm_build_names_the_fix_for_a_tokenizer_without_an_eos(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A tokenizer with none of the usual end-of-text names (a word-level one here)."""
    tokenizers = pytest.importorskip("tokenizers")

    src = tmp_path / "ok.txt"
    src.write_text("alpha beta\n\nbeta gamma\n")
    vocab = {"[UNK]": 0, "alpha": 1, "beta": 2, "gamma": 3}
    words = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    words.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok = tmp_path / "words.json"
    words.save(str(tok))
    code = main(["lm", "build", str(src), str(tmp_path / "c"), "--tokenizer", str(tok), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2 and str(tok) in err and "--eos-token" in err and "--no-eos" in err, err
    assert "=" not in err, err
    assert main(["lm", "build", str(src), str(tmp_path / "c"), "--tokenizer", str(tok),
                 "--no-eos", "--quiet"]) == 0  # fmt: skip


@pytest.mark.parametrize("kind", ["cross-encoder", "lm", "sessions"])
def test_resume_help_says_a_run_without_a_checkpoint_starts(
    kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """It said "continue from OUT/checkpoint", and with none there the run starts at step 0."""
    with pytest.raises(SystemExit):
        main(["train", kind, "--help"])
    said = " ".join(capsys.readouterr().out.split())
    assert "--resume continue from OUT/checkpoint when there is one; else start" in said, said


@pytest.mark.parametrize(
    ("command", "says"),
    [
        (["build"], ["--on-error", "(default: raise)"]),
        (["build"], ["--duplicates", "(default: error)"]),
        (["build"], ["--max-length", "(default: no limit"]),
        (["build"], ["--tokenizer", "(default: none"]),
        (["build"], ["--id-field", "(default: the first of id, doc_id, docid, _id, pid"]),
        (["build"], ["--text-field", "(default: the first of text, contents, body"]),
        (["merge"], ["--build-id", "(default: the one"]),
        (["stage"], ["--verify", "(default: sizes and the first and last 4 KiB"]),
        (["lm", "build"], ["--on-error", "(default: raise)"]),
    ],
)
def test_help_says_each_flags_default(
    command: list[str], says: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """`lading build --help` listed --on-error {raise,skip}, --duplicates, --max-length,
    --tokenizer, --id-field and --text-field with no word of what a build does without them
    (nor `merge --build-id`, `stage --verify`)."""
    with pytest.raises(SystemExit):
        main([*command, "--help"])
    flag, default = says
    entry: list[str] = []  # the flag's lines: up to the next line that starts an option
    for line in capsys.readouterr().out.splitlines():
        if line.startswith("  -") or not line.startswith(" "):
            if entry:
                break
            if line.strip().split(" ")[0].rstrip(",") == flag:
                entry.append(line)
        elif entry:
            entry.append(line)
    said = " ".join(" ".join(entry).split())
    assert said and default in said, said


def test_every_flag_with_a_default_says_it() -> None:
    """A reviewer listed 40 flags whose help gave no default (``train cross-encoder
    --group-size`` 8, ``--max-length`` 512, ``rerank --depth`` 100, ``train lm --bptt`` 70,
    ...). Every option with a value by default now says it in its help, once."""
    import argparse

    from lading.cli import build_parser

    def options(parser: argparse.ArgumentParser, name: str) -> Any:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub, child in action.choices.items():
                    yield from options(child, f"{name} {sub}")
            elif action.option_strings and action.help not in (None, argparse.SUPPRESS):
                yield name, action

    silent = []
    for name, action in options(build_parser(), "lading"):
        value = action.default
        if value in (None, argparse.SUPPRESS, [], ()) or isinstance(value, bool):
            continue
        said = str(action.help) % {"default": value, "prog": name}
        if "default" not in said and f"({value}" not in said:
            silent.append(f"{name} {action.option_strings[-1]} ({value})")
        assert said.count("(default") <= 1, f"{name} {action.option_strings[-1]}: {said}"
    assert not silent, f"{len(silent)} flags do not say their default: {silent}"


def test_the_json_keys_the_help_names_are_those_a_build_looks_for() -> None:
    """The parser spells the keys out (building it imports no source reader): kept equal."""
    from lading.cli.stores import JSON_IDS, JSON_TEXTS
    from lading.sources.parsers import JSON_ID_FIELDS, JSON_TEXT_FIELDS

    assert (", ".join(JSON_ID_FIELDS), ", ".join(JSON_TEXT_FIELDS)) == (JSON_IDS, JSON_TEXTS)


@pytest.mark.parametrize(
    ("given", "expected"), [([], None), (["--use-tokens"], True), (["--no-use-tokens"], False)]
)
def test_train_cross_encoder_says_whether_to_read_the_stores_tokens(
    given: list[str], expected: bool | None, tmp_path: Path
) -> None:
    """``TrainConfig.use_tokens`` had no flag: a store built with another tokenizer than the
    model's could be trained on (its text tokenized) from Python only."""
    from lading.cli import build_parser
    from lading.cli.train import _config
    from lading.ir.train import TrainConfig

    args = build_parser().parse_args([*(a.format(d=tmp_path) for a in CROSS_ENCODER), *given])
    assert _config(TrainConfig, args, ()).use_tokens is expected


@pytest.mark.parametrize("given", [",", " , ,", ""])
def test_bench_refuses_strategies_that_name_none(given: str) -> None:
    """``lading bench --strategies ,`` measured nothing, wrote an empty results.json and
    exited 0. A list that names no strategy is refused, naming the flag and the choices,
    before any data is made (bench_plan: the grid is never run here)."""
    from lading.bench import STRATEGIES
    from lading.cli import bench_plan, build_parser

    args = build_parser().parse_args(["bench", "--strategies", given])
    with pytest.raises(ValueError, match=r"^--strategies .*names no strategy") as e:
        bench_plan(args)
    assert all(name in str(e.value) for name in STRATEGIES)
    options = bench_plan(build_parser().parse_args(["bench", "--strategies", ",packed,"]))[0]
    assert options.strategies == ["packed"]


@pytest.mark.parametrize("command", ["build", "tokenizer"])
def test_lm_split_of_json_records_is_refused_naming_the_fix(
    lm_source: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """``--split`` divides plain text; JSONL records are a document each, so on them every
    value built the same corpus, taken and ignored (as ``--text-field`` on plain text is
    refused). Refused naming the fix; left out, or on plain text, it builds."""
    _, tok = lm_source
    records = tmp_path / "d.jsonl"
    records.write_text('{"text": "hello world\\n\\nsecond doc"}\n{"text": "hello"}\n')
    out = [str(tmp_path / "c")] if command == "build" else [str(tmp_path / "t.json")]
    more = ["--tokenizer", str(tok), "--quiet"] if command == "build" else []
    capsys.readouterr()
    assert main(["lm", command, str(records), *out, *more, "--split", "line"]) == 2
    err = capsys.readouterr().err
    assert "--split line divides plain text" in err and "drop --split" in err, err
    assert main(["lm", command, str(records), *out, *more]) == 0
    text = tmp_path / "d.txt"
    text.write_text("hello world\n\nsecond doc\n")
    assert main(["lm", command, str(text), out[0] + "2", *more, "--split", "line"]) == 0


@pytest.mark.parametrize(
    ("kind", "unit"),
    [
        ("cross-encoder", "groups (a query and its --group-size"),
        ("lm", "windows"),
        ("sessions", "sessions"),
    ],
)
def test_batch_size_help_says_what_one_unit_of_it_is(
    kind: str, unit: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every `lading train` kind said "--batch-size: rows per step per rank"; a cross-encoder's
    batch counts groups, each --group-size rows (8 x 8 = 64 rows at the defaults)."""
    with pytest.raises(SystemExit):
        main(["train", kind, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"--batch-size BATCH_SIZE {unit}" in text, text


def test_lm_split_of_wikiextractor_output_is_refused_naming_the_fix(
    lm_source: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """WikiExtractor's ``<doc>`` blocks are a document each, as JSON records are: ``--split``
    was taken and ignored on them (``--split file`` on a folder of them still built a
    document a block). Refused naming the fix; left out, it builds."""
    _, tok = lm_source
    wiki = tmp_path / "AA"
    wiki.mkdir()
    (wiki / "wiki_00").write_text(
        '<doc id="1" url="u" title="A">\nA\n\nhello world\n</doc>\n'
        '<doc id="2" url="u" title="B">\nB\n\nhello\n</doc>\n'
    )
    out = str(tmp_path / "c")
    capsys.readouterr()
    for source in (wiki / "wiki_00", wiki):
        assert main(["lm", "build", str(source), out, "--tokenizer", str(tok), "--quiet",
                     "--split", "file"]) == 2  # fmt: skip
        err = capsys.readouterr().err
        assert "--split file divides plain text" in err and "WikiExtractor" in err, err
    assert main(["lm", "build", str(wiki), out, "--tokenizer", str(tok), "--quiet"]) == 0
