"""A build into object storage under the local S3's faults: every PUT has a deadline that
scales with its bytes (``timeout`` + size / ``upload_min_rate``), a half-open server ends
the build in one line naming the endpoint, the object and the settings, and nothing that
opens as a store is left behind (the manifest is written last).

Before: the upload client waited up to 30 minutes on a half-open server (issue 39).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import lading
from conftest import HEALTHY_S, LOADED_S, write
from lading.errors import StoreFormatError
from lading.remote.objects import RemoteWriteError
from lading.stores.remote.store import RemoteStore
from lading.testing import LocalS3

pytestmark = pytest.mark.slow  # fault injection: ~5 s a case against a stalling server

T = 1.0  # seconds: the base deadline (LADING_REMOTE_TIMEOUT); a loaded moto may take 0.5 s a PUT
RATE = "100M"  # bytes/s assumed at least: a 6 MiB file may take T + 0.06 s
DEADLINE = 4 * T + 3.0  # the probe's attempts, the deadline, the proxy's latency, the build
DOCS = {f"d{i}": f"document {i} " + "x" * (i % 50) for i in range(200)}
BIG = {f"b{i}": f"big document {i} " + "y" * 2000 for i in range(3200)}  # text.bin ~6.4 MB
_names = iter(range(10**6))


@pytest.fixture
def faults(s3: LocalS3, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalS3]:
    monkeypatch.setenv("LADING_REMOTE_TIMEOUT", str(T))
    monkeypatch.setenv("LADING_UPLOAD_MIN_RATE", RATE)
    s3.reset()
    yield s3
    s3.reset()


def _source(tmp_path: Path, docs: dict[str, str]) -> Path:
    return write(
        tmp_path / f"docs-{next(_names)}.tsv", "".join(f"{k}\t{v}\n" for k, v in docs.items())
    )


def _bucket(s3: LocalS3) -> str:
    name = f"trust-upload-{next(_names)}"
    s3.make_bucket(name)
    return f"s3://{name}/store"


def _opens(url: str, tmp_path: Path) -> RemoteStore:
    store = lading.open_store(url, cache=tmp_path / f"c-{next(_names)}", cache_bytes="1M")
    assert isinstance(store, RemoteStore)
    return store


def _small_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Multipart uploads of 5 MiB parts (S3's smallest), so a 6 MiB file has two."""
    pytest.importorskip("obstore")
    from lading.remote import client_obstore

    monkeypatch.setattr(client_obstore, "UPLOAD_CHUNK", 5 << 20)


# (what the half-open server never answers, the match of the fault, a big store?)
HALF_OPEN = [
    ("every file after the probe", "/snap-", False),
    ("the second part of a multipart upload", "partNumber=2", True),
    ("the manifest", "/meta.json", False),
]


@pytest.mark.parametrize(("where", "match", "big"), HALF_OPEN, ids=[h[0] for h in HALF_OPEN])
def test_a_half_open_server_ends_the_upload_in_one_line_within_its_deadline(
    faults: LocalS3,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    where: str,
    match: str,
    big: bool,
) -> None:
    if big:
        _small_parts(monkeypatch)
    url = _bucket(faults)
    source = _source(tmp_path, BIG if big else DOCS)
    faults.fault(match, 999, "hang", op="put", delay=60.0)
    started = time.monotonic()
    with pytest.raises(RemoteWriteError) as caught:
        lading.build_store(source, url, cache=str(tmp_path / "b"), progress=False)
    took = time.monotonic() - started
    assert took < DEADLINE, f"{where}: {took:.1f}s"
    assert faults.stats()["faults"] >= 1  # the server did go half-open there
    message = str(caught.value)
    assert "\n" not in message, message
    assert faults.endpoint in message and url in message
    assert "LADING_REMOTE_TIMEOUT" in message and "LADING_UPLOAD_MIN_RATE" in message
    assert ("meta.json" if "meta" in match else "/snap-") in message
    faults.reset()
    with pytest.raises(StoreFormatError, match="no store at"):
        _opens(url, tmp_path)  # nothing committed: the manifest is written last


def test_a_half_open_manifest_put_keeps_the_previous_store(faults: LocalS3, tmp_path: Path) -> None:
    url = _bucket(faults)
    lading.build_store(_source(tmp_path, DOCS), url, cache=str(tmp_path / "b"), progress=False)
    faults.fault("/meta.json", 999, "hang", op="put", delay=60.0)
    other = {k: v.upper() for k, v in DOCS.items()}
    started = time.monotonic()
    with pytest.raises(RemoteWriteError, match=r"meta\.json"):
        lading.build_store(_source(tmp_path, other), url, cache=str(tmp_path / "b"), progress=False)
    assert time.monotonic() - started < DEADLINE
    faults.reset()
    store = _opens(url, tmp_path)
    assert store.get_many(["d1", "d7"]) == [DOCS["d1"], DOCS["d7"]]  # the old one, whole
    store.close()


@pytest.mark.parametrize(("kind", "match"), [("reset", "partNumber=2"), ("slow", "/snap-")])
def test_resets_and_a_slow_server_within_the_deadline_still_upload(
    faults: LocalS3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, match: str
) -> None:
    _small_parts(monkeypatch)
    monkeypatch.setenv("LADING_UPLOAD_MIN_RATE", "2M")  # 3.7 s for the 6 MiB file: a retry fits
    url = _bucket(faults)
    faults.fault(match, 2, kind, op="put", delay=T / 3)  # slow: a third of the base deadline
    lading.build_store(_source(tmp_path, BIG), url, cache=str(tmp_path / "b"), progress=False)
    assert faults.stats()["faults"] == 2
    faults.reset()
    store = _opens(url, tmp_path)
    assert store.get_many(["b0", "b3199"]) == [BIG["b0"], BIG["b3199"]]
    store.close()


def test_a_server_slower_than_the_deadline_fails_and_the_arguments_set_it(
    s3: LocalS3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``timeout=`` and ``upload_min_rate=`` of ``build_store`` (not the environment) set the
    deadline: with every call answered after 1.5 s, a 0.3 s deadline fails at the first PUT
    (no answer has to come in time), and a manifest PUT answered after 1.5 s passes a
    1.5 s + HEALTHY_S one (the PUTs before it answered in time whatever the load)."""
    monkeypatch.delenv("LADING_REMOTE_TIMEOUT", raising=False)
    monkeypatch.delenv("LADING_UPLOAD_MIN_RATE", raising=False)
    s3.reset()
    url = _bucket(s3)
    source = _source(tmp_path, DOCS)
    s3.fault("", 99, "slow", op="any", delay=1.5)
    started = time.monotonic()
    with pytest.raises(RemoteWriteError, match=r"(within|each allowed) 0\.3\d*s .*timeout="):
        lading.build_store(
            source, url, cache=str(tmp_path / "b"), progress=False, timeout=0.3,
            upload_min_rate="100M",
        )  # fmt: skip
    assert time.monotonic() - started < 4 * 0.3 + LOADED_S
    s3.reset()
    s3.fault("/meta.json", 99, "slow", op="put", delay=1.5)
    store = lading.build_store(
        source, url, cache=str(tmp_path / "b"), progress=False, timeout=1.5 + HEALTHY_S,
        upload_min_rate="100M",
    )  # fmt: skip
    assert isinstance(store, RemoteStore)
    store.close()
    s3.reset()


def test_the_deadline_scales_with_the_bytes() -> None:
    from lading.stores.building.upload import put_deadline

    assert put_deadline(0, 20.0, 1 << 20) == 20.0
    assert put_deadline(64 << 20, 20.0, 1 << 20) == 84.0  # a 64 MiB part at 1 MiB/s
    assert put_deadline(1200 << 20, 20.0, 8 << 20) == 170.0


def test_lading_build_into_a_half_open_server_is_one_line_and_exits_cleanly(
    faults: LocalS3, tmp_path: Path
) -> None:
    """The CLI, in its own process: a cancelled upload leaves no obstore call to end during
    the interpreter's exit (that aborted the process before: issue 39 item 9)."""
    import os
    import subprocess
    import sys

    url = _bucket(faults)
    faults.fault("text.bin", 999, "hang", op="put", delay=60.0)
    cli = [sys.executable, "-m", "lading", "build", str(_source(tmp_path, DOCS)), url, "--quiet"]
    env = {**os.environ, "LADING_CACHE": str(tmp_path / "lc")}
    started = time.monotonic()
    done = subprocess.run(cli, capture_output=True, text=True, timeout=120, env=env)
    assert time.monotonic() - started < DEADLINE + 10.0  # + the interpreter's start
    assert done.returncode == 2, done.stderr[-2000:]
    err = done.stderr.strip()
    assert "\n" not in err and "text.bin" in err and "LADING_UPLOAD_MIN_RATE" in err, err


def test_the_fsspec_backend_keeps_the_upload_deadline(faults: LocalS3, tmp_path: Path) -> None:
    pytest.importorskip("s3fs")
    from lading.remote.client_fsspec import FsspecClient
    from lading.stores.building.build import build_store as build_local
    from lading.stores.building.upload import upload

    local = tmp_path / "local"
    build_local(_source(tmp_path, DOCS), local, progress=False)
    url = _bucket(faults)
    base = 2.0  # s3fs's first calls start its session: slower than obstore's under load
    client = FsspecClient(url, {"endpoint_url": faults.endpoint}, timeout=base)
    faults.fault("/meta.json", 999, "hang", op="put", delay=60.0)
    started = time.monotonic()
    with pytest.raises(RemoteWriteError, match=r"meta\.json.*within 2[.\d]*s"):
        upload(local, client, timeout=base, min_rate="100M")
    assert time.monotonic() - started < 2 * base + DEADLINE  # the other files, then meta.json
    faults.reset()
    with pytest.raises(StoreFormatError, match="no store at"):
        _opens(url, tmp_path)


def test_a_half_open_server_after_the_commit_is_a_warning_and_the_store_stands(
    faults: LocalS3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Garbage collection runs after the manifest's PUT, on the read path: a server that
    stops answering its DELETEs of the replaced snapshot is a warning, not a failed upload.
    (``upload`` of a folder: a build's write probe deletes with the same bulk request.)"""
    from lading.remote.clients import open_client
    from lading.stores.building.build import build_store as build_local
    from lading.stores.building.upload import upload

    monkeypatch.setenv("LADING_SNAPSHOT_GRACE_S", "0")  # the old snapshot goes at once
    url = _bucket(faults)
    lading.build_store(_source(tmp_path, DOCS), url, cache=str(tmp_path / "b"), progress=False)
    other = {k: v.upper() for k, v in DOCS.items()}
    local = tmp_path / "v2"
    build_local(_source(tmp_path, other), local, progress=False)
    faults.fault("?delete", 999, "hang", op="put", delay=60.0)  # obstore's bulk DELETE
    started = time.monotonic()
    with pytest.warns(UserWarning, match=r"is committed; its old snapshots stay: DELETE"):
        upload(local, open_client(url, timeout=T))
    assert time.monotonic() - started < DEADLINE
    assert faults.stats()["faults"] >= 1
    faults.reset()
    assert len({k.split("/")[0] for k in open_client(url).list() if "snap-" in k}) == 2
    store = _opens(url, tmp_path)
    assert store.get_many(["d1"]) == [other["d1"]]  # the new store, committed
    store.close()


@pytest.mark.slow  # a stalled part costs one request's bound (4 s) before its retry
def test_one_stalled_part_is_retried_within_the_deadline(
    faults: LocalS3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A part that never answers is sent again after one request's time, as a read is: the
    build goes through (before, the stalled request held the whole file's deadline and the
    build failed)."""
    _small_parts(monkeypatch)
    monkeypatch.setenv("LADING_UPLOAD_MIN_RATE", "2M")  # a 5 MiB part: T + 2.6 s a request
    url = _bucket(faults)
    faults.fault("partNumber=2", 1, "hang", op="put", delay=60.0)
    lading.build_store(_source(tmp_path, BIG), url, cache=str(tmp_path / "b"), progress=False)
    assert faults.stats()["faults"] == 1
    faults.reset()
    store = _opens(url, tmp_path)
    assert store.get_many(["b0", "b3199"]) == [BIG["b0"], BIG["b3199"]]
    store.close()
