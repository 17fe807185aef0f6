"""A run over a store in object storage, SIGKILLed at a random step, resumes with a cold node
cache to the very batches (and documents) of the uninterrupted run: resume never depends on
what the cache holds."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

import lading
from conftest import SEED, TESTS

sys.path.insert(0, str(TESTS / "loading"))
from test_kill_resume import data, finish, kill_at, launch, traces  # noqa: F401

pytestmark = pytest.mark.slow  # torchrun, DataLoader workers, SIGKILL


def test_killed_over_a_remote_store_resumes_with_a_cold_cache(
    data: Path,  # noqa: F811  # the kill tests' 90-document store and queries
    bucket: str,
    tmp_path: Path,
    rng: random.Random,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = f"s3://{bucket}/store"
    corpus = tmp_path / "docs.tsv"
    corpus.write_text("".join(f"d{i}\tdocument number {i}\n" for i in range(90)))
    lading.build_store(corpus, url, cache=str(tmp_path / "b"), progress=False)
    store = ("--store", url)

    monkeypatch.setenv("LADING_CACHE", str(tmp_path / "cache-reference"))
    reference = tmp_path / "reference"
    finish(launch("ir", data, reference, 2, *store, "--step-seconds", "0"))
    want = traces(reference)
    steps = max(step for _, step in want)

    monkeypatch.setenv("LADING_CACHE", str(tmp_path / "cache-killed"))
    out = tmp_path / "killed"
    at = rng.randrange(2, steps - 1)
    killed_at = kill_at(launch("ir", data, out, 2, *store), out, at)
    assert killed_at < steps, f"(kill step from LADING_TEST_SEED={SEED})"
    monkeypatch.setenv("LADING_CACHE", str(tmp_path / "cache-cold"))  # a new node, say
    finish(launch("ir", data, out, 2, *store, "--resume", "--step-seconds", "0"))
    assert traces(out) == want, f"resumed batches differ (kill from LADING_TEST_SEED={SEED})"
