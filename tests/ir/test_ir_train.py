"""lading train cross-encoder, for real: torchrun with gloo, SIGKILL and resume, DP.

The Accelerate recipe: tests/integrations/test_accelerate.py (accelerate launch, 2 CPU processes).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from distributed import run_cli

pytestmark = pytest.mark.slow
pytest.importorskip("transformers")
POOL = "ir/normalized/msmarco-passage-trecdl1920-pool"


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The real pool's passages and run, with the judgements of 6 queries (a short epoch)."""
    from conftest import shared_data

    root = shared_data()
    if root is None:
        pytest.skip("real data not found: set LADING_DATA or put it at ../shared/data")
    tmp = tmp_path_factory.mktemp("train")
    pool = root / POOL
    lines = (pool / "qrels.in_pool.txt").read_text().splitlines()
    keep = sorted({line.split()[0] for line in lines})[:6]
    qrels = tmp / "qrels.txt"
    qrels.write_text("".join(f"{line}\n" for line in lines if line.split()[0] in keep))
    return {
        "corpus": pool / "docs.tsv",
        "queries": pool / "queries.tsv",
        "qrels": qrels,
        "run": pool / "runs/dl19.bm25.run",
        "tmp": tmp,
    }


def train_args(small: dict[str, Path], out: Path, *extra: str) -> list[str]:
    return [
        "train",
        "cross-encoder",
        "--out",
        str(out),
        "--corpus",
        str(small["corpus"]),
        "--queries",
        str(small["queries"]),
        "--qrels",
        str(small["qrels"]),
        "--negatives",
        str(small["run"]),
        "--model",
        "tiny",
        "--group-size",
        "4",
        "--max-length",
        "96",
        "--lr",
        "5e-4",
        "--log-every",
        "2",
        "--trace",
        *extra,
    ]


def trace(out: Path, rank: int = 0) -> dict[int, dict[str, Any]]:
    """Per-step records of a rank; after a resume the last record of a step wins."""
    records: dict[int, dict[str, Any]] = {}
    for line in (out / f"trace-rank{rank}.jsonl").read_text().splitlines():
        record = json.loads(line)
        records[record["step"]] = record
    return records


def test_two_ranks_with_torchrun_see_disjoint_pairs(small: dict[str, Path]) -> None:
    out = small["tmp"] / "ddp"
    run_cli(train_args(small, out, "--batch-size", "8", "--epochs", "1"), torchrun=2)
    ranks = [trace(out, r) for r in range(2)]
    assert len(ranks[0]) == len(ranks[1]) > 3  # the same number of batches
    pairs = [[p for rec in r.values() for p in rec["pairs"]] for r in ranks]
    qrels = [line.split() for line in small["qrels"].read_text().splitlines()]
    relevant = {f"{q}/{d}" for q, _, d, rel in qrels if int(rel) >= 1}
    assert set(pairs[0]) | set(pairs[1]) == relevant  # complete
    assert len(set(pairs[0]) & set(pairs[1])) <= 1  # disjoint but for the wrap-around pad
    summary = json.loads((out / "summary.json").read_text())
    assert summary["world_size"] == 2
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert set(log[-1]["memory"]) == {"rank0", "rank1"} and log[-1]["samples_per_s"] > 0


def test_killed_and_resumed_equals_uninterrupted(small: dict[str, Path]) -> None:
    first = small["tmp"] / "tokenizer-run"
    run_cli(train_args(small, first, "--steps", "1", "--parallel", "none"))
    shared = str(first / "tokenizer" / "tokenizer.json")  # one vocabulary for both runs
    steps = [
        "--batch-size",
        "4",
        "--steps",
        "10",
        "--parallel",
        "none",
        "--checkpoint-every",
        "1",
        "--tokenizer",
        shared,
    ]
    # one intra-op thread: with two, a process's float reductions may differ in the last bits
    # from another's (seen in tests/lm/test_lm_train.py), which is no data difference
    one_thread = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    reference = small["tmp"] / "reference"
    run_cli(train_args(small, reference, *steps), env=one_thread)
    killed = small["tmp"] / "killed"
    proc = subprocess.Popen(
        [sys.executable, "-m", "lading", *train_args(small, killed, *steps)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **one_thread},
    )
    deadline = time.monotonic() + 300
    path = killed / "trace-rank0.jsonl"
    while time.monotonic() < deadline:
        if path.exists() and len(path.read_text().splitlines()) >= 4:
            break
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert len(trace(killed)) < 10, "the run finished before it could be killed"
    run_cli(train_args(small, killed, *steps, "--resume"), env=one_thread)
    want, got = trace(reference), trace(killed)
    assert sorted(got) == sorted(want) == list(range(1, 11))
    for step in want:
        assert got[step]["pairs"] == want[step]["pairs"], step
        assert got[step]["input_sum"] == want[step]["input_sum"], step
        assert got[step]["loss"] == want[step]["loss"], step


def test_data_parallel_mode_and_rerank(small: dict[str, Path]) -> None:
    out = small["tmp"] / "dp"
    run_cli(train_args(small, out, "--batch-size", "8", "--steps", "4", "--parallel", "dp"))
    assert (out / "model" / "model.safetensors").is_file()
    done = run_cli(
        [
            "rerank",
            "--model",
            str(out / "model"),
            "--store",
            str(out / "store"),
            "--queries",
            str(small["queries"]),
            "--run",
            str(small["run"]),
            "--out",
            str(out / "rerank.trec"),
            "--qrels",
            str(small["qrels"]),
            "--depth",
            "20",
            "--max-length",
            "96",
        ]
    )
    assert "nDCG@10" in done.stdout and "reranked" in done.stdout
    lines = (out / "rerank.trec").read_text().splitlines()
    assert lines[0].split()[1] == "Q0" and lines[0].split()[3] == "1"
    from lading.ir import read_run

    run = read_run(small["run"])  # the top 20 reranked, the rest below in the run's order
    per_query = {q: sum(line.split()[0] == q for line in lines) for q in run}
    assert per_query == {q: len(dict.fromkeys(docs)) for q, docs in run.items()}
    assert "R@100" in done.stdout and "below rank 20" in done.stdout
