"""Two merges into one bucket at once (a Slurm ``afterok`` merge beside a user's own, a
retried pipeline step): ``meta.json`` is swapped only over the manifest the merge built on
(``If-Match`` its ETag; ``If-None-Match: *`` where there was none), so exactly one commits.
The other returns the winner's snapshot where it committed the same build (as a second merge
in a folder, under the build lock, commits nothing new) and removes its own snapshot's
objects; where the winner committed another build, it fails naming it. Before, both PUT
``meta.json`` unconditionally: the last won, and the other merge returned a snapshot that was
neither current nor in any history.

Each race is run deterministically: merge B runs whole inside merge A, after A uploaded its
snapshot's files and before its commit (or, for the swap itself, right before A's conditional
PUT is sent).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import lading
import lading.remote.clients
from conftest import word_tokenizer, write
from lading.errors import StoreFormatError
from lading.remote.client_fsspec import FsspecClient
from lading.remote.client_obstore import ObstoreClient
from lading.stores.building import remote_shards
from lading.testing import LocalS3


def docs(path: Path, word: str, n: int) -> Path:
    lines = [json.dumps({"id": f"{word}{i}", "text": f"{word} {i}"}) for i in range(n)]
    return write(path, "\n".join(lines) + "\n")


def build(src: Path, url: str, n: int, cache: Path, **kw: Any) -> str:
    reports = [lading.build_shard(src, url, (i, n), cache=cache, **kw) for i in range(n)]
    return reports[0].build_id


def snapshots_in(url: str) -> set[str]:
    """The snapshot folders that hold objects in the bucket."""
    keys = lading.remote.clients.open_client(url).list()
    return {k.split("/", 1)[0] for k in keys if k.startswith("snap-")}


def current(url: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(lading.remote.clients.open_client(url).get("meta.json"))
    return found


def beside_upload(monkeypatch: pytest.MonkeyPatch, other: Callable[[], Any]) -> list[Any]:
    """Run ``other`` (a whole merge) once, inside the next merge, right after that merge
    uploaded its snapshot's files and before it commits ``meta.json``; what it returned."""
    real = remote_shards.put_files
    ran: list[Any] = []

    def put_files(client: Any, files: list[tuple[str, Any, int]], **kw: Any) -> None:
        real(client, files, **kw)
        if not ran and files and all(k.startswith("snap-") for k, _, _ in files):
            ran.append(None)  # (before: its own upload comes through here too)
            ran[0] = other()

    monkeypatch.setattr(remote_shards, "put_files", put_files)
    return ran


def beside_swap(
    monkeypatch: pytest.MonkeyPatch, client: type, other: Callable[[], Any]
) -> list[Any]:
    """Run ``other`` once, inside the next merge, right before that merge's conditional PUT
    of ``meta.json`` is sent (after it found its manifest still current): the swap itself
    must then fail. The other merge runs in a thread while this one's call waits on the
    fetch loop: the read path's timeout is raised so that the call outlasts it."""
    monkeypatch.setenv("LADING_REMOTE_TIMEOUT", "300")
    real = client.replace_async
    ran: list[Any] = []

    async def replace_async(self: Any, key: str, data: bytes, etag: str) -> bool:
        if not ran:
            ran.append(None)
            ran[0] = await asyncio.to_thread(other)
        done: bool = await real(self, key, data, etag)
        return done

    monkeypatch.setattr(client, "replace_async", replace_async)
    return ran


@pytest.mark.slow  # buckets on the local S3 (30 ms a request): ~5-11 s
def test_two_merges_of_one_store_build_commit_it_once(
    s3: LocalS3, bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"s3://{bucket}/store"
    build(docs(tmp_path / "x.jsonl", "x", 40), url, 2, tmp_path / "w")
    first = lading.merge_store(url, cache=tmp_path / "m0").snapshot
    y = build(docs(tmp_path / "y.jsonl", "y", 60), url, 2, tmp_path / "w")
    b = beside_upload(monkeypatch, lambda: lading.merge_store(url, cache=tmp_path / "mb"))
    a = lading.merge_store(url, cache=tmp_path / "ma")
    assert b and a.snapshot == b[0].snapshot != first
    assert current(url)["snapshot"] == a.snapshot and current(url)["build_id"] == y
    assert len(lading.open_store(url, cache=tmp_path / "r")) == 60
    assert snapshots_in(url) == {first, a.snapshot}  # the loser's objects are gone


@pytest.mark.slow  # two merges racing over the local S3: ~3 s
def test_two_merges_of_one_corpus_build_commit_it_once(
    s3: LocalS3, bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No snapshot before: the commit is a create-only PUT of ``meta.json``."""
    pytest.importorskip("tokenizers")
    from lading.lm import TokenCorpus

    words = [f"w{i}" for i in range(20)]
    tok = word_tokenizer(words, tmp_path / "t.json")
    lines = [json.dumps({"text": " ".join(words[i:])}) for i in range(20)]
    src = write(tmp_path / "a.jsonl", "\n".join(lines) + "\n")
    url = f"s3://{bucket}/corpus"
    for i in range(2):
        TokenCorpus.build_shard(src, url, (i, 2), tok, cache=tmp_path / "w", progress=False)
    b = beside_upload(monkeypatch, lambda: TokenCorpus.merge(url, cache=tmp_path / "mb"))
    a = TokenCorpus.merge(url, cache=tmp_path / "ma")
    assert b and a.snapshot == b[0].snapshot
    assert TokenCorpus.open(url, cache=tmp_path / "r").snapshot == a.snapshot
    assert current(url).get("history") == []
    assert snapshots_in(url) == {a.snapshot}


@pytest.mark.slow  # a sharded build into the local S3 and two merges: ~5-9 s
def test_a_merge_whose_bucket_got_another_build_committed_meanwhile_fails(
    s3: LocalS3, bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"s3://{bucket}/store"
    x = build(docs(tmp_path / "x.jsonl", "x", 40), url, 2, tmp_path / "w")
    y = build(docs(tmp_path / "y.jsonl", "y", 60), url, 2, tmp_path / "w")
    b = beside_upload(
        monkeypatch, lambda: lading.merge_store(url, cache=tmp_path / "mb", build_id=y)
    )
    with pytest.raises(StoreFormatError) as e:
        lading.merge_store(url, cache=tmp_path / "ma", build_id=x)
    theirs = b[0].snapshot
    said = str(e.value)
    assert "\n" not in said and url in said and theirs in said and y in said and x in said
    assert "committed nothing" in said and "--build-id" in said
    assert current(url)["snapshot"] == theirs and current(url)["build_id"] == y
    assert snapshots_in(url) == {theirs}
    # named again, this merge's build commits over the other's
    again = lading.merge_store(url, cache=tmp_path / "ma2", build_id=x)
    assert current(url)["snapshot"] == again.snapshot and len(again) == 40


@pytest.mark.slow  # a sharded build into the local S3 and two merges: ~5-9 s
@pytest.mark.parametrize("backend", ["obstore", "fsspec"])
def test_the_conditional_put_itself_refuses_a_manifest_replaced_after_the_check(
    s3: LocalS3, bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    """The other merge commits between this one's look at the current manifest and its PUT:
    ``If-Match`` refuses it (412), and this merge takes the other's commit of its build."""
    monkeypatch.setattr(lading.remote.clients, "_obstore_usable", lambda: backend == "obstore")
    client = ObstoreClient if backend == "obstore" else FsspecClient
    url = f"s3://{bucket}/store"
    build(docs(tmp_path / "x.jsonl", "x", 40), url, 2, tmp_path / "w")
    first = lading.merge_store(url, cache=tmp_path / "m0").snapshot
    y = build(docs(tmp_path / "y.jsonl", "y", 60), url, 2, tmp_path / "w")
    b = beside_swap(monkeypatch, client, lambda: lading.merge_store(url, cache=tmp_path / "mb"))
    a = lading.merge_store(url, cache=tmp_path / "ma")
    assert b and a.snapshot == b[0].snapshot != first
    assert current(url)["snapshot"] == a.snapshot and current(url)["build_id"] == y
    assert snapshots_in(url) == {first, a.snapshot}


@pytest.mark.slow  # a sharded build into the local S3 and two merges: ~5-9 s
def test_a_swap_that_landed_but_was_not_answered_is_this_merges_commit(
    s3: LocalS3, bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The conditional PUT landed, its answer was lost (a timeout), the retry got 412: the
    current manifest is this merge's own, so it committed (nothing of it is deleted)."""
    url = f"s3://{bucket}/store"
    build(docs(tmp_path / "x.jsonl", "x", 40), url, 2, tmp_path / "w")
    first = lading.merge_store(url, cache=tmp_path / "m0").snapshot
    build(docs(tmp_path / "y.jsonl", "y", 60), url, 2, tmp_path / "w")
    real = ObstoreClient.replace_async
    answers: list[bool] = []

    async def replace_async(self: Any, key: str, data: bytes, etag: str) -> bool:
        done: bool = await real(self, key, data, etag)
        answers.append(done)
        if len(answers) == 1:
            raise OSError("the answer was lost")
        return done

    monkeypatch.setattr(ObstoreClient, "replace_async", replace_async)
    a = lading.merge_store(url, cache=tmp_path / "ma")
    assert answers == [True, False]
    assert current(url)["snapshot"] == a.snapshot != first
    assert snapshots_in(url) == {first, a.snapshot}
    assert len(lading.open_store(url, cache=tmp_path / "r")) == 60


@pytest.mark.parametrize("backend", ["obstore", "fsspec"])
def test_the_conditional_replace_of_each_client(s3: LocalS3, bucket: str, backend: str) -> None:
    client = lading.remote.clients.open_client(f"s3://{bucket}/replace-{backend}", backend)
    client.put("k", b"one")
    info = client.head("k")
    assert info is not None and info.etag
    assert asyncio.run(client.replace_async("k", b"two", '"0123456789abcdef"')) is False
    assert client.get("k") == b"one"
    assert asyncio.run(client.replace_async("k", b"two", info.etag)) is True
    assert client.get("k") == b"two"
    assert asyncio.run(client.replace_async("k", b"three", info.etag)) is False  # stale now
    assert asyncio.run(client.replace_async("gone", b"x", info.etag)) is False
    assert client.get("k") == b"two" and client.head("gone") is None
    found = asyncio.run(client.head_async("k"))
    assert found is not None and found.size == 3 and found.etag != info.etag
    assert asyncio.run(client.head_async("gone")) is None


def test_an_fsspec_filesystem_other_than_s3_sends_no_conditional_replace(tmp_path: Path) -> None:
    client = FsspecClient(f"file://{tmp_path}", None, None)
    (tmp_path / "k").write_bytes(b"one")
    with pytest.raises(NotImplementedError, match="conditional"):
        asyncio.run(client.replace_async("k", b"two", "whatever"))
    assert (tmp_path / "k").read_bytes() == b"one"


@pytest.mark.slow  # a sharded build into the local S3 and two merges: ~5-9 s
@pytest.mark.parametrize("backend", ["obstore", "fsspec"])
def test_a_server_without_conditional_puts_still_commits_unguarded(
    s3: LocalS3, bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    """An S3-compatible server answering ``If-Match`` on a PUT with 501: the merge commits
    by a plain PUT, as before (unguarded against a merge beside it)."""
    monkeypatch.setattr(lading.remote.clients, "_obstore_usable", lambda: backend == "obstore")
    url = f"s3://{bucket}/old-server-{backend}"
    build(docs(tmp_path / "x.jsonl", "x", 40), url, 2, tmp_path / "w")
    first = lading.merge_store(url, cache=tmp_path / "m0").snapshot
    build(docs(tmp_path / "y.jsonl", "y", 60), url, 2, tmp_path / "w")
    s3.fault(f"old-server-{backend}", 100, "error", status=501, op="put", header="If-Match")
    merged = lading.merge_store(url, cache=tmp_path / "m1")
    assert current(url)["snapshot"] == merged.snapshot != first and len(merged) == 60
