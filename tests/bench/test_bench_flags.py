"""``lading bench`` flags mean what they say, or are refused naming the flag and the fix.

Refusals happen when the grid is planned (:func:`lading.cli.bench_plan`), before any data is
made or any process started: the tests call the planner, never the grid.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

torch = pytest.importorskip("torch")
CPU_ONLY = not torch.cuda.is_available()


def plan(*flags: str) -> object:
    from lading.cli import bench_plan, build_parser

    return bench_plan(build_parser().parse_args(["bench", *flags]))


@pytest.fixture(scope="module")
def collection(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from lading.bench.synth import synth

    folder = tmp_path_factory.mktemp("synth")
    synth("passages", 200, folder, queries=10)
    return folder


def corpus_flags(folder: Path) -> list[str]:
    return [
        "--corpus",
        str(folder / "collection.tsv"),
        "--queries",
        str(folder / "queries.tsv"),
        "--qrels",
        str(folder / "qrels.txt"),
    ]


@pytest.mark.skipif(not CPU_ONLY, reason="a CUDA device is present: --pin-memory is honoured")
def test_pin_memory_is_refused_without_cuda() -> None:
    with pytest.raises(ValueError, match=r"--pin-memory.*Leave --pin-memory out"):
        plan("--pin-memory")


@pytest.mark.skipif(not CPU_ONLY, reason="a CUDA device is present: pinning happens")
def test_a_pinned_cell_is_na_on_cpu_not_a_pin_memory_true_row() -> None:
    """Through the library (no CLI check) a pinned cell on a CPU is n/a, never run unpinned
    and reported as pinned."""
    from lading.bench.data import unavailable
    from lading.bench.report import _pinned, _value

    why = unavailable("packed", pin_memory=True)
    assert why is not None and "CUDA" in why
    assert unavailable("packed") is None
    record = {"pin_memory": True, "status": "n/a", "reason": why, "memory": {}}
    assert _value(record) == "n/a"
    assert _pinned(record) == "n/a on CPU"  # the report's pin memory column


@pytest.mark.parametrize("mode", ["loader", "train"])
def test_a_missing_model_is_refused_in_every_mode(mode: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"--model .*nowhere.*local model folder"):
        plan("--modes", mode, "--model", str(tmp_path / "nowhere"))


def test_a_folder_that_is_not_a_model_is_refused(tmp_path: Path) -> None:
    (tmp_path / "notes").mkdir()
    with pytest.raises(ValueError, match=r"--model .*notes.*config\.json"):
        plan("--model", str(tmp_path / "notes"))


def _plan_in_subprocess(flags: list[str], cache: Path) -> subprocess.CompletedProcess[str]:
    """``bench_plan`` in a fresh interpreter whose Hugging Face cache is ``cache``, offline."""
    code = (
        "import sys; from lading.cli import bench_plan, build_parser; "
        "bench_plan(build_parser().parse_args(['bench', *sys.argv[1:]])); print('planned')"
    )
    env = {
        **os.environ,
        "HF_HUB_CACHE": str(cache),
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(REPO / "src"),
    }
    return subprocess.run(
        [sys.executable, "-c", code, *flags], env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.slow  # the CLI in two subprocesses (~10-30 s on a busy 2-core machine)
def test_a_hub_id_is_looked_up_in_the_local_cache_only(tmp_path: Path) -> None:
    snapshot = tmp_path / "hub" / "models--org--tiny" / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (snapshot / "tokenizer.json").write_text("{}")
    (tmp_path / "hub" / "models--org--tiny" / "refs").mkdir()
    (tmp_path / "hub" / "models--org--tiny" / "refs" / "main").write_text("0" * 40)
    found = _plan_in_subprocess(["--model", "org/tiny"], tmp_path / "hub")
    assert found.returncode == 0, found.stderr[-2000:]
    absent = _plan_in_subprocess(["--model", "org/absent"], tmp_path / "hub")
    assert absent.returncode != 0
    assert "--model org/absent" in absent.stderr and "Hugging Face cache" in absent.stderr


@pytest.mark.parametrize("flag", ["--queries", "--qrels", "--negatives", "--query-columns"])
def test_inputs_of_a_corpus_are_refused_without_one(flag: str, collection: Path) -> None:
    """Without --corpus the synthetic collection brings its own queries, qrels and run: a
    --queries/--qrels/--negatives given alone was silently replaced by them."""
    name = {"--queries": "queries.tsv", "--qrels": "qrels.txt", "--negatives": "run.trec"}
    value = str(collection / name[flag]) if flag in name else "id,text,type"
    with pytest.raises(ValueError, match=rf"{flag} .*without --corpus.*give --corpus"):
        plan(flag, value)


def test_a_wider_queries_tsv_is_read_by_its_named_columns(collection: Path, tmp_path: Path) -> None:
    """A queries TSV with a third column is refused naming --query-columns, which the bench
    takes as train and rerank do: the training groups read the text column only."""
    from lading.errors import SourceError
    from lading.ir.train import groups_from_files
    from lading.stores.memory import InMemoryStore

    wide = tmp_path / "queries3.tsv"
    lines = (collection / "queries.tsv").read_text().splitlines()
    wide.write_text("".join(f"{line}\tfactoid\n" for line in lines))
    flags = corpus_flags(collection)
    flags[flags.index("--queries") + 1] = str(wide)
    store = InMemoryStore.from_source(collection / "collection.tsv")
    _, settings, _ = plan(*flags)
    with pytest.raises(SourceError, match="--query-columns"):
        groups_from_files(store, wide, collection / "qrels.txt", None, settings)
    _, settings, _ = plan(*flags, "--query-columns", "id,text,type")
    assert settings.query_columns == ("id", "text", "type")  # type: ignore[attr-defined]
    groups = groups_from_files(store, wide, collection / "qrels.txt", None, settings)
    plain = groups_from_files(store, collection / "queries.tsv", collection / "qrels.txt", None,
                              plan(*corpus_flags(collection))[1])  # fmt: skip
    assert groups.query_texts == plain.query_texts and len(groups) == len(plain) > 0


def test_a_corpus_without_queries_is_refused_when_planned(collection: Path) -> None:
    with pytest.raises(ValueError, match=r"--corpus.*--queries and --qrels"):
        plan("--corpus", str(collection / "collection.tsv"))


def test_negatives_mean_run_sampling(collection: Path) -> None:
    _, settings, _ = plan(*corpus_flags(collection), "--negatives", str(collection / "run.trec"))
    assert settings.sampling == "run"  # type: ignore[attr-defined]
    _, settings, _ = plan(*corpus_flags(collection))
    assert settings.sampling == "random"  # type: ignore[attr-defined]


def _tiny_model(folder: Path, collection: Path, vocab_size: int = 300) -> Path:
    """A tiny BERT folder with its own tokenizer.json (a vocabulary far below the 8,000 the
    bench trains when it has no tokenizer)."""
    from transformers import BertModel

    from lading.ir.model import tiny_bert_config
    from lading.stores.tokens import save_tokenizer, train_tokenizer

    texts = [line.split("\t", 1)[1] for line in (collection / "collection.tsv").open()]
    tok = train_tokenizer(texts, "wordpiece", vocab_size)
    save_tokenizer(tok, folder / "tokenizer.json")
    BertModel(tiny_bert_config(tok.get_vocab_size(), max_position=128)).save_pretrained(folder)
    return folder


def test_the_model_brings_its_tokenizer(collection: Path, tmp_path: Path) -> None:
    from lading.cli import build_parser
    from lading.cli.bench import bench_tokenizer

    model = _tiny_model(tmp_path / "tiny-bert", collection)
    args = build_parser().parse_args(["bench", *corpus_flags(collection), "--model", str(model)])
    assert bench_tokenizer(args) == str(model / "tokenizer.json")
    given = str(tmp_path / "tiny-bert")
    args = build_parser().parse_args(
        ["bench", *corpus_flags(collection), "--model", str(model), "--tokenizer", given]
    )
    assert bench_tokenizer(args) == given  # --tokenizer wins
    assert bench_tokenizer(build_parser().parse_args(["bench"])) is None  # trained on the corpus


def test_a_model_without_a_tokenizer_is_refused(collection: Path, tmp_path: Path) -> None:
    model = _tiny_model(tmp_path / "tiny-bert", collection)
    (model / "tokenizer.json").unlink()
    with pytest.raises(ValueError, match=r"--model .*tokenizer\.json.*--tokenizer"):
        plan(*corpus_flags(collection), "--model", str(model))


def test_a_tokenizer_larger_than_the_model_is_refused(collection: Path, tmp_path: Path) -> None:
    """Ids past the model's embedding would fail every train cell with an IndexError."""
    from lading.stores.tokens import save_tokenizer, train_tokenizer

    model = _tiny_model(tmp_path / "tiny-bert", collection, vocab_size=200)
    texts = [line.split("\t", 1)[1] for line in (collection / "collection.tsv").open()]
    big = save_tokenizer(train_tokenizer(texts, "wordpiece", 1000), tmp_path / "big.json")
    with pytest.raises(ValueError, match=r"--tokenizer .*big\.json.*entries.*--model"):
        plan(*corpus_flags(collection), "--model", str(model), "--tokenizer", str(big))


@pytest.mark.slow
def test_a_train_cell_with_a_model_runs_on_its_tokenizer(collection: Path, tmp_path: Path) -> None:
    """End to end: the old bench trained an 8,000-entry tokenizer for a 300-entry model and the
    cell failed (index out of range in the embedding)."""
    model = _tiny_model(tmp_path / "tiny-bert", collection)
    out = tmp_path / "out"
    flags = [*corpus_flags(collection), "--model", str(model), "--modes", "train"]
    flags += ["--strategies", "packed", "--world-sizes", "1", "--seconds", "0", "--repeats", "1"]
    flags += ["--steps", "2", "--warmup", "1", "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "lading", "bench", *flags],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    cells = json.loads((out / "results.json").read_text())["cells"]
    assert [c["status"] for c in cells] == ["ok"], [c.get("reason") for c in cells]


def test_precision_reaches_the_train_step_and_the_report() -> None:
    """``--precision bf16`` is the step's autocast dtype, and the report names it beside the
    model (a GPU figure without its precision cannot be compared)."""
    from lading.bench.report import batch_line

    _, settings, _ = plan("--precision", "bf16", "--modes", "train")  # type: ignore[misc]
    assert settings.precision == "bf16"
    results = {
        "settings": {
            "batch_size": 32,
            "group_size": 8,
            "max_length": 512,
            "model": "m",
            "precision": settings.precision,
        },
        "options": {"modes": ["train"]},
    }
    assert batch_line(results) == (
        "Batches: 32 groups x 8 documents per rank, max length 512. Model: m, bf16."
    )
    assert "Model" not in batch_line({**results, "options": {"modes": ["loader"]}})
    with pytest.raises(SystemExit):
        plan("--precision", "int8")


@pytest.mark.parametrize("modes", ["both", "foo", "loader,both", ","])
def test_a_mode_that_is_not_loader_or_train_is_refused_naming_the_choices(
    modes: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--modes both`` once ran one loader cell labelled "both", and any typo a whole grid
    labelled with it: the parser refuses it, naming the modes there are."""
    from lading.cli import build_parser

    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["bench", "--modes", modes])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "--modes" in err and "loader" in err and "train" in err


@pytest.mark.parametrize(
    ("modes", "parsed"),
    [("loader", ["loader"]), ("loader,train", ["loader", "train"]), ("train", ["train"])],
)
def test_modes_are_a_comma_list_of_loader_and_train(modes: str, parsed: list[str]) -> None:
    options, _, _ = plan("--modes", modes)  # type: ignore[misc]
    assert options.modes == parsed


def test_the_modes_help_names_a_comma_list() -> None:
    from lading.cli import build_parser

    bench = build_parser()._subparsers._group_actions[0].choices["bench"]  # type: ignore[union-attr]
    assert "loader,train" in bench.format_help() and "both" not in bench.format_help()


def test_a_cell_of_another_mode_is_refused() -> None:
    """Through the library too: a cell measures loading or training, nothing else."""
    from lading.bench.cell import Cell

    with pytest.raises(ValueError, match=r"mode 'both'.*loader.*train"):
        Cell("packed", 1, "both")


def test_the_parser_knows_the_modes_of_a_cell() -> None:
    from lading.bench.cell import MODES
    from lading.cli.bench import BENCH_MODES

    assert BENCH_MODES == MODES


@pytest.fixture
def ran(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The output folder each ``lading bench`` run is given; nothing is planned or run."""
    import lading.bench
    import lading.cli.bench as cli_bench

    outs: list[Path] = []
    monkeypatch.setattr(cli_bench, "bench_plan", lambda args: (None, None, 1))
    monkeypatch.setattr(cli_bench, "bench_tokenizer", lambda args: None)

    def run_bench(options: object, settings: object, out: Path, **kw: object) -> dict[str, list]:
        outs.append(out)
        return {"cells": []}

    monkeypatch.setattr(lading.bench, "run_bench", run_bench)
    return outs


@pytest.mark.parametrize(
    ("argv", "out"),
    [
        (["bench", "ir", "mydir"], "mydir"),
        (["bench", "ir", "mydir", "--out", "mydir"], "mydir"),
        (["bench", "--out", "elsewhere"], "elsewhere"),
        (["bench"], "bench-out"),
        (["bench", "ir"], "bench-out"),
    ],
)
def test_bench_ir_dir_is_the_output_folder(
    argv: list[str], out: str, ran: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """``lading bench ir DIR`` once wrote to ./bench-out (replacing an earlier run there) and
    never made DIR: DIR is where the results go, as ``report DIR`` is where they are read."""
    from lading.cli import main

    assert main(argv) == 0
    assert ran == [Path(out)]
    assert f"results in {out} " in capsys.readouterr().out


def test_bench_ir_dir_and_another_out_are_refused(
    ran: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    from lading.cli import main

    assert main(["bench", "ir", "mydir", "--out", "other"]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "mydir" in error and "--out other" in error and ran == []


@pytest.mark.parametrize("budget", ["0", "0G", "0.0001"])
def test_a_memory_budget_of_nothing_is_refused(budget: str) -> None:
    # every cell would be recorded as out of memory, and the run exit 0
    with pytest.raises(ValueError, match=r"--memory-budget .*: .*at least 1 MiB.* e\.g\. 8G"):
        plan("--memory-budget", budget)


@pytest.mark.parametrize("budget", ["1.2.3G", "8 gigs", "1e3G"])
def test_a_memory_budget_that_is_no_size_names_the_flag_and_the_forms(budget: str) -> None:
    """One reader of sizes for the bench's budget and the node cache's cap: a malformed one
    names the flag and the forms taken (was: ``could not convert string to float`` for
    ``1.2.3G``, a bench-only message for the others)."""
    with pytest.raises(ValueError, match=r"--memory-budget=.*expected bytes as a number"):
        plan("--memory-budget", budget)


def test_the_bench_and_the_node_cache_read_sizes_alike() -> None:
    from lading.bench import parse_bytes
    from lading.remote.settings import parse_bytes as cache_bytes

    for text in ("8G", "512MiB", "1.5GB", "1048576", " 2 k "):
        assert parse_bytes(text) == cache_bytes(text), text
