"""What a remote call says, and whether it works, off the plain S3 path: a listing holding a
key obstore cannot name (``a//b``), the endpoint and credentials a message names for a URL
of another scheme (gs://, az://, http://), and a host that cannot be reached before any
request (ftp://) as a :class:`lading.RemoteError`. No network: the local S3, or URLs that
fail before a request leaves the machine."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import pytest
import torch

import lading
from lading.disk.remote import NO_CREDENTIALS, RemoteDir, denied, no_bucket
from lading.errors import RemotePermanentError, RemoteURLError
from lading.remote.clients import open_client
from lading.testing import LocalS3
from lading.testing.localserver import free_port

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from sessions_files import write_sessions  # noqa: E402  # after the importorskip of pyarrow

KW: dict[str, Any] = {"list_columns": {"items": 6}, "seed": 3, "buffer_rows": 16}
STRAY = "sessions/logs//run.txt"  # a key S3 takes and obstore's paths cannot hold
ELSEWHERE = "unrelated//note.txt"


def _put(bucket: str, key: str, data: bytes) -> None:
    boto3 = pytest.importorskip("boto3")
    boto3.client("s3").put_object(Bucket=bucket, Key=key, Body=data)


@pytest.fixture
def strays(s3: LocalS3, bucket: str, tmp_path: Path) -> tuple[str, Path]:
    """A bucket with one parquet file below ``sessions/``, the same at the top, and two stray
    objects whose keys hold ``//`` (one below the prefix, one elsewhere); the local file."""
    local = write_sessions(tmp_path / "local" / "part-0.parquet", 61, 3, seed=1)
    _put(bucket, "sessions/day=1/part-0.parquet", local.read_bytes())
    _put(bucket, "top.parquet", local.read_bytes())
    _put(bucket, STRAY, b"a log line\n")
    _put(bucket, ELSEWHERE, b"x")
    s3.reset()
    return bucket, local


def _same(got: list[dict[str, torch.Tensor]], want: list[dict[str, torch.Tensor]]) -> None:
    assert len(got) == len(want) > 0
    for a, b in zip(got, want):
        assert a.keys() == b.keys()
        for name in a:
            assert torch.equal(a[name], b[name]), name


@pytest.mark.parametrize("where", ["sessions/", "top.parquet"])
def test_a_stray_key_with_an_empty_segment_does_not_break_a_parquet_listing(
    strays: tuple[str, Path], tmp_path: Path, where: str
) -> None:
    """The prefix's listing (and the bucket's, for an object at the top) holds a ``//`` key:
    the dataset opens and reads as the local file does, the stray skipped as any non-parquet
    object is."""
    from lading.tabular import PartitionedParquet

    bucket, local = strays
    url = f"s3://{bucket}/{where}"
    want = list(PartitionedParquet(local.parent, 8, **KW))
    with PartitionedParquet(url, 8, cache=tmp_path / "cache", cache_bytes="4M", **KW) as remote:
        assert remote.total_rows == 61
        _same(list(remote), want)


def test_the_obstore_client_lists_and_reads_a_key_it_cannot_name(
    strays: tuple[str, Path],
) -> None:
    """obstore's listing of a prefix holding a ``//`` key is fsspec's, the same objects with
    the same sizes and ETags; reading that key reads its bytes."""
    bucket, _ = strays
    obstore_client = open_client(f"s3://{bucket}/sessions", "obstore", timeout=10)
    fsspec_client = open_client(f"s3://{bucket}/sessions", "fsspec", timeout=10)
    want = fsspec_client.list()
    assert "logs//run.txt" in want and "day=1/part-0.parquet" in want
    assert obstore_client.list() == want
    assert asyncio.run(obstore_client.list_async()) == want
    assert asyncio.run(obstore_client.get_async("logs//run.txt")) == b"a log line\n"
    assert asyncio.run(obstore_client.get_range("logs//run.txt", 2, 6)) == b"log "
    etag = want["logs//run.txt"].etag
    assert asyncio.run(obstore_client.get_range("logs//run.txt", 0, 1, etag)) == b"a"
    assert asyncio.run(obstore_client.get_ranges("logs//run.txt", [(0, 1), (2, 5)])) == [
        b"a",
        b"log",
    ]
    assert obstore_client.get("logs//run.txt") == b"a log line\n"


def test_without_fsspec_the_stray_key_is_named_at_once_not_retried(
    strays: tuple[str, Path], s3: LocalS3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where fsspec cannot list the bucket (s3fs missing), the open fails for good at its
    first LIST, naming the key and the fix, not the endpoint's health after 4 tries."""
    import fsspec.core

    from lading.tabular import PartitionedParquet

    def missing(*args: object, **kwargs: object) -> None:
        raise ImportError("Install s3fs to access S3")

    monkeypatch.setattr(fsspec.core, "url_to_fs", missing)
    bucket, _ = strays
    with pytest.raises(RemotePermanentError) as caught:
        PartitionedParquet(f"s3://{bucket}/sessions/", 8, cache=tmp_path / "c", **KW)
    message = str(caught.value)
    assert STRAY in message and "//" in message, message
    assert "s3fs" in message and "rename" in message.lower(), message
    assert "failed 4 times" not in message and "reachable" not in message, message
    assert s3.stats()["lists"] == 1


def test_a_pinned_read_is_not_made_unpinned_through_a_fallback_that_cannot_pin(
    strays: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pinned read of a key obstore cannot name goes through fsspec only where fsspec
    sends the pin (s3fs): gcsfs and adlfs drop it, and this client counts its reads pinned,
    so the node cache would trust bytes of another version as checked. Refused, naming why."""
    bucket, _ = strays
    client = open_client(f"s3://{bucket}/sessions", "obstore", timeout=10)
    real = client._fallback

    class Unpinned:  # gcsfs's part: reads, but sends no If-Match
        pins = False
        fs = type("GCSFileSystem", (), {})()

        def __init__(self, inner: Any) -> None:
            self.inner = inner

        async def get_range(self, *args: Any) -> bytes:
            data: bytes = await self.inner.get_range(*args)
            return data

    monkeypatch.setattr(client, "_fallback", lambda *a: Unpinned(real(*a)))
    etag = open_client(f"s3://{bucket}/sessions", "fsspec").list()["logs//run.txt"].etag
    assert asyncio.run(client.get_range("logs//run.txt", 2, 6)) == b"log "  # unpinned: read
    for read in (
        lambda: client.get_range("logs//run.txt", 0, 1, etag),
        lambda: client.get_ranges("logs//run.txt", [(0, 1), (2, 5)], etag),
    ):
        with pytest.raises(RemotePermanentError, match="GCSFileSystem cannot pin"):
            asyncio.run(read())


@pytest.fixture
def no_cloud_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No AZURE_ or GOOGLE_ variables; AWS_ENDPOINT_URL set (as a local S3 sets it)."""
    import os

    for name in list(os.environ):
        if name.startswith(("AZURE_", "GOOGLE_", "STORAGE_EMULATOR")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")


def test_credentials_and_endpoint_hints_follow_the_scheme() -> None:
    metadata = "Error performing GET http://169.254.169.254/computeMetadata/v1/instance/token"
    for said in (NO_CREDENTIALS, metadata):
        gs = str(denied("gs://b/st", "meta.json", "", said))
        assert "no credentials found" in gs and "GOOGLE_APPLICATION_CREDENTIALS" in gs, gs
        assert "AWS_" not in gs, gs
    az = str(denied("az://cont/st", "meta.json", "", "403 Forbidden"))
    assert "AZURE_STORAGE_ACCOUNT_KEY" in az and "AZURE_STORAGE_SAS_TOKEN" in az, az
    assert "AWS_" not in az, az
    s3 = str(denied("s3://b/st", "meta.json", "", NO_CREDENTIALS))
    assert "AWS_ACCESS_KEY_ID" in s3 and "GOOGLE" not in s3, s3
    gs_bucket = str(no_bucket("gs://b/st", ""))
    assert "AWS_" not in gs_bucket and "GOOGLE_BASE_URL" in gs_bucket, gs_bucket
    assert "AWS_ENDPOINT_URL" in str(no_bucket("s3://b/st", ""))


@pytest.mark.usefixtures("no_cloud_env")
def test_an_azure_url_without_an_account_says_what_is_missing() -> None:
    with pytest.raises(lading.RemoteError) as caught:
        open_client("az://cont/st", "obstore", timeout=2)
    message = str(caught.value)
    assert "refused the client options" not in message, message
    assert "AZURE_STORAGE_ACCOUNT_NAME" in message and "account_name" in message, message
    assert "AWS_" not in message and "access_key_id" not in message, message
    with pytest.raises(RemoteURLError) as caught:
        open_client("az://cont/st", "obstore", {"bogus": 1}, timeout=2)
    message = str(caught.value)
    assert "refused the client options ['bogus']" in message, message
    assert "account_name" in message and "secret_access_key" not in message, message


@pytest.mark.usefixtures("no_cloud_env")
def test_the_endpoint_named_is_the_schemes_not_aws() -> None:
    port = free_port()
    assert open_client(f"http://127.0.0.1:{port}/st", "fsspec").endpoint == (
        f"http://127.0.0.1:{port}"
    )
    assert RemoteDir(f"http://127.0.0.1:{port}/st", {}).endpoint == f"http://127.0.0.1:{port}"
    assert open_client("gs://b/st", "obstore").endpoint == ""
    assert open_client("s3://b/st", "obstore").endpoint == "http://127.0.0.1:1"
    assert open_client("s3://b/st", "fsspec").endpoint == "http://127.0.0.1:1"


@pytest.mark.usefixtures("no_cloud_env")
def test_an_http_store_that_does_not_answer_names_its_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LADING_REMOTE_TIMEOUT", "2")
    url = f"http://127.0.0.1:{free_port()}/st"
    with pytest.raises(lading.RemoteError) as caught:
        lading.open_store(url, cache=tmp_path / "c", cache_bytes="1M")
    message = str(caught.value)
    assert f"endpoint {url.rsplit('/', 1)[0]}" in message, message
    assert "127.0.0.1:1)" not in message, message


def test_an_unreachable_host_of_another_scheme_is_a_remote_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ftp:// connects when its filesystem is made: a refused port, or a name that does not
    resolve (answered here, no lookup leaves the machine), is a RemoteError naming the URL and
    the host, not a bare socket error."""
    url = f"ftp://127.0.0.1:{free_port()}/st"
    with pytest.raises(lading.RemoteError) as caught:
        lading.open_store(url, cache=tmp_path / "c", cache_bytes="1M")
    message = str(caught.value)
    assert url in message and "127.0.0.1" in message and "check" in message, message

    real = socket.getaddrinfo

    def resolve(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "nohost.invalid":
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    with pytest.raises(lading.RemoteError) as caught:
        lading.open_store("ftp://nohost.invalid/st", cache=tmp_path / "d", cache_bytes="1M")
    message = str(caught.value)
    assert "ftp://nohost.invalid/st" in message and "nohost.invalid" in message, message
    assert isinstance(caught.value.__cause__ or caught.value.__context__, socket.gaierror)


@pytest.mark.parametrize("backend", ["obstore", "fsspec"])
def test_a_refused_connection_says_so_and_offers_no_longer_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    """A port nothing listens on is refused at once: the error named obstore's "error sending
    request" only (the reason was 20 lines down its debug dump), and advised a longer
    timeout, which cannot help (a review's find)."""
    pytest.importorskip(backend if backend == "obstore" else "s3fs")
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.setenv("LADING_REMOTE_TIMEOUT", "2")
    from lading.stores.remote.store import open_remote

    with pytest.raises(lading.RemoteError) as caught:
        open_remote("s3://refused/st", cache=tmp_path / "c", cache_bytes="1M", backend=backend)
    message = str(caught.value)
    assert "raise the timeout" not in message and "reachable at that address" in message, message
    if backend == "obstore":
        assert "Connection refused" in message, message


def test_a_call_that_timed_out_is_offered_a_longer_timeout() -> None:
    from lading.deadline import Deadline

    said = Deadline(2.0, 1).gave_up("GET s3://b/k", "http://e", asyncio.TimeoutError())
    assert "last: timed out" in said and "or raise the timeout" in said, said
