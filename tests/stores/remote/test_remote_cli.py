"""The command line on a store in object storage (the local S3): `lading build SRC s3://...`,
`lading train cross-encoder --store s3://...`, `lading bench --remote s3://...`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lading.remote.clients import open_client
from lading.testing import LocalS3

pytestmark = pytest.mark.slow  # the CLI in subprocesses, into the local S3 (~20 s)


def _lading(cwd: Path, *argv: str, timeout: float = 600) -> str:
    env = {**os.environ, "LADING_CACHE": str(cwd / "cache"), "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run(
        [sys.executable, "-m", "lading", *argv], cwd=cwd, env=env, capture_output=True,
        text=True, timeout=timeout,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.fixture
def example(readme_example: Path, tmp_path: Path) -> Path:
    work = tmp_path / "ex"
    shutil.copytree(readme_example, work)
    return work


def test_lading_build_writes_a_store_into_the_bucket(example: Path, bucket: str) -> None:
    url = f"s3://{bucket}/msmarco"
    said = _lading(example, "build", "collection.tsv", url, "--tokenizer", "bert-tokenizer/")
    assert said.startswith(f"{url}: 500 documents")
    assert not (example / "s3:").exists()
    manifest = json.loads(open_client(url).get("meta.json"))
    assert manifest["count"] == 500 and manifest["tokens"]


@pytest.mark.slow
def test_train_cross_encoder_and_bench_read_an_s3_store(
    s3: LocalS3, example: Path, bucket: str
) -> None:
    url = f"s3://{bucket}/msmarco"
    _lading(example, "build", "collection.tsv", url, "--tokenizer", "bert-tokenizer/")
    s3.reset()
    _lading(
        example, "train", "cross-encoder", "--store", url, "--queries", "queries.tsv",
        "--qrels", "qrels.txt", "--negatives", "bm25.run", "--model", "tiny-bert",
        "--steps", "4", "--batch-size", "4", "--max-length", "128", "--out", "runs/ce",
        "--parallel", "none",
    )  # fmt: skip
    assert (example / "runs/ce/model").is_dir() and s3.stats()["gets"] > 0
    bench = f"s3://{bucket}/bench"
    _lading(
        example, "bench", "--strategies", "packed", "--remote", bench, "--passages", "2000",
        "--world-sizes", "1", "--seconds", "0.2", "--repeats", "1", "--warmup", "1",
        "--steps", "2", "--out", "b",
    )  # fmt: skip
    results = json.loads((example / "b" / "results.json").read_text())
    assert {c["strategy"] for c in results["cells"]} >= {"packed", "remote"}
    assert open_client(bench).head("meta.json") is not None
