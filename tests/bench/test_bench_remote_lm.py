"""benchmarks/bench_remote_lm.py on a tiny synthetic corpus, so the script cannot rot: every
system it names either measures an epoch or says why not, and the resume checks run."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]


def run_bench(out: Path, *extra: str) -> dict[str, Any]:
    command = [sys.executable, str(REPO / "benchmarks" / "bench_remote_lm.py"), "--synthetic",
               "--tokens", "40000", "--seq-len", "256", "--batch", "4", "--repeats", "1",
               "--ceiling-seconds", "0", "--latency", "0.003", "--parquet-epochs", "1",
               "--out", str(out), *extra]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO / "src")})  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Remote token corpora and sessions, head to head (issue 41)" in done.stdout
    results: dict[str, Any] = json.loads((out / "results.json").read_text())
    return results


@pytest.mark.slow  # the script's whole run over the local S3 (~15 s)
def test_lading_from_disk_and_the_bucket_and_parquet(tmp_path: Path) -> None:
    """lading's rows: an epoch of every window (the local corpus: ~40,000 tokens / 256 a
    window), bytes counted, the state resumes exactly; both parquet routes read every session."""
    results = run_bench(tmp_path / "out", "--systems", "lading-local,lading,lading+step")
    rows = {r["system"]: r for r in results["rows"]}
    local = rows["lading-local"]
    assert "error" not in local, local
    n_tokens = results["corpus"]["n_tokens"]
    assert local["windows"] == (n_tokens - 1) // 256  # every window once, nothing dropped
    assert local["tokens_s"] > 0 and local["gets"] == 0  # local: no request to the bucket
    assert local["resume"] == "exact"
    remote = rows["lading"]
    if "error" not in remote:  # the remote route, once it is there
        assert remote["windows"] == local["windows"]
        assert remote["fetched_used"] > 0.5
        assert remote["resume"] == "exact"
    stepped = rows["lading+step"]  # a training step a batch: the same windows, none dropped
    assert "error" in stepped or stepped["windows"] == local["windows"], stepped
    assert {"parquet-local", "parquet-remote"} <= set(rows)
    for where in ("parquet-local", "parquet-remote"):  # an epoch of 4 files of 20,000
        assert rows[where].get("sessions", 0) == 80_000, rows[where]


@pytest.mark.slow
def test_the_peers_measure_an_epoch_and_resume(tmp_path: Path) -> None:
    """Mosaic and litdata by their own routes on the local S3: an epoch each, bytes fetched
    within reach of those used, their resume checked."""
    pytest.importorskip("litdata")
    if importlib.util.find_spec("streaming") is None:
        pytest.skip("mosaicml-streaming is not installed")
    # half the corpus: Mosaic counts its index.json in the cache, and refuses a cache under it
    results = run_bench(tmp_path / "out", "--systems", "mosaic,litdata", "--no-parquet",
                        "--share", "0.5")  # fmt: skip
    rows = {r["system"]: r for r in results["rows"]}
    for peer in ("mosaic", "litdata"):
        row = rows[peer]
        assert "error" not in row, row
        assert row["windows"] > 0 and row["gets"] > 0
        assert 0.9 < row["fetched_used"] < 3, row
        assert row["resume"] == "exact", row


@pytest.mark.slow  # the script's run over the local S3 (~10 s)
def test_a_second_epoch_is_measured_apart_and_a_cache_over_the_corpus_serves_it(
    tmp_path: Path,
) -> None:
    """``--epochs 2``: the same reader's second epoch in the row's ``later``, every window
    read again; at a cache above the corpus it fetches (nearly) nothing, and the report's
    table of second epochs says so."""
    results = run_bench(tmp_path / "out", "--systems", "lading@blocks", "--no-parquet",
                        "--share", "1.1", "--epochs", "2", "--resume-after", "0")  # fmt: skip
    row = results["rows"][0]
    assert "error" not in row, row
    (second,) = row["later"]
    assert second["windows"] == row["windows"] > 0
    assert row["fetched_used"] > 0.9  # the first epoch fetched the corpus
    assert second["fetched_used"] < 0.2, second  # the second read it from the cache
    sys.path.insert(0, str(REPO / "benchmarks"))
    from remote_lm_report import render

    later = render(results).split("The second epoch of the same reader")[1]
    assert "| lading@blocks |" in later, later
