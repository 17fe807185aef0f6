"""Every code block of README.md and of the guides in docs/ runs on a fresh clone, offline, in a
folder `lading example` made.

Each ```python and ```bash block is run here (fast ones by default, heavier ones marked slow),
in tests/test_readme_integrations.py (docs/integrations.md), or named in :data:`NOT_RUN` with
the reason. A new block that is none of these fails :func:`test_every_block_is_run_or_named`.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest

from readme_blocks import Block, blocks, commands, run_block
from test_readme_integrations import FRAMEWORK_BLOCKS

pytestmark = pytest.mark.e2e  # a whole user path: see the e2e marker in pyproject.toml

REPO = Path(__file__).resolve().parent.parent
INSTALL = (
    "installs packages and runs the bench and the whole suite: what .ci/run does in a new "
    "virtual environment"
)
TIMING = "times `lading example`, which every test session runs (the readme_example fixture)"
BENCH = "docs/measured.md: `lading bench`: the study on your machine #1"
FIRST_STORE = "docs/getting-started.md: A first store #1"
IR_TOUR = "README.md: Documents by id: training groups for a ranker #1"
NOT_RUN = {
    "README.md: lading #1": INSTALL,
    "README.md: How long they take #1": TIMING,
    "docs/getting-started.md: Install, in a virtual environment #1": "makes a virtual "
    "environment; .ci/run makes one on every run",
    "docs/getting-started.md: Install, in a virtual environment #2": INSTALL,
    "docs/measured.md: Measured #1": TIMING,
    "docs/about-these-docs.md: Building the site #1": "installs the docs extra; .ci/run builds "
    "the site with --strict",
    "docs/loaders.md: The last leg: batches to the GPU #1": "a fragment over a loader defined "
    "elsewhere, on a CUDA device; tests/test_device.py runs DevicePrefetcher",
    "docs/cross-encoder.md: With HF Accelerate or the HF Trainer #1": "the loop of "
    "tests/accelerate_job.py, which tests/test_accelerate.py runs under accelerate launch with "
    "2 processes",
    "docs/language-models.md: Transformers: document boundaries, packing, mixtures #2": "a "
    "fragment over a model and batch defined elsewhere; "
    "tests/integrations/test_transformers_lm.py runs its lines on a tiny Llama",
    "docs/multi-node.md: Training on several nodes #1": "several nodes (and Slurm); "
    "tests/test_multinode.py runs 2 simulated nodes",
    "docs/multi-node.md: The bench across nodes #1": "several nodes (and Slurm); "
    "tests/test_bench_launched.py runs the launched bench",
    BENCH: "each line runs a grid for minutes; test_bench_lines_are_accepted plans every line "
    "here (flags checked, files found) and tests/test_bench.py runs grids",
    "docs/parallel-builds.md: Token corpora in shards #2": "Slurm's sbatch and a bucket; "
    "tests/lm/test_lm_shards.py runs the commands and tests/lm/test_lm_shards_remote.py "
    "the shards into the local S3",
    "docs/parallel-builds.md: Token corpora in shards #3": "fragments for workers and "
    "torchrun ranks; tests/lm/test_lm_shards.py runs shard='auto' under gloo ranks",
    "docs/parallel-builds.md: A Slurm array #1": "Slurm's sbatch; "
    "tests/stores/test_parallel.py runs the same commands at N = 1..4 and with several files",
    "docs/parallel-builds.md: From Python: torchrun, any launcher, Ray Data #1": "fragments "
    "for torchrun workers and a Ray cluster; tests/stores/test_parallel.py runs shard='auto' "
    "under gloo ranks and tests/integrations/test_ray.py the Datasink",
    "docs/parallel-builds.md: Ray Data #1": "a Ray cluster and a bucket; "
    "tests/integrations/test_ray_tokens.py and test_ray_s3.py run both sinks on a local Ray "
    "cluster, into a folder and into the local S3",
    "docs/parallel-builds.md: Parquet sessions written by Ray #1": "a Ray cluster; "
    "tests/integrations/test_ray.py writes sessions with write_parquet and reads them",
}
LM = "docs/language-models.md"
FAST = [
    IR_TOUR,
    "README.md: Language models: token streams #1",
    "README.md: Sessions: partitioned parquet without DDP hangs #1",
]
# the guides' blocks (~4-8 s each: builds, the local S3) and training runs: the slow set;
# README's own blocks stay in the default run. Edits only make them shorter
SLOW: dict[str, dict[str, str]] = {
    FIRST_STORE: {},
    "docs/stores.md: Build, inspect, verify, stage #1": {},
    "docs/loaders.md: The same keywords and methods #1": {},
    "docs/parallel-builds.md: From the command line #1": {},
    "docs/parallel-builds.md: Token corpora in shards #1": {},
    f"{LM}: Streams for an RNN: BPTT continuity #1": {},
    f"{LM}: Transformers: document boundaries, packing, mixtures #1": {},
    "docs/sessions.md: A loader over days of sessions #1": {},
    "docs/remote-stores.md: Corpora larger than a node's disk #1": {},
    "docs/remote-stores.md: Token corpora and mixtures #1": {},
    "docs/remote-stores.md: Parquet sessions #1": {},
    "docs/cross-encoder.md: Training a cross-encoder (the study's task) #1": {
        "--steps 1000 --out runs/ce ": "--steps 20 --out runs/ce ",
        "--nproc_per_node 4": "--nproc_per_node 2",
        "--steps 1000 --out runs/ce-ddp": "--steps 10 --out runs/ce-ddp",
    },
    f"{LM}: Build a token corpus #1": {},
    "docs/remote-stores.md: Training commands #1": {'"--steps", "5"': '"--steps", "2"'},
}


def test_every_block_is_run_or_named() -> None:
    found = set(blocks())
    covered = [set(FAST), set(SLOW), set(FRAMEWORK_BLOCKS), set(NOT_RUN)]
    assert sum(len(c) for c in covered) == len(set().union(*covered)), "a block is listed twice"
    assert found == set().union(*covered), (
        f"not run nor named: {sorted(found - set().union(*covered))}; "
        f"listed but in no page: {sorted(set().union(*covered) - found)}"
    )


@pytest.mark.parametrize("name", FAST)
def test_readme_block_runs(name: str, readme_example: Path, tmp_path: Path) -> None:
    run_block(blocks()[name], readme_example, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SLOW))
def test_readme_heavier_block_runs(name: str, readme_example: Path, tmp_path: Path) -> None:
    work = run_block(blocks()[name], readme_example, tmp_path, edits=SLOW[name])
    if "Training a cross-encoder" in name:
        assert (work / "runs/ce/rerank.trec").is_file()
        assert (work / "runs/ce-ddp/model").is_dir()


@pytest.mark.parametrize("name", [IR_TOUR, FIRST_STORE])
def test_examples_read_ids_the_example_has(name: str, readme_example: Path) -> None:
    """The ids the examples read are the example collection's (not MS MARCO's 7067032)."""
    import re

    ids = set(re.findall(r'"(\d+)"', blocks()[name].code))
    have = {line.split("\t", 1)[0] for line in (readme_example / "collection.tsv").open()}
    assert ids and ids <= have, sorted(ids - have)


def test_the_package_docstring_runs_in_the_example_folder(
    readme_example: Path, tmp_path: Path
) -> None:
    """The quick start of ``lading``'s docstring (the first block of its API page) runs as
    written in a folder ``lading example`` made: it reads ids the example has."""
    import re

    import lading

    found = re.search(r"```python\n(.*?)```", lading.__doc__ or "", re.S)
    assert found, "lading's docstring has no ```python quick start"
    block = Block("lading.__doc__: Quick start #1", "python", found.group(1), 0, "src/lading")
    run_block(block, readme_example, tmp_path, append="assert store['42'] and store['1']\n")


def bench_lines() -> list[str]:
    return [c for c in commands(blocks()[BENCH]) if c.startswith("lading bench")]


@pytest.mark.parametrize("line", bench_lines())
def test_bench_lines_are_accepted(
    line: str, readme_example: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every `lading bench` line of the guide is planned in the example folder: its flags valid
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


@pytest.mark.slow  # lading example in a subprocess: ~6 s
def test_lading_example_in_the_first_commands_venv_says_what_it_left_out(
    tmp_path: Path,
) -> None:
    """README's first command installs .[hf,irds,bench], without pyarrow: `lading example .`
    there made nothing (No module named 'pyarrow'). It makes what it can, names what it left
    out and the extra to install, and the getting-started guide says the same."""
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
    made = {p.name for p in (tmp_path / "x").iterdir()}
    listed = done.stdout + guide_of_example()
    assert all(name in listed for name in made), (made, done.stdout)  # (code.txt was not)
    guide = (REPO / "docs" / "getting-started.md").read_text()
    guide = guide.split("## The example folder", 1)[1].split("\n## ", 1)[0]
    assert "`.[hf,irds,bench]`" in guide and "lading[parquet]" in guide


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


def test_lading_example_prints_its_table_and_nothing_else(readme_example: Path) -> None:
    """`lading example` printed six blank lines (the tokenizer trainers' progress, with no
    terminal) and a transformers "Writing model shards" bar on stderr before its table."""
    out = (readme_example / "said.stdout").read_text().splitlines()
    assert out and all(line.strip() for line in out), out[:8]
    assert out[-1].startswith("the examples in README.md and docs/ run in")
    assert "Writing model shards" not in (readme_example / "said.stderr").read_text()


def guide_of_example() -> str:
    """getting-started.md's section on the example folder."""
    guide = (REPO / "docs" / "getting-started.md").read_text()
    return guide.split("## The example folder", 1)[1].split("\n## ", 1)[0]
