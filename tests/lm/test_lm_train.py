"""lading train lm for real: DDP with torchrun (gloo), and a killed run resumed exactly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import write
from distributed import run_cli

pytestmark = pytest.mark.slow
pytest.importorskip("tokenizers")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from lading.lm import TokenCorpus
    from lading.lm.texts import iter_texts
    from lading.stores.tokens import save_tokenizer, train_tokenizer

    tmp = tmp_path_factory.mktemp("lm")
    rng = np.random.default_rng(0)
    words = [f"word{i}" for i in range(300)]
    docs = [" ".join(rng.choice(words, int(rng.integers(20, 200)))) for _ in range(200)]
    src = write(tmp / "docs.txt", "\n\n".join(docs) + "\n")
    tok = save_tokenizer(train_tokenizer(iter_texts(src), "bpe", 400), tmp / "tok.json")
    return TokenCorpus.build(src, tmp / "corpus", tok, progress=False).path


def lm_args(corpus: Path, out: Path, *extra: str) -> list[str]:
    return [
        "train",
        "lm",
        "--corpus",
        str(corpus),
        "--out",
        str(out),
        "--batch-size",
        "4",
        "--bptt",
        "12",
        "--emb",
        "32",
        "--hidden",
        "32",
        "--layers",
        "1",
        "--log-every",
        "1",
        "--valid-fraction",
        "0.1",
        *extra,
    ]


def test_ddp_with_torchrun_trains_and_evaluates(corpus: Path, tmp_path: Path) -> None:
    run_cli(lm_args(corpus, tmp_path / "ddp", "--steps", "30", "--eval-every", "15"), torchrun=2)
    summary = json.loads((tmp_path / "ddp" / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["steps"] == 30
    ppl = [e["valid_ppl"] for e in summary["evaluations"]]
    assert len(ppl) == 2 and ppl[1] < ppl[0] < 400  # learning, better than uniform guessing


def test_killed_and_resumed_equals_uninterrupted(corpus: Path, tmp_path: Path) -> None:
    """Resumed losses equal the uninterrupted run's bit for bit. One intra-op thread in every
    run: on a loaded 2-core machine, 1 of 4 identical uninterrupted runs (no kill) logged
    losses differing in their last bits at 8 of 40 steps with torch's default 2 threads, and
    none of 4 did with one thread: the reduction order is the thread team's, not the data's."""
    common = ["--steps", "40", "--parallel", "none", "--checkpoint-every", "1"]
    one_thread = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    run_cli(lm_args(corpus, tmp_path / "reference", *common), env=one_thread)
    killed = tmp_path / "killed"
    proc = subprocess.Popen(
        [sys.executable, "-m", "lading", *lm_args(corpus, killed, *common)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **one_thread},
    )
    log = killed / "log.jsonl"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if log.exists() and len(log.read_text().splitlines()) >= 10:
            break
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert len(log.read_text().splitlines()) < 40, "finished before it could be killed"
    run_cli(lm_args(corpus, killed, *common, "--resume"), env=one_thread)

    def losses(path: Path) -> dict[int, float]:
        return {r["step"]: r["loss"] for r in map(json.loads, path.read_text().splitlines())}

    want, got = losses(tmp_path / "reference" / "log.jsonl"), losses(log)
    assert sorted(got) == sorted(want) == list(range(1, 41))
    assert got == want
