"""Ray Data pipelines write a token corpus and a document store straight into object storage
(the local S3): each write task uploads its shard once whole, the driver commits in the bucket
(``meta.json`` last). Compared with one-process local builds of the same rows; a task SIGKILLed
after its upload and retried by Ray is taken once; a bucket that refuses writes stops the job
before any task runs. A local Ray cluster of real worker processes (slow set)."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ray_cluster import ray_cluster

import lading
from conftest import word_tokenizer, write
from lading.lm import TokenCorpus
from lading.remote.settings import RemoteSettings
from lading.testing import LocalS3

pytestmark = pytest.mark.slow  # starts a local Ray cluster
ray = pytest.importorskip("ray")
pytest.importorskip("tokenizers")
WORDS = ["alpha", "beta", "gamma", "delta"]


@pytest.fixture(scope="module")
def ray_and_s3(s3: LocalS3) -> Iterator[LocalS3]:
    """Ray started after the local S3, its workers given the S3's endpoint and credentials."""
    with ray_cluster(env=s3.env()):
        yield s3


def rows(n: int) -> list[dict[str, str]]:
    return [
        {"id": f"d{i}", "text": " ".join(WORDS[(i + k) % 4] for k in range(i % 9 + 1)) + f" w{i}"}
        for i in range(n)
    ]


def test_a_token_corpus_written_by_ray_into_a_bucket(
    ray_and_s3: LocalS3, bucket: str, tmp_path: Path
) -> None:
    from lading.integrations.ray_tokens import LadingTokenDatasink

    marker = tmp_path / "killed"

    class Dying(LadingTokenDatasink):  # task 1's first attempt dies after its upload
        def write(self, blocks: Any, ctx: Any) -> dict[str, Any]:
            wrote = LadingTokenDatasink.write(self, blocks, ctx)
            if ctx.task_idx == 1 and not marker.exists():
                marker.write_text("")
                os.kill(os.getpid(), signal.SIGKILL)
            return wrote

    data, tok = rows(2000), word_tokenizer(WORDS, tmp_path / "t.json")
    src = write(tmp_path / "src.jsonl", "".join(json.dumps(r) + "\n" for r in data))
    one = TokenCorpus.build(src, tmp_path / "one", tok, progress=False)
    url = f"s3://{bucket}/corpora/c"
    sink = Dying(url, tok, cache=tmp_path / "cache")
    ds = ray.data.from_items(data).repartition(3)
    ds.write_datasink(sink, ray_remote_args={"max_retries": 2})
    assert marker.exists()
    corpus = TokenCorpus.open(url, cache=tmp_path / "r")
    assert corpus.snapshot == sink.snapshot and len(corpus.meta["parts"]) == 3
    tokens, offsets = corpus.token_arrays()
    assert np.array_equal(offsets, one.token_arrays()[1])
    assert np.array_equal(tokens, one.token_arrays()[0])
    assert not list((tmp_path / "cache").glob("ray-*")), "scratch folders are removed"
    # the killed attempt's whole upload, named by no return, is gone from the bucket
    fetcher = RemoteSettings.of(tmp_path / "l", None, None).fetcher(url)
    try:
        keys = fetcher.list(f"{sink.build_id}/")
    finally:
        fetcher.close()
    folders = {k.split("/")[1] for k in keys} - {"build.json"}
    assert folders == {p["dir"].split("/")[1] for p in corpus.meta["parts"]}


def test_a_store_written_by_ray_into_a_bucket(
    ray_and_s3: LocalS3, bucket: str, tmp_path: Path
) -> None:
    from lading.integrations.ray import LadingDatasink

    data, tok = rows(1500), word_tokenizer(WORDS, tmp_path / "t.json")
    src = write(tmp_path / "src.jsonl", "".join(json.dumps(r) + "\n" for r in data))
    one = lading.build_store(src, tmp_path / "one", tokenizer=tok, progress=False)
    url = f"s3://{bucket}/stores/s"
    sink = LadingDatasink(url, tokenizer=tok, cache=tmp_path / "cache")
    ray.data.from_items(data).repartition(3).write_datasink(sink)
    store = lading.open_store(url, cache=tmp_path / "r")
    ids = one.ids()
    assert store.snapshot == sink.snapshot and store.ids() == ids
    assert store.get_many(ids) == one.get_many(ids)
    assert [t.tolist() for t in store.tokens_many(ids)] == [
        t.tolist() for t in one.tokens_many(ids)
    ]


def test_a_bucket_that_refuses_writes_stops_the_job_before_any_task(
    ray_and_s3: LocalS3, tmp_path: Path
) -> None:
    from lading.integrations.ray_tokens import LadingTokenDatasink

    tok = word_tokenizer(WORDS, tmp_path / "t.json")
    sink = LadingTokenDatasink("s3://no-such-bucket/c", tok, cache=tmp_path / "cache")
    with pytest.raises(Exception, match="no-such-bucket"):
        ray.data.from_items(rows(10)).write_datasink(sink)
    assert not (tmp_path / "cache").exists() or not list((tmp_path / "cache").iterdir())


def test_a_failed_job_into_a_bucket_leaves_the_snapshot_and_no_build(
    ray_and_s3: LocalS3, bucket: str, tmp_path: Path
) -> None:
    """Task 1 of 2 meets a null id once task 0 has uploaded its shard: the job fails, the
    bucket keeps the last snapshot, and task 0's upload under the failed build is removed (it
    stayed there for good before)."""
    import time

    from lading.integrations.ray import LadingDatasink

    uploaded = tmp_path / "task-0-uploaded"

    class Ordered(LadingDatasink):  # task 1 raises only after task 0's shard is in the bucket
        def write(self, blocks: Any, ctx: Any) -> dict[str, Any]:
            if ctx.task_idx == 1:
                deadline = time.monotonic() + 60
                while not uploaded.exists() and time.monotonic() < deadline:
                    time.sleep(0.05)
            wrote = LadingDatasink.write(self, blocks, ctx)
            if ctx.task_idx == 0:
                uploaded.write_text("")
            return wrote

    url = f"s3://{bucket}/stores/s"
    first = LadingDatasink(url, cache=tmp_path / "cache")
    ray.data.from_items(rows(20)).write_datasink(first)
    bad: list[dict[str, Any]] = [dict(r) for r in rows(200)]
    bad[150]["id"] = None
    failing = Ordered(url, cache=tmp_path / "cache")
    with pytest.raises(Exception, match="null id"):
        ray.data.from_items(bad).repartition(2).write_datasink(failing)
    assert uploaded.exists()
    store = lading.open_store(url, cache=tmp_path / "r")
    assert store.snapshot == first.snapshot and len(store) == 20
    fetcher = RemoteSettings.of(tmp_path / "l", None, None).fetcher(url)
    try:
        left = list(fetcher.list(f"{failing.build_id}/"))
    finally:
        fetcher.close()
    assert left == []


def test_a_job_whose_commit_loses_to_another_merge_says_to_run_it_again(
    ray_and_s3: LocalS3, bucket: str, tmp_path: Path
) -> None:
    """Another merge commits in the bucket while the job's commit runs: the job commits
    nothing, its build is removed, and its error says to run the job again. It said to name
    the job's build with --build-id, a build the failed job had just removed."""
    from lading.integrations.ray import LadingDatasink

    url = f"s3://{bucket}/stores/lost"
    src = write(tmp_path / "o.jsonl", "".join(json.dumps(r) + "\n" for r in rows(30)))
    for i in range(2):  # another build's shards, waiting for their merge
        lading.build_shard(src, url, (i, 2), cache=tmp_path / "w", progress=False)

    class Racing(LadingDatasink):  # that merge commits as this job's commit begins
        def commit_remote(self, settings: Any, root: Path, previous: Any, shards: Any) -> str:
            lading.merge_store(url, cache=tmp_path / "m")
            return LadingDatasink.commit_remote(self, settings, root, previous, shards)

    job = Racing(url, cache=tmp_path / "cache")
    with pytest.raises(Exception, match="while this Ray job committed") as failed:
        ray.data.from_items(rows(100)).repartition(2).write_datasink(job)
    assert "--build-id" not in str(failed.value) and "run the job again" in str(failed.value)
    store = lading.open_store(url, cache=tmp_path / "r")
    assert len(store) == 30  # the other merge's snapshot
    fetcher = RemoteSettings.of(tmp_path / "l", None, None).fetcher(url)
    try:
        assert list(fetcher.list(f"{job.build_id}/")) == []  # the job's build: removed
    finally:
        fetcher.close()
