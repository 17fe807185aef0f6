"""Every loader under torchrun (gloo, DataLoader workers on), killed with SIGKILL at a random
step and resumed: on the same world size the batches are bitwise the uninterrupted run's; on
another (elastic) every sample is read, once apart from padding."""

from __future__ import annotations

import contextlib
import json
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import SEED, TESTS, log_reliability, word_tokenizer, write
from distributed import free_port

pytestmark = pytest.mark.slow  # SIGKILLs real processes at random moments: run by .ci/run

pytest.importorskip("tokenizers")
pq = pytest.importorskip("pyarrow.parquet")
JOB = TESTS / "loader_job.py"
FAST = ("--step-seconds", "0")  # runs nobody kills need no pretend compute


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 90-document store with 40 queries, a corpus of distinct words, 150 sessions."""
    import pyarrow as pa

    import lading
    from lading.lm import TokenCorpus

    root = tmp_path_factory.mktemp("data")
    docs = "".join(f"d{i}\tdocument number {i}\n" for i in range(90))
    lading.build_store(write(root / "docs.tsv", docs), root / "store", progress=False)
    write(root / "queries.tsv", "".join(f"q{i}\tquery {i}\n" for i in range(40)))
    qrels = "".join(f"q{i} 0 d{(i * 7 + k) % 90} 1\n" for i in range(40) for k in range(1 + i % 2))
    write(root / "qrels.txt", qrels)
    words = [f"u{i}" for i in range(400)]
    text = "\n\n".join(" ".join(words[i : i + 25]) for i in range(0, 400, 25)) + "\n"
    TokenCorpus.build(
        write(root / "u.txt", text), root / "corpus",
        word_tokenizer(words, root / "u.json"), progress=False,
    )  # fmt: skip
    table = pa.table({"session_id": pa.array(np.arange(150), pa.int64())})
    pq.write_table(table, root / "sessions.parquet", row_group_size=30)
    return root


def launch(kind: str, data: Path, out: Path, nproc: int, *extra: str) -> subprocess.Popen[str]:
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
        "--master_port", str(free_port()), str(JOB), kind, str(data), str(out), *extra,
    ]  # fmt: skip
    return subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def finish(proc: subprocess.Popen[str]) -> None:
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-4000:]


def traces(out: Path) -> dict[tuple[int, int], dict[str, Any]]:
    """(rank, step) → the last record written for it (a redone step overwrites)."""
    found: dict[tuple[int, int], dict[str, Any]] = {}
    for path in sorted(out.glob("trace-rank*.jsonl")):
        rank = int(path.stem.removeprefix("trace-rank"))
        for line in path.read_text().splitlines():
            record = json.loads(line)
            found[(rank, record["step"])] = record
    return found


def kill_tree(pid: int) -> None:
    """SIGKILL torchrun, its ranks (each in a session of its own) and their workers at once."""
    import psutil

    root = psutil.Process(pid)
    for process in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess):  # already gone
            process.send_signal(signal.SIGKILL)


def kill_at(proc: subprocess.Popen[str], out: Path, step: int) -> int:
    """SIGKILL the run once rank 0 has traced ``step``; the checkpoint's step at that moment."""
    deadline = time.monotonic() + 240
    trace = out / "trace-rank0.jsonl"
    while time.monotonic() < deadline and proc.poll() is None:
        if trace.exists() and len(trace.read_text().splitlines()) >= step:
            break
        time.sleep(0.01)
    kill_tree(proc.pid)
    proc.wait()
    assert proc.returncode != 0, "the run finished before it could be killed"
    return int(json.loads((out / "checkpoint.json").read_text())["step"])


def sample_keys(kind: str, records: list[dict[str, Any]]) -> Counter[Any]:
    """What identifies a sample: the query's group, an (input, target) pair, a session."""
    out: Counter[Any] = Counter()
    for record in records:
        for key in record["keys"]:
            out[json.dumps(key)] += 1
    return out


@pytest.mark.parametrize(("kind", "nproc", "elastic"), [
    ("ir", 2, 3), ("lm", 2, 3), ("parquet", 2, 3),
])  # fmt: skip
def test_killed_at_a_random_step_resumes(data: Path, tmp_path: Path, kind: str, nproc: int,
                                         elastic: int, rng: random.Random) -> None:  # fmt: skip
    reference = tmp_path / "reference"
    finish(launch(kind, data, reference, nproc, *FAST))
    want = traces(reference)
    steps = max(step for _, step in want)
    assert steps >= 6, "too few steps to kill in the middle"
    why = f"(kill steps drawn from LADING_TEST_SEED={SEED})"

    same = tmp_path / "same"
    killed_at = kill_at(launch(kind, data, same, nproc), same, rng.randrange(2, steps - 1))
    assert killed_at < steps, why
    finish(launch(kind, data, same, nproc, "--resume", *FAST))
    assert traces(same) == want, f"resumed batches differ from the uninterrupted run {why}"

    grown = tmp_path / "elastic"
    checkpoint = kill_at(launch(kind, data, grown, nproc), grown, rng.randrange(2, steps - 1))
    finish(launch(kind, data, grown, elastic, "--resume", *FAST))
    records = traces(grown)
    before = [
        r for (_, step), r in records.items() if step <= checkpoint and r["world_size"] == nproc
    ]
    after = [r for r in records.values() if r["world_size"] == elastic]
    assert after, why
    got = sample_keys(kind, before + after)
    expected = sample_keys(kind, list(want.values()))
    assert set(got) == set(expected), f"{len(set(expected) - set(got))} samples lost {why}"
    padding = nproc * 3 * 2 + elastic * 3 * 2  # at most a share's pad per reader or stream
    assert sum(got.values()) - len(got) <= padding, why
    log_reliability({"test": "kill_resume", "kind": kind, "steps": steps,
                     "same_world_killed_at": killed_at, "elastic_from_step": checkpoint,
                     "samples": len(got), "repeats": sum(got.values()) - len(got)})  # fmt: skip
