"""Two "nodes" on one machine: two torchrun launches joined by a c10d rendezvous on localhost.

Each node gets its own node-local directory and both share one directory. With
``LADING_SHARED_FS=0`` each node builds (and stages) once; with ``=1`` exactly one build
happens. Every global rank reads a disjoint, equal share; ``lading train cross-encoder`` runs
across the two nodes and resumes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from conftest import TESTS
from distributed import free_port
from lading.bench.synth import synth

pytestmark = pytest.mark.slow
JOB = TESTS / "multinode_job.py"


def launch_two_nodes(
    args: list[str], root: Path, nproc: int, env: dict[str, str], timeout: float = 600
) -> list[subprocess.CompletedProcess[str]]:
    """Start node 0 and node 1 (one torchrun each) at once; wait for both; fail on an error."""
    port = free_port()
    procs = []
    for node in range(2):
        node_dir = root / f"node{node}"
        node_dir.mkdir(parents=True, exist_ok=True)
        command = [
            sys.executable, "-m", "torch.distributed.run",
            "--nnodes", "2", "--node_rank", str(node), "--nproc_per_node", str(nproc),
            "--rdzv_backend", "c10d", "--rdzv_endpoint", f"localhost:{port}",
            "--rdzv_id", f"lading-test-{port}", *args,
        ]  # fmt: skip
        node_env = {**os.environ, **env, "NODE_DIR": str(node_dir)}
        procs.append(
            subprocess.Popen(
                command, env=node_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        )
    done = []
    for node, proc in enumerate(procs):
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            raise
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
        assert proc.returncode == 0, f"node {node} failed:\n{err[-8000:]}"
    return done


def events(shared: Path) -> list[tuple[str, str, int, int]]:
    lines = (shared / "events.log").read_text().split("\n")
    return [(k, node, int(r), int(lr)) for k, node, r, lr in (x.split() for x in lines if x)]


@pytest.mark.parametrize("shared_fs", ["0", "1"])
def test_two_nodes_build_stage_and_read_disjoint_shares(tmp_path: Path, shared_fs: str) -> None:
    files = synth("passages", 400, tmp_path / "c")
    shared = tmp_path / "shared"
    shared.mkdir()
    launch_two_nodes(
        [str(JOB), str(files.corpus), str(shared)],
        tmp_path,
        nproc=2,
        env={"LADING_SHARED_FS": shared_fs},
    )
    log = events(shared)
    builds = [e for e in log if e[0] == "build"]
    stages = [e for e in log if e[0] == "stage"]
    if shared_fs == "1":
        assert [(b[2], b[3]) for b in builds] == [(0, 0)]  # one build, by global rank 0
        assert not (tmp_path / "node0" / "store").exists()
    else:  # one build per node, by its local rank 0, into its own directory
        assert sorted(b[1] for b in builds) == ["node0", "node1"]
        assert all(b[3] == 0 for b in builds)
        assert (tmp_path / "node0" / "store").is_dir() and (tmp_path / "node1" / "store").is_dir()
    # each node stages once, by whichever of its local ranks took the stage's lock first; the
    # other waits for that lock and reads that copy
    assert sorted(s[1] for s in stages) == ["node0", "node1"], stages
    shares = [json.loads((shared / f"ids-rank{r}.json").read_text()) for r in range(4)]
    assert Counter(s["node"] for s in shares) == {"node0": 2, "node1": 2}
    assert len({s["batches"] for s in shares}) == 1  # equal batch counts: no DDP hang
    read = [i for s in shares for i in s["ids"]]
    assert len(read) == len(set(read)) == 400  # disjoint and complete


def test_two_node_cross_encoder_training_finishes_and_resumes(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    # 60 queries: ~8 batches per rank, so the checkpoint at step 2 is mid-epoch
    files = synth("passages", 600, tmp_path / "c", queries=60)
    out = tmp_path / "shared" / "run"
    train = [
        "-m", "lading", "train", "cross-encoder", "--out", str(out),
        "--corpus", str(files.corpus), "--queries", str(files.queries),
        "--qrels", str(files.qrels), "--negatives", str(files.run), "--model", "tiny",
        "--group-size", "4", "--max-length", "96", "--batch-size", "4",
        "--log-every", "1", "--checkpoint-every", "2", "--trace",
    ]  # fmt: skip
    env = {"LADING_SHARED_FS": "1"}
    launch_two_nodes([*train, "--steps", "2"], tmp_path, nproc=1, env=env)
    first = json.loads((out / "summary.json").read_text())
    assert first["world_size"] == 2
    launch_two_nodes([*train, "--steps", "4", "--resume"], tmp_path, nproc=1, env=env)
    steps = [
        [
            json.loads(line)["step"]
            for line in (out / f"trace-rank{r}.jsonl").read_text().splitlines()
        ]
        for r in range(2)
    ]
    assert steps[0] == steps[1] == [1, 2, 3, 4]  # steps 3 and 4 continued from the checkpoint
