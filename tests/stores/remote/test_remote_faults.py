"""Every call of a remote store under the local S3's faults (error, slow, short, reset,
half-open) ends in the right bytes or one clear error within its deadline: open (the
manifest GET), list, stage (the index files), read (documents) and upload (a build).

Deadlines are short here (``timeout=0.5`` s an attempt, 3 retries): a call that gives up
does so within ``4 * 0.5`` s and the backoff, so every test takes seconds.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import lading
from conftest import write
from lading.errors import LadingError, StoreFormatError
from lading.remote.clients import open_client
from lading.remote.objects import RemoteReadError, RemoteWriteError
from lading.stores.remote.store import RemoteStore
from lading.testing import LocalS3
from lading.testing.localserver import free_port

T = 0.5  # seconds an attempt may take, in every test here
DEADLINE = 4 * T + 2.0  # 4 attempts, their backoff (< 0.6 s) and the proxy's latency
DOCS = {f"d{i}": f"document {i} " + "x" * (i % 50) for i in range(200)}
_made = iter(range(10**6))


@pytest.fixture(scope="module")
def store_url(s3: LocalS3, tmp_path_factory: pytest.TempPathFactory) -> str:
    """One store, built once for the module, in a bucket of its own."""
    folder = tmp_path_factory.mktemp("faults")
    source = write(folder / "docs.tsv", "".join(f"{k}\t{v}\n" for k, v in DOCS.items()))
    s3.make_bucket("trust-faults")
    url = "s3://trust-faults/docs"
    lading.build_store(source, url, cache=str(folder / "build-cache"), progress=False)
    return url


@pytest.fixture
def faults(s3: LocalS3) -> Iterator[LocalS3]:
    s3.reset()
    yield s3
    s3.reset()


def _open(url: str, tmp_path: Path, **more: object) -> RemoteStore:
    cache = tmp_path / f"cache-{next(_made)}"  # a cold node each time: the index is staged
    store = lading.open_store(url, cache=cache, cache_bytes="1M", timeout=T, **more)  # type: ignore[arg-type]
    assert isinstance(store, RemoteStore)
    return store


def _right(store: RemoteStore) -> None:
    ids = sorted(DOCS)[::7]
    assert store.get_many(ids) == [DOCS[i] for i in ids]


# (which requests, object name, kind, extra): each fault hits twice, then the call succeeds
RECOVERABLE = [
    ("get", "meta.json", "error", {"status": 503}),
    ("get", "meta.json", "reset", {}),
    ("get", "meta.json", "hang", {}),
    ("get", "meta.json", "slow", {"delay": 2 * T}),
    ("list", "", "error", {"status": 500}),
    ("list", "", "reset", {}),
    ("list", "", "hang", {}),
    ("get", ".off", "reset", {}),  # stage: the offsets files
    ("get", ".off", "hang", {}),
    ("get", ".off", "short", {}),
    ("get", "index", "error", {"status": 503}),
]


@pytest.mark.parametrize(("op", "match", "kind", "extra"), RECOVERABLE)
def test_open_list_and_stage_recover_from_two_faults(
    store_url: str,
    faults: LocalS3,
    tmp_path: Path,
    op: str,
    match: str,
    kind: str,
    extra: dict[str, object],
) -> None:
    faults.fault(match, 2, kind, op=op, **extra)
    started = time.monotonic()
    store = _open(store_url, tmp_path)
    assert time.monotonic() - started < DEADLINE
    assert faults.stats()["faults"] == 2  # both were met: the open went through them
    _right(store)
    store.close()


@pytest.mark.parametrize("kind", ["error", "reset", "hang", "short"])
def test_reads_recover_from_two_faults(
    store_url: str, faults: LocalS3, tmp_path: Path, kind: str
) -> None:
    store = _open(store_url, tmp_path)
    faults.fault("text.bin", 2, kind)
    started = time.monotonic()
    _right(store)
    assert time.monotonic() - started < DEADLINE
    assert faults.stats()["faults"] == 2
    store.close()


@pytest.mark.parametrize(
    ("op", "match", "kind"),
    [
        ("get", "meta.json", "hang"),
        ("get", "meta.json", "reset"),
        ("list", "", "hang"),
        ("get", ".off", "hang"),
        ("get", "meta.json", "error"),
    ],
)
def test_an_open_that_never_succeeds_fails_within_its_deadline_naming_the_setting(
    store_url: str, faults: LocalS3, tmp_path: Path, op: str, match: str, kind: str
) -> None:
    faults.fault(match, 99, kind, op=op)
    started = time.monotonic()
    with pytest.raises(RemoteReadError) as caught:
        _open(store_url, tmp_path)
    assert time.monotonic() - started < DEADLINE
    message = str(caught.value)
    assert "\n" not in message and faults.endpoint in message
    assert "LADING_REMOTE_TIMEOUT" in message and "failed 4 times" in message
    assert "trust-faults/docs/" in message  # the object


def test_a_read_that_never_succeeds_fails_within_its_deadline(
    store_url: str, faults: LocalS3, tmp_path: Path
) -> None:
    store = _open(store_url, tmp_path)
    faults.fault("text.bin", 99, "hang")
    started = time.monotonic()
    with pytest.raises(RemoteReadError, match=r"text\.bin bytes .*LADING_REMOTE_TIMEOUT"):
        store.get_many(["d3"])
    assert time.monotonic() - started < DEADLINE + 1  # the read may wait a wait_limit more
    store.close()


def test_the_timeout_comes_from_the_environment(
    store_url: str, faults: LocalS3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LADING_REMOTE_TIMEOUT", "0.3")
    faults.fault("meta.json", 99, "hang")
    started = time.monotonic()
    with pytest.raises(RemoteReadError, match=r"each allowed 0\.3s"):
        lading.open_store(store_url, cache=tmp_path / "c", cache_bytes="1M")
    assert time.monotonic() - started < 4 * 0.3 + 2.0
    monkeypatch.setenv("LADING_REMOTE_TIMEOUT", "soon")
    with pytest.raises(ValueError, match="LADING_REMOTE_TIMEOUT='soon'"):
        lading.open_store(store_url, cache=tmp_path / "c", cache_bytes="1M")


def _no_answer() -> socket.socket:
    """A half-open server: it listens (the kernel accepts connections), never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    return server


@pytest.mark.parametrize("server", ["half-open", "nothing listening"])
def test_a_dead_endpoint_fails_the_open_in_one_line_within_the_deadline(
    tmp_path: Path, server: str
) -> None:
    listener = _no_answer() if server == "half-open" else None
    port = listener.getsockname()[1] if listener is not None else free_port()
    endpoint = f"http://127.0.0.1:{port}"
    options = {"endpoint_url": endpoint, "key": "k", "secret": "s", "region": "us-east-1"}
    started = time.monotonic()
    try:
        with pytest.raises(RemoteReadError) as caught:
            lading.open_store(
                "s3://some-bucket/docs",
                cache=tmp_path / "c",
                cache_bytes="1M",
                storage_options=options,
                timeout=T,
            )
    finally:
        if listener is not None:
            listener.close()
    assert time.monotonic() - started < DEADLINE
    message = str(caught.value)
    assert "\n" not in message and endpoint in message and "meta.json" in message


def test_a_missing_bucket_is_named_on_open(store_url: str, faults: LocalS3, tmp_path: Path) -> None:
    with pytest.raises(StoreFormatError) as caught:
        _open("s3://no-such-bucket-here/docs", tmp_path)
    message = str(caught.value)
    assert "bucket 'no-such-bucket-here' does not exist" in message and "\n" not in message
    assert faults.endpoint in message
    with pytest.raises(StoreFormatError, match=r"no store at s3://trust-faults/nothing"):
        _open("s3://trust-faults/nothing", tmp_path)


def test_a_build_into_a_missing_bucket_fails_before_reading_the_source(
    s3: LocalS3, tmp_path: Path
) -> None:
    def build_local(*args: object, **kwargs: object) -> None:
        raise AssertionError("the source was read before the destination was checked")

    from lading.stores.building.upload import build_remote

    with pytest.raises(RemoteWriteError) as caught:
        build_remote(build_local, "src.tsv", "s3://no-such-bucket-here/x", cache=str(tmp_path))
    message = str(caught.value)
    assert "bucket 'no-such-bucket-here' does not exist" in message and "\n" not in message


@pytest.mark.parametrize("kind", ["error", "reset"])
def test_an_upload_recovers_from_faults(
    s3: LocalS3, faults: LocalS3, tmp_path: Path, kind: str
) -> None:
    source = write(tmp_path / "docs.tsv", "".join(f"{k}\t{v}\n" for k, v in DOCS.items()))
    name = f"trust-up-{kind}"
    s3.make_bucket(name)
    faults.fault("text.bin", 2, kind, op="put", status=503)
    store = lading.build_store(source, f"s3://{name}/d", cache=str(tmp_path / "b"), progress=False)
    assert faults.stats()["faults"] == 2
    assert isinstance(store, RemoteStore)
    _right(store)
    store.close()


def test_an_upload_that_keeps_failing_is_one_line_and_leaves_no_store(
    s3: LocalS3, faults: LocalS3, tmp_path: Path
) -> None:
    source = write(tmp_path / "docs.tsv", "".join(f"{k}\t{v}\n" for k, v in DOCS.items()))
    s3.make_bucket("trust-up-fails")
    faults.fault("text.bin", 999, "error", op="put", status=403)
    url = "s3://trust-up-fails/d"
    with pytest.raises(LadingError) as caught:
        lading.build_store(source, url, cache=str(tmp_path / "b"), progress=False)
    assert "\n" not in str(caught.value) and "text.bin" in str(caught.value)
    with pytest.raises(StoreFormatError, match="no store at"):
        _open(url, tmp_path)  # the manifest is written last: never, here


_EXIT_SCRIPT = """
import functools, json, sys, time, urllib.request
from lading.remote.clients import open_client
from lading.remote.fetch import Fetcher
url, endpoint = sys.argv[1], sys.argv[2]
# the client's own timeout is obstore's default (30 s), the fetcher's 0.5 s
fetcher = Fetcher(functools.partial(open_client, url, "obstore"), timeout=0.5, retries=1)
key = next(k for k in fetcher.client.list() if k.endswith("text.bin"))
body = json.dumps({"match": "text.bin", "times": 1, "kind": "slow", "delay": 2.0}).encode()
request = urllib.request.Request(endpoint + "/_lading/faults", data=body)
request.add_header("Content-Type", "application/json")
urllib.request.urlopen(request).read()
started = time.monotonic()
print(fetcher.read([(key, 0, 4, None)])[0].decode(), flush=True)  # 1st GET given up, 2nd read
print(f"read {time.monotonic() - started:.2f} {time.time():.3f}", flush=True)
"""


def test_exit_waits_for_the_obstore_calls_a_timeout_left_running(
    store_url: str, faults: LocalS3, tmp_path: Path
) -> None:
    """A GET given up at its timeout still runs on obstore's runtime; if it ends after the
    interpreter began to exit, the tokio thread that completes it aborts the process
    (SIGABRT, issue 39 item 9). Exit therefore waits for it: the process ends after the
    slow GET's 2 s, with status 0, not at the read's ~0.6 s."""
    import subprocess
    import sys

    pytest.importorskip("obstore")
    done = subprocess.run(
        [sys.executable, "-c", _EXIT_SCRIPT, store_url, faults.endpoint],
        capture_output=True,
        text=True,
        timeout=60,
    )
    ended = time.time()
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "docu"  # the first 4 bytes of the first text
    read, read_at = map(float, lines[1].split()[1:])
    assert read < 2.0  # the read did not wait for the slow GET ...
    assert ended - read_at > 2.0 - read - 0.2  # ... the exit did, until it ended


def test_lading_build_into_a_missing_bucket_or_a_dead_endpoint_is_one_line(
    s3: LocalS3,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from lading.cli import main

    source = write(tmp_path / "docs.tsv", "a\tb\n")
    monkeypatch.setenv("LADING_CACHE", str(tmp_path / "lc"))
    monkeypatch.setenv("LADING_REMOTE_TIMEOUT", str(T))
    assert main(["build", str(source), "s3://no-such-bucket-here/x", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "bucket 'no-such-bucket-here' does not exist" in err
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    started = time.monotonic()
    assert main(["build", str(source), "s3://some-bucket/x", "--quiet"]) == 2
    assert time.monotonic() - started < DEADLINE
    err = capsys.readouterr().err.strip()
    assert (
        "\n" not in err
        and endpoint in err
        and "cannot write the store to s3://some-bucket/x" in err
    )
    assert not list((tmp_path / "lc").rglob("meta.json"))  # nothing was built first


def test_verify_reads_a_remote_store_and_finds_a_replaced_object(
    s3: LocalS3,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from lading.cli import main

    docs = "".join(f"v{i}\tverified text number {i}\n" for i in range(2000))  # ~50 KB
    s3.make_bucket("trust-verify")
    url = "s3://trust-verify/docs"
    lading.build_store(write(tmp_path / "d.tsv", docs), url, cache=str(tmp_path / "b"))
    monkeypatch.setenv("LADING_CACHE", str(tmp_path / "lc"))
    assert main(["verify", url]) == 0
    assert "every file matches its checksum" in capsys.readouterr().out
    client = open_client(url)
    text = next(k for k in client.list() if k.endswith("text.bin"))
    good = client.get(text)
    size = len(good)  # its middle changed: the spot checksums of its ends still hold
    client.put(text, good[:4096] + bytes(b ^ 1 for b in good[4096 : size - 4096]) + good[-4096:])
    monkeypatch.setenv("LADING_CACHE", str(tmp_path / "lc2"))
    assert main(["verify", url]) == 1
    err = capsys.readouterr().err
    assert text in err and "CRC32" in err


@pytest.mark.parametrize(
    ("op", "match", "kind", "times"),
    [("get", "meta.json", "hang", 2), ("list", "", "reset", 2), ("get", "meta.json", "hang", 99)],
)
def test_the_fsspec_backend_keeps_the_same_deadline(
    store_url: str, faults: LocalS3, tmp_path: Path, op: str, match: str, kind: str, times: int
) -> None:
    """The fallback backend (a forked DataLoader worker's) under the same faults."""
    pytest.importorskip("s3fs")
    from lading.remote.settings import RemoteSettings

    faults.fault(match, times, kind, op=op)
    settings = RemoteSettings.of(tmp_path / "c", "1M", backend="fsspec", timeout=T)
    started = time.monotonic()
    if times > 3:
        with pytest.raises(RemoteReadError, match="LADING_REMOTE_TIMEOUT"):
            RemoteStore(store_url, settings)
    else:
        store = RemoteStore(store_url, settings)
        _right(store)
        store.close()
    assert time.monotonic() - started < DEADLINE + 1
