"""The README's HF Accelerate recipe under ``accelerate launch``: 2 CPU processes, gloo.

``accelerate launch --cpu`` starts a single process (several only through MPI), so the test
asks for ``--multi_gpu`` with ``ACCELERATE_USE_CPU=true``: torchrun's launcher, CPU devices.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import TESTS
from distributed import free_port

pytestmark = pytest.mark.slow
pytest.importorskip("accelerate")  # declared in the `train` extra, which the test command installs
pytest.importorskip("transformers")
JOB = TESTS / "accelerate_job.py"


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small synthetic collection with a tokenizer and a pre-tokenized store."""
    import lading
    from lading.bench.synth import synth
    from lading.sources import read_records
    from lading.stores.tokens import save_tokenizer, train_tokenizer

    root = tmp_path_factory.mktemp("accelerate")
    files = synth("passages", 400, root / "synth", queries=24)
    texts = [r.text for r in read_records(files.corpus)]
    save_tokenizer(train_tokenizer(texts, "wordpiece", 1000), root / "tokenizer.json")
    lading.build_store(files.corpus, root / "store", tokenizer=root / "tokenizer.json")
    for name, path in (("queries.tsv", files.queries), ("qrels.txt", files.qrels)):
        shutil.copyfile(path, root / name)
    shutil.copyfile(files.run, root / "run.trec")
    return root


def accelerate_command() -> list[str]:
    """``accelerate launch`` of the environment running the tests (not one found elsewhere)."""
    script = Path(sys.executable).with_name("accelerate")
    if script.is_file():
        return [str(script), "launch"]
    return [sys.executable, "-m", "accelerate.commands.launch"]


def test_accelerate_launch_two_cpu_processes(data: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_HOME": str(tmp_path / "hf"),  # no default config of the user's is read
        "OMP_NUM_THREADS": "1",
        "ACCELERATE_USE_CPU": "true",
    }
    command = [
        *accelerate_command(),
        "--multi_gpu",  # accelerate's --cpu starts one process (several only through MPI)
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--main_process_port",
        str(free_port()),
        str(JOB),
        str(data),
        str(out),
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}"
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    assert [r["rank"] for r in ranks] == [0, 1]
    assert all(r["world_size"] == 2 for r in ranks), ranks[0]["distributed_type"]
    assert all("MULTI_CPU" in r["distributed_type"] and r["backend"] == "gloo" for r in ranks)
    # lading's loader gave each rank a disjoint, equal share covering the epoch
    first, second = (set(r["pairs"]) for r in ranks)
    assert len(ranks[0]["pairs"]) == len(ranks[1]["pairs"]) > 0
    assert not first & second
    assert len(first | second) == ranks[0]["dataset_len"]
    # Accelerate synchronised the gradients: the models trained and stayed identical
    assert all(r["changed"] > 0 for r in ranks)
    assert ranks[0]["checksum"] == pytest.approx(ranks[1]["checksum"], rel=1e-6, abs=1e-6)
    assert all(all(loss == loss and abs(loss) < 1e6 for loss in r["losses"]) for r in ranks)
