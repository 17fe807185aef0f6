"""Every README code block runs on a fresh clone, offline, in a folder `lading example` made.

Each ```python and ```bash block is run here (fast ones by default, heavier ones marked slow),
in tests/test_readme_integrations.py (the framework section), or named in :data:`NOT_RUN`
with the reason. A new block that is none of these fails
:func:`test_every_block_is_run_or_named`.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest

from readme_blocks import blocks, commands, run_block
from test_readme_integrations import FRAMEWORK_BLOCKS

pytestmark = pytest.mark.e2e  # a whole user path: see the e2e marker in pyproject.toml

NOT_RUN = {
    "lading #1": "installs packages and runs the bench and the whole suite: what .ci/run does "
    "in a new virtual environment",
    "The last leg: batches to the GPU #1": "a fragment over a loader defined elsewhere, on a "
    "CUDA device; tests/test_device.py runs DevicePrefetcher",
    "With HF Accelerate or the HF Trainer #1": "the loop of tests/accelerate_job.py, which "
    "tests/test_accelerate.py runs under accelerate launch with 2 processes",
    "Beyond one machine #1": "several nodes (and Slurm); tests/test_multinode.py runs 2 "
    "simulated nodes",
    "Beyond one machine #2": "several nodes (and Slurm); tests/test_bench_launched.py runs the "
    "launched bench",
    "`lading bench` #1": "each line runs a grid for minutes; test_bench_lines_are_accepted "
    "plans every line here (flags checked, files found) and tests/test_bench.py runs grids",
    "Building in parallel #2": "Slurm's sbatch; tests/stores/test_parallel.py runs the same "
    "commands at N = 1..4 and with several files",
    "Building in parallel #3": "fragments for torchrun workers and a Ray cluster; "
    "tests/stores/test_parallel.py runs shard='auto' under gloo ranks and "
    "tests/integrations/test_ray.py the Datasink",
}
FAST = ["Quick start #1", "Building in parallel #1",
        "Language models: token streams with BPTT continuity #2",
        "Language models: token streams with BPTT continuity #3",
        "Session-based recommendation: partitioned parquet without DDP hangs #1",
        "Corpora larger than a node's disk #1"]  # fmt: skip
# heavier: training runs; edits only make them shorter
SLOW = {
    "Training a cross-encoder (the study's task) #1": {
        "--steps 1000 --out runs/ce ": "--steps 20 --out runs/ce ",
        "--nproc_per_node 4": "--nproc_per_node 2",
        "--steps 1000 --out runs/ce-ddp": "--steps 10 --out runs/ce-ddp",
    },
    "Language models: token streams with BPTT continuity #1": {
        "--vocab-size 8000": "--vocab-size 2000",
    },
}


def test_every_block_is_run_or_named() -> None:
    found = set(blocks())
    covered = [set(FAST), set(SLOW), set(FRAMEWORK_BLOCKS), set(NOT_RUN)]
    assert sum(len(c) for c in covered) == len(set().union(*covered)), "a block is listed twice"
    assert found == set().union(*covered), (
        f"not run nor named: {sorted(found - set().union(*covered))}; "
        f"listed but not in README: {sorted(set().union(*covered) - found)}"
    )


@pytest.mark.parametrize("name", FAST)
def test_readme_block_runs(name: str, readme_example: Path, tmp_path: Path) -> None:
    run_block(blocks()[name], readme_example, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SLOW))
def test_readme_training_block_runs(name: str, readme_example: Path, tmp_path: Path) -> None:
    work = run_block(blocks()[name], readme_example, tmp_path, edits=SLOW[name])
    if name.startswith("Training"):
        assert (work / "runs/ce/rerank.trec").is_file()
        assert (work / "runs/ce-ddp/model").is_dir()


def test_quick_start_reads_ids_the_example_has(readme_example: Path) -> None:
    """README's ids are the example collection's (not MS MARCO's 7067032)."""
    import re

    code = blocks()["Quick start #1"].code
    ids = set(re.findall(r'"(\d+)"', code))
    have = {line.split("\t", 1)[0] for line in (readme_example / "collection.tsv").open()}
    assert ids and ids <= have, sorted(ids - have)


def bench_lines() -> list[str]:
    return [c for c in commands(blocks()["`lading bench` #1"]) if c.startswith("lading bench")]


@pytest.mark.parametrize("line", bench_lines())
def test_bench_lines_are_accepted(
    line: str, readme_example: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every `lading bench` line of README is planned in the example folder: its flags valid
    here, its files found; the CUDA-only line is refused on a machine without CUDA."""
    import torch

    from lading.cli import bench_plan, build_parser

    monkeypatch.chdir(readme_example)
    argv = shlex.split(line.split("#", 1)[0])[1:]
    args = build_parser().parse_args(argv)
    if args.pin_memory and not torch.cuda.is_available():
        with pytest.raises(ValueError, match="--pin-memory"):
            bench_plan(args)
        return
    _, settings, _ = bench_plan(args)
    assert settings.sampling == ("run" if args.negatives else "random")
    if args.model != "tiny":
        from lading.cli.bench import bench_tokenizer

        assert bench_tokenizer(args) == str(Path(args.model) / "tokenizer.json")


def test_lading_example_refuses_too_few_passages(tmp_path: Path) -> None:
    import subprocess

    done = subprocess.run(
        [sys.executable, "-m", "lading", "example", str(tmp_path / "x"), "--passages", "10"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "--passages" in done.stderr, done.stderr


def test_lading_example_in_the_first_commands_venv_says_what_it_left_out(
    tmp_path: Path,
) -> None:
    """README's first command installs .[hf,irds,bench], without pyarrow: `lading example .`
    there made nothing (No module named 'pyarrow'). It makes what it can, names what it left
    out and the extra to install, and README's quick start says the same."""
    import subprocess

    no_pyarrow = (
        "import sys; sys.modules['pyarrow'] = None\n"  # as in a venv without the extra
        "from lading.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", no_pyarrow, "example", str(tmp_path / "x")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stdout.splitlines() if line.startswith("not made")]
    assert said == [
        'not made: sessions/ (parquet needs pyarrow: pip install "lading[parquet]"); the '
        "session-based recommendation examples read it"
    ], done.stdout
    assert (tmp_path / "x" / "tiny-bert" / "config.json").is_file()
    assert not (tmp_path / "x" / "sessions").exists()
    quick_start = Path(__file__).parent.parent.joinpath("README.md").read_text()
    quick_start = quick_start.split("## Quick start", 1)[1].split("```", 1)[0]
    assert "`.[hf,irds,bench]`" in quick_start and "lading[parquet]" in quick_start


def test_example_folder_holds_what_readme_names(readme_example: Path) -> None:
    import json

    for name in ("collection.tsv", "docs.tsv", "queries.tsv", "qrels.txt", "bm25.run",
                 "tokenizer.json", "bert-tokenizer/tokenizer.json", "tiny-bert/config.json",
                 "wiki.jsonl", "wiki/corpus", "sessions/178/train.parquet"):  # fmt: skip
        assert (readme_example / name).exists(), name
    first = json.loads((readme_example / "docs.jsonl").open().readline())
    assert set(first) == {"doc_id", "title", "text"}
    judged = {line.split()[2] for line in (readme_example / "qrels.txt").open()}
    ranked = {line.split()[2] for line in (readme_example / "bm25.run").open()}
    assert judged & ranked  # the run finds relevant documents: groups have positives and negatives
