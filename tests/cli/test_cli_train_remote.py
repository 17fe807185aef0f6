"""``lading train lm --corpus s3://...`` and ``lading train sessions --data s3://...`` through
the command's entry point, in this process, on the local S3: the URL reaches the trainer as a
URL (not refused as a missing file, not made into ``s3:/...``), the data comes by GETs into the
node cache ``$LADING_CACHE`` names, and a missing day is one line naming the object."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import node_cache_from_env
from lading.cli import main
from lading.testing import LocalS3

pytest.importorskip("torch")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
pytest.importorskip("tokenizers")

BUCKET = "cli-train-remote"


@pytest.fixture
def node_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return node_cache_from_env(tmp_path, monkeypatch, "2M")


@pytest.fixture(scope="module")
def bucket(s3: LocalS3) -> str:
    s3.make_bucket(BUCKET)
    return BUCKET


def test_train_lm_reads_a_corpus_url(
    bucket: str, node_cache: Path, s3: LocalS3, tmp_path: Path
) -> None:
    """Before, argparse refused the URL: ``argument --corpus: s3://... does not exist``."""
    from conftest import word_corpus
    from lading.lm import TokenCorpus

    local = word_corpus(tmp_path / "a", docs=30, lengths=(5, 25), words=100, seed=0)
    url = f"s3://{bucket}/corpora/wiki"
    TokenCorpus.build(tmp_path / "a" / "docs.txt", url, local.tokenizer(), cache=tmp_path / "b")
    s3.reset()
    out = tmp_path / "run"
    argv = ["train", "lm", "--corpus", url, "--out", str(out), "--parallel", "none"]
    argv += ["--steps", "2", "--batch-size", "2", "--bptt", "8", "--emb", "8", "--hidden", "8"]
    assert main([*argv, "--layers", "1", "--valid-fraction", "0.1"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["config"]["corpus"] == url
    assert s3.stats()["gets"] > 0 and any(node_cache.iterdir())


def _days(bucket: str, folder: Path, days: tuple[int, ...], prefix: str) -> str:
    """Sessions of ``days`` (train, valid, test) uploaded below a prefix; its URL."""
    from lading.remote.clients import open_client

    client = open_client(f"s3://{bucket}")
    for day in days:
        for split in ("train", "valid", "test"):
            items = [[day * 1000 + i * 10 + k for k in range(1 + i % 5)] for i in range(40)]
            path = folder / str(day) / f"{split}.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(pa.table({"items": pa.array(items, pa.list_(pa.int64()))}), path)
            client.put(f"{prefix}/{day}/{split}.parquet", path)
    return f"s3://{bucket}/{prefix}"


def sessions_argv(url: str, out: Path) -> list[str]:
    return [
        "train", "sessions", "--data", url, "--out", str(out), "--train-days", "1",
        "--eval-day", "2", "--column", "items", "--max-len", "4", "--batch-size", "8",
        "--steps", "2", "--dim", "8", "--parallel", "none",
    ]  # fmt: skip


def test_train_sessions_reads_a_prefix(
    bucket: str, node_cache: Path, s3: LocalS3, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before, ``--data s3://b/x`` was looked for on disk: ``missing ['s3:/b/x/1/train...']``."""
    url = _days(bucket, tmp_path / "days", (1, 2), "yoochoose")
    s3.reset()
    assert main(sessions_argv(url, tmp_path / "run")) == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["config"]["data"] == url
    assert summary["model"]["sessions"] == 3 * 40 - 3 * 8  # sessions of 2 items or more
    assert s3.stats()["gets"] > 0 and any(node_cache.iterdir())
    assert "2 steps on 1 process(es)" in capsys.readouterr().out


def test_train_sessions_names_a_missing_day_object(
    bucket: str, node_cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = _days(bucket, tmp_path / "days", (1,), "one-day")
    assert main(sessions_argv(url, tmp_path / "run")) == 2
    said = capsys.readouterr().err
    assert said.startswith("lading train sessions: missing [") and f"{url}/2/valid.parquet" in said
    assert "--data must hold one folder per day" in said


def _losses(out: Path) -> list[float]:
    return [json.loads(line)["loss"] for line in (out / "log.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_torchrun_ranks_read_one_url_to_the_local_losses(
    bucket: str, node_cache: Path, s3: LocalS3, tmp_path: Path
) -> None:
    """2 gloo ranks under torchrun, each opening the same URLs (one node cache): the losses of
    the same runs over the local corpus and folder (one intra-op thread: bit for bit)."""
    from conftest import word_corpus
    from distributed import run_cli
    from lading.lm import TokenCorpus

    local = word_corpus(tmp_path / "a", docs=40, lengths=(5, 25), words=100, seed=1)
    url = f"s3://{bucket}/corpora/ddp"
    TokenCorpus.build(tmp_path / "a" / "docs.txt", url, local.tokenizer(), cache=tmp_path / "b")
    days = _days(bucket, tmp_path / "days", (1, 2), "ddp-days")
    one_thread = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    lm = ["train", "lm", "--steps", "3", "--batch-size", "2", "--bptt", "8", "--emb", "8"]
    lm += ["--hidden", "8", "--layers", "1", "--log-every", "1"]
    for name, corpus in (("lm-local", str(local.path)), ("lm-url", url)):
        run_cli([*lm, "--corpus", corpus, "--out", str(tmp_path / name)], 2, env=one_thread)
    assert len(_losses(tmp_path / "lm-url")) == 3
    assert _losses(tmp_path / "lm-url") == _losses(tmp_path / "lm-local")
    for name, data in (("s-local", str(tmp_path / "days")), ("s-url", days)):
        argv = [*sessions_argv(data, tmp_path / name), "--log-every", "1"]
        run_cli([a if a != "none" else "ddp" for a in argv], 2, env=one_thread)
    assert _losses(tmp_path / "s-url") == _losses(tmp_path / "s-local")
    summary = json.loads((tmp_path / "s-url" / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["config"]["data"] == days
    assert s3.stats()["gets"] > 0 and any(node_cache.iterdir())
