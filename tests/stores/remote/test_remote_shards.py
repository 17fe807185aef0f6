"""A store built in shards straight into object storage (the local S3), merged in the bucket.

Each worker uploads its shard once whole (``shard.json`` last); the merge reads the shards'
ids and offsets from the bucket, uploads the id index and the offsets over all shards, then
``meta.json``. Compared with a one-process local build of the same inputs, by content.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import lading
from conftest import word_tokenizer, write
from lading.errors import StoreFormatError
from lading.remote.objects import RemoteWriteError
from lading.testing import LocalS3

WORDS = [f"w{i}" for i in range(50)]


def jsonl(path: Path, n: int) -> Path:
    rng = np.random.default_rng(7)
    lines = []
    for i in range(n):
        doc = {"id": f"d{i}", "text": " ".join(rng.choice(WORDS, int(rng.integers(1, 30))))}
        if i % 3 == 0:
            doc["title"] = f"title {i}"
        lines.append(json.dumps(doc))
    return write(path, "\n".join(lines) + "\n")


@pytest.mark.slow  # ~4-6 s: the default run keeps under its 10 minutes
def test_store_shards_upload_and_the_merge_commits_in_the_bucket(
    s3: LocalS3, bucket: str, tmp_path: Path
) -> None:
    src = jsonl(tmp_path / "c.jsonl", 900)
    url = f"s3://{bucket}/stores/s"
    one = lading.build_store(src, tmp_path / "one", progress=False)
    for i in (1, 0, 2):
        report = lading.build_shard(src, url, (i, 3), cache=tmp_path / f"w{i}")
        assert not report.reused
    again = lading.build_shard(src, url, (1, 3), cache=tmp_path / "w1")
    assert again.reused
    store = lading.merge_store(url, cache=tmp_path / "m")
    # string ids: the index keeps none, a reader checks candidates in the staged ids column
    assert store.meta["index"]["kind"] == "hash-ids" and store.meta["version"] == 3
    ids = one.ids()
    assert store.ids() == ids and len(store) == len(one)
    assert (store.find_rows(["d900", "d", "x" * 30]) == -1).all()
    assert store.get_many(ids[::-1]) == one.get_many(ids[::-1])
    assert [store.field(i, "title") for i in ids[:30]] == [one.field(i, "title") for i in ids[:30]]
    opened = lading.open_store(url, cache=tmp_path / "r")
    assert opened.snapshot == store.snapshot and opened.get_many(ids[:50]) == one.get_many(ids[:50])
    assert lading.merge_store(url, cache=tmp_path / "m2").snapshot == store.snapshot


def test_a_missing_store_shard_is_named_with_the_url(
    s3: LocalS3, bucket: str, tmp_path: Path
) -> None:
    src = jsonl(tmp_path / "c.jsonl", 300)
    url = f"s3://{bucket}/stores/t"
    lading.build_shard(src, url, (0, 2), cache=tmp_path / "w")
    with pytest.raises(StoreFormatError, match=rf"{url}: build build-\w+ has 1 of its 2 shards"):
        lading.merge_store(url, cache=tmp_path / "m")


def test_a_store_shard_into_a_missing_bucket_fails_before_reading(
    s3: LocalS3, tmp_path: Path
) -> None:
    with pytest.raises(RemoteWriteError, match="bucket 'no-such-bucket-49s' does not exist"):
        lading.build_shard(tmp_path / "c.jsonl", "s3://no-such-bucket-49s/x", (0, 2),
                           cache=tmp_path / "w")  # fmt: skip


def _folders(url: str) -> set[str]:
    """The top-level names under ``url`` in its bucket."""
    from lading.remote.clients import open_client

    return {key.split("/", 1)[0] for key in open_client(url).list()}


@pytest.mark.slow  # buckets on the local S3 (30 ms a request): ~5-11 s
def test_merges_into_a_bucket_let_replaced_snapshots_and_their_builds_go(
    s3: LocalS3, bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the grace, a merge into a bucket removes the snapshots it replaced and the builds
    only they used, as a merge in a folder does (every rebuild kept a whole copy of the shards
    in the bucket for ever; a one-process build after them too). A build no snapshot names
    yet (its shards waiting for their merge) is kept."""
    monkeypatch.setenv("LADING_SNAPSHOT_GRACE_S", "0")
    url = f"s3://{bucket}/stores/gc"
    for round_ in range(3):
        src = jsonl(tmp_path / f"c{round_}.jsonl", 60 + round_)  # other inputs: a new build
        for i in range(2):
            lading.build_shard(src, url, (i, 2), cache=tmp_path / f"w{round_}{i}")
        store = lading.merge_store(url, cache=tmp_path / f"m{round_}")
    names = _folders(url)
    builds = {n for n in names if n.startswith("build-")}
    snaps = {n for n in names if n.startswith("snap-")}
    assert snaps == {store.snapshot}, names
    assert builds == {store.meta["build_id"]}, names
    waiting = jsonl(tmp_path / "c9.jsonl", 99)
    lading.build_shard(waiting, url, (0, 2), cache=tmp_path / "w9")  # its merge not yet run
    pending = {n for n in _folders(url) if n.startswith("build-")} - builds
    assert len(pending) == 1
    lading.build_store(jsonl(tmp_path / "one.jsonl", 30), url, overwrite=True,
                       cache=str(tmp_path / "u"), progress=False)  # fmt: skip
    names = _folders(url)
    assert not builds & names  # the merged build: its snapshot replaced, past the grace
    assert pending <= names  # the build under way: kept


@pytest.mark.parametrize("kind", ["store", "corpus"])
def test_records_skipped_by_a_shard_built_into_a_bucket_are_said_with_its_url(
    s3: LocalS3, bucket: str, tmp_path: Path, kind: str
) -> None:
    """A shard built into a bucket with ``on_error="skip"`` names the URL in its warning (it
    named the scratch folder the shard was built in, removed by the time it is read)."""
    from lading.errors import SkippedRecordsWarning
    from lading.lm import TokenCorpus

    lines = jsonl(tmp_path / "c.jsonl", 40).read_text().splitlines()
    lines[25] = "{broken"
    src = write(tmp_path / "bad.jsonl", "\n".join(lines) + "\n")
    url = f"s3://{bucket}/skips/{kind}"
    with pytest.warns(SkippedRecordsWarning) as caught:
        if kind == "store":
            lading.build_shard(src, url, (1, 2), on_error="skip", cache=tmp_path / "w")
        else:
            tok = word_tokenizer(WORDS, tmp_path / "t.json")
            TokenCorpus.build_shard(src, url, (1, 2), tok, on_error="skip", cache=tmp_path / "w")
    said = [str(w.message) for w in caught if issubclass(w.category, SkippedRecordsWarning)]
    assert said and all(url in s and str(tmp_path / "w") not in s for s in said), said


def test_shards_for_a_bucket_that_would_drop_duplicates_are_refused_before_reading(
    s3: LocalS3, bucket: str, tmp_path: Path
) -> None:
    """A merge in a bucket keeps every row, so a shard built into one with
    ``duplicates='first'`` or ``'last'`` could never be merged: refused before the source is
    read (it was refused at the merge, after every shard of the array was built), naming the
    route that keeps one row: a folder, merged there, then uploaded."""
    missing = tmp_path / "not-read.jsonl"  # never opened: the refusal comes first
    url = f"s3://{bucket}/stores/dup"
    for keep in ("first", "last"):
        with pytest.raises(ValueError, match=rf"{url}: .*keeps every row.*lading merge") as e:
            lading.build_shard(missing, url, (0, 2), duplicates=keep, cache=tmp_path / "w")
        assert f"duplicates={keep!r}" in str(e.value)


def test_a_duplicate_id_across_shards_in_a_bucket_names_the_fix_a_bucket_takes(
    s3: LocalS3, bucket: str, tmp_path: Path
) -> None:
    """Two shards holding one id: the merge in the bucket names both rows and a fix it can
    take (the source's duplicate removed, its shards built again), not ``duplicates='first'``,
    which a bucket's shards refuse."""
    lines = [json.dumps({"id": f"d{i % 5 if i == 7 else i}", "text": f"t {i}"}) for i in range(10)]
    src = write(tmp_path / "c.jsonl", "\n".join(lines) + "\n")  # d2 at lines 3 and 8
    url = f"s3://{bucket}/stores/dupid"
    for i in range(2):
        lading.build_shard(src, url, (i, 2), cache=tmp_path / f"w{i}")
    with pytest.raises(StoreFormatError, match="duplicate id 'd2'") as e:
        lading.merge_store(url, cache=tmp_path / "m")
    assert "duplicates='first'" not in str(e.value), str(e.value)
    assert "Remove the duplicate from the source" in str(e.value)
