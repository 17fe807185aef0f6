"""Store shards built into object storage claim their build as a local dest does.

Under one explicit build id, another source or another N is refused before the source is read,
with the local wording and the URL (it used to be accepted, "already built" for the same N, and
the merge kept the first job's store). The next step printed names the URL as given (a
``Path`` made ``s3:/bucket``, which the printed command then took for a local folder), and so
does ``lading merge``'s line.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import lading
import lading.remote.clients
from conftest import write
from lading.errors import StoreFormatError
from lading.testing import LocalS3


def rows(path: Path, word: str, n: int) -> Path:
    lines = [json.dumps({"id": f"{word}{i}", "text": f"{word} {i}"}) for i in range(n)]
    return write(path, "\n".join(lines) + "\n")


@pytest.mark.slow  # buckets on the local S3 (30 ms a request): ~5-11 s
def test_another_source_or_n_under_one_build_id_is_refused_in_the_bucket(
    s3: LocalS3, bucket: str, tmp_path: Path
) -> None:
    a, b = rows(tmp_path / "a.jsonl", "apple", 50), rows(tmp_path / "b.jsonl", "banana", 80)
    url = f"s3://{bucket}/store"
    for i in range(2):
        report = lading.build_shard(a, url, (i, 2), build_id="build-wiki", cache=tmp_path / "w")
    assert str(report) == (
        f"{url}: shard 1/2 of build-wiki: {report.rows} documents; once all 2 are built: "
        f"lading merge {url} --build-id build-wiki"
    )
    first = lading.merge_store(url, cache=tmp_path / "m")
    for i in range(2):
        with pytest.raises(StoreFormatError, match="reads other inputs than the shards") as e:
            lading.build_shard(b, url, (i, 2), build_id="build-wiki", cache=tmp_path / "w")
        assert f"{url}/build-wiki" in str(e.value) and str(tmp_path / "w") not in str(e.value)
    with pytest.raises(StoreFormatError, match=f"build.json \\({url}/build-wiki\\) records 2"):
        lading.build_shard(a, url, (0, 3), build_id="build-wiki", cache=tmp_path / "w")
    assert lading.build_shard(a, url, (0, 2), build_id="build-wiki", cache=tmp_path / "w").reused
    assert lading.merge_store(url, cache=tmp_path / "m2").snapshot == first.snapshot


@pytest.mark.slow  # the CLI in subprocesses over the local S3: ~4 s
def test_the_cli_prints_the_url_it_was_given(s3: LocalS3, bucket: str, tmp_path: Path) -> None:
    a = rows(tmp_path / "a.jsonl", "apple", 20)
    url = f"s3://{bucket}/store"

    def cli(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "lading", *args], capture_output=True, text=True, cwd=tmp_path
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    for i in range(2):
        said = cli("build", str(a), url, "--shard", f"{i}/2", "--quiet")
    bid = said.split(" of ", 1)[1].split(":", 1)[0]  # the merge it prints names its build
    assert said.startswith(f"{url}: shard 1/2 of build-")
    assert said.endswith(f"lading merge {url} --build-id {bid}"), said
    assert cli(*said.rsplit(": ", 1)[1].split()[1:]).startswith(f"{url}: 20 documents from 2")
    assert not (tmp_path / "s3:").exists()


def test_a_worker_that_raced_the_first_with_another_n_is_refused_at_its_upload(
    s3: LocalS3, bucket: str, tmp_path: Path
) -> None:
    """Both found no ``build.json`` in the bucket and built: the second's upload reads the
    first's back, does not PUT over it, and refuses before any of its shard's files go up."""
    from lading.remote.settings import RemoteSettings
    from lading.stores.building.remote_shards import upload_shard_folder

    a = rows(tmp_path / "a.jsonl", "apple", 30)
    url = f"s3://{bucket}/store"
    lading.build_shard(a, url, (0, 2), build_id="build-race", cache=tmp_path / "w")
    local = tmp_path / "local"
    lading.build_shard(a, local, (0, 3), build_id="build-race")  # as the racing worker did
    settings = RemoteSettings.of(tmp_path / "w", None, None)
    with pytest.raises(StoreFormatError, match=f"build.json \\({url}/build-race\\) records 2"):
        upload_shard_folder(local, "build-race/shard-00000-of-00003", url, settings, 0)
    listed = lading.remote.clients.open_client(url).list("build-race/")
    assert not [k for k in listed if "of-00003" in k]
    assert json.loads(lading.remote.clients.open_client(url).get("build-race/build.json"))["n"] == 2


@pytest.mark.parametrize("backend", ["obstore", "fsspec"])
def test_of_two_workers_that_both_found_no_build_json_one_writes_it(
    s3: LocalS3, bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    """The race the read back left open: both GETs found no ``build.json``, then the first
    PUT and read its own back, then the second PUT over it and read its own back, and both
    passed (the bucket's recipe was the second's). The PUT is create-only now: the second's
    fails and it reads the first's, and is refused."""
    import lading.stores.building.remote_shards as remote_shards
    from lading.remote.settings import RemoteSettings

    a = rows(tmp_path / "a.jsonl", "apple", 30)
    url = f"s3://{bucket}/store-{backend}"
    local = {n: tmp_path / f"local{n}" for n in (2, 3)}
    for n, folder in local.items():
        lading.build_shard(a, folder, (0, n), build_id="build-race")
    settings = RemoteSettings.of(tmp_path / "w", None, None, backend=backend)
    monkeypatch.setattr(remote_shards, "_get_or_none", lambda fetcher, key: None)
    client = lading.remote.clients.open_client(url, backend)
    shard = "build-race/shard-00000-of-0000{}"
    remote_shards.put_build(client, settings, local[2], shard.format(2), url, 0)
    with pytest.raises(StoreFormatError, match=f"build.json \\({url}/build-race\\) records 2"):
        remote_shards.put_build(client, settings, local[3], shard.format(3), url, 0)
    assert json.loads(lading.remote.clients.open_client(url).get("build-race/build.json"))["n"] == 2


@pytest.mark.parametrize("backend", ["obstore", "fsspec"])
def test_a_create_only_put_writes_once_and_leaves_the_object_alone_after(
    s3: LocalS3, bucket: str, backend: str
) -> None:
    import asyncio

    client = lading.remote.clients.open_client(f"s3://{bucket}/create-{backend}", backend)
    assert asyncio.run(client.create_async("k", b"first")) is True
    assert asyncio.run(client.create_async("k", b"second")) is False
    assert client.get("k") == b"first"


def test_an_fsspec_filesystem_other_than_s3_is_not_asked_for_a_create_only_put(
    tmp_path: Path,
) -> None:
    """Other filesystems may take ``mode="create"`` and write over the object anyway; the
    claim then writes and reads back instead."""
    import asyncio

    from lading.remote.client_fsspec import FsspecClient

    client = FsspecClient(f"file://{tmp_path}", None, None)
    with pytest.raises(NotImplementedError, match="create-only"):
        asyncio.run(client.create_async("k", b"first"))
    assert not (tmp_path / "k").exists()


@pytest.mark.parametrize("backend", ["obstore", "fsspec"])
def test_a_server_without_conditional_writes_gets_the_write_and_the_read_back(
    s3: LocalS3, bucket: str, tmp_path: Path, backend: str
) -> None:
    """An S3-compatible server that answers ``If-None-Match: *`` with 501 Not Implemented
    (conditional writes came to S3 in 2024; not every server has them): the claim writes and
    reads back, as before the create-only PUT, instead of failing the build."""
    from lading.remote.settings import RemoteSettings
    from lading.stores.building.remote_shards import put_build

    a = rows(tmp_path / "a.jsonl", "apple", 30)
    url = f"s3://{bucket}/no-conditional-{backend}"
    local = tmp_path / "local"
    lading.build_shard(a, local, (0, 2), build_id="build-old-server")
    s3.fault("no-conditional", 100, "error", status=501, op="put", header="If-None-Match")
    settings = RemoteSettings.of(tmp_path / "w", None, None, backend=backend)
    client = lading.remote.clients.open_client(url, backend)
    put_build(client, settings, local, "build-old-server/shard-00000-of-00002", url, 0)
    assert s3.stats()["faults"] >= 1
    assert json.loads(client.get("build-old-server/build.json"))["n"] == 2
