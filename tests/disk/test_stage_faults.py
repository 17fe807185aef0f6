"""``lading stage URL DIR`` (and ``stage()``) under the local S3's faults: every call (the
listing, ``meta.json``, each range of a file) has the remote deadline (``remote_timeout=``,
``LADING_REMOTE_TIMEOUT``) and its retries, like a remote store's document GETs; a server
that keeps failing or is half-open ends the stage in one line naming the endpoint, the
object and the setting, and nothing that opens as valid is left in DIR.

Before: the fsspec copy waited on botocore's own timeouts and retries (minutes on a
half-open server), and its errors were botocore's (issue 39).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import lading
from conftest import HEALTHY_S, LOADED_S, write
from lading.disk import STAGE_MARK
from lading.disk.stage import stage
from lading.errors import RemoteReadError
from lading.testing import LocalS3

pytestmark = pytest.mark.slow  # fault injection: ~5 s a case against a stalling server

pytest.importorskip("s3fs", reason="staging from S3 needs s3fs: pip install 'lading[remote]'")

# Seconds an attempt may take: T where every attempt of the first call (the listing) meets a
# fault, so nothing has to answer in time; HEALTHY_S where a healthy answer must come within an
# attempt (tests/conftest.py: a margin the machine's load does not reach). A hang costs that
# much, so a recovering stage meets one, and the stages that hang 4 times after healthy calls
# are in the slow set.
T = 0.5
DOCS = {f"d{i}": f"staged document {i} " + "z" * (i % 40) for i in range(300)}


@pytest.fixture(scope="module")
def url(s3: LocalS3, tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = tmp_path_factory.mktemp("stage-faults")
    source = write(folder / "docs.tsv", "".join(f"{k}\t{v}\n" for k, v in DOCS.items()))
    s3.make_bucket("trust-stage")
    lading.build_store(source, "s3://trust-stage/docs", cache=str(folder / "b"), progress=False)
    return "s3://trust-stage/docs"


@pytest.fixture
def faults(s3: LocalS3, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalS3]:
    monkeypatch.setenv("LADING_REMOTE_TIMEOUT", str(HEALTHY_S))
    s3.reset()
    yield s3
    s3.reset()


def _stage(url: str, dest: Path, s3: LocalS3, **more: object) -> Path:
    options = {"endpoint_url": s3.endpoint, "skip_instance_cache": True}
    return stage(url, dest, storage_options=options, progress=False, **more)  # type: ignore[arg-type]


def _right(dest: Path) -> None:
    store = lading.open_store(dest)
    ids = sorted(DOCS)[::11]
    assert store.get_many(ids) == [DOCS[i] for i in ids]


RECOVERABLE = [
    ("get", "meta.json", "hang"),
    ("get", "meta.json", "reset"),
    ("list", "", "hang"),
    ("list", "", "reset"),
    ("get", "text.bin", "hang"),
    ("get", "text.bin", "reset"),
    ("get", "text.bin", "short"),
    ("get", "text.bin", "slow"),
    ("get", "ids.off", "error"),
]


@pytest.mark.parametrize(("op", "match", "kind"), RECOVERABLE)
def test_stage_recovers_from_faults_within_the_deadline(
    url: str, faults: LocalS3, tmp_path: Path, op: str, match: str, kind: str
) -> None:
    """Each fault is met twice; a hang or a slow answer, which costs an attempt, once."""
    hits = 1 if kind in ("hang", "slow") else 2
    # hang: answered only long after the deadline; slow: after 3 attempts' worth
    delay = 30.0 if kind == "hang" else 3 * HEALTHY_S
    faults.fault(match, hits, kind, op=op, delay=delay, status=503)
    started = time.monotonic()
    dest = _stage(url, tmp_path / "node" / "docs", faults)
    assert time.monotonic() - started < hits * HEALTHY_S + LOADED_S
    assert faults.stats()["faults"] == hits  # all were met
    _right(dest)


SLOW = pytest.mark.slow  # 4 hangs of HEALTHY_S each, after the listing's healthy answer
NEVER = [("list", "", "hang"), pytest.param("get", "meta.json", "hang", marks=SLOW),
         pytest.param("get", "text.bin", "hang", marks=SLOW), ("get", "text.bin", "reset"),
         ("get", "text.off", "error")]  # fmt: skip


@pytest.mark.parametrize(("op", "match", "kind"), NEVER)
def test_a_stage_that_never_succeeds_is_one_line_within_the_deadline_and_leaves_nothing(
    url: str,
    faults: LocalS3,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    op: str,
    match: str,
    kind: str,
) -> None:
    limit = T if op == "list" else HEALTHY_S  # the listing is the first call: nothing answers
    monkeypatch.setenv("LADING_REMOTE_TIMEOUT", str(limit))
    faults.fault(match, 99, kind, op=op, delay=30.0, status=503)
    dest = tmp_path / "node" / "docs"
    started = time.monotonic()
    with pytest.raises(RemoteReadError) as caught:
        _stage(url, dest, faults)
    assert time.monotonic() - started < (4 * limit if kind == "hang" else 0) + LOADED_S
    message = str(caught.value)
    assert "\n" not in message and faults.endpoint in message, message
    assert "LADING_REMOTE_TIMEOUT" in message and "failed 4 times" in message
    assert f"{url}/" in message and (match or url) in message  # the object
    assert not dest.exists()  # nothing there opens as a store, no temporary copy left
    left = {p.name for p in dest.parent.iterdir()} if dest.parent.exists() else set()
    assert left == set(), left  # (a DEST.stage-error only where the node has other ranks)


def test_the_argument_sets_the_deadline_and_the_cli_says_one_line(
    url: str, s3: LocalS3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import subprocess
    import sys

    monkeypatch.delenv("LADING_REMOTE_TIMEOUT", raising=False)
    s3.reset()
    s3.fault("", 99, "hang", op="list", delay=30.0)  # the first call: nothing answers in time
    started = time.monotonic()
    with pytest.raises(RemoteReadError, match=r"each allowed 0\.3s"):
        _stage(url, tmp_path / "a" / "docs", s3, remote_timeout=0.3)
    assert time.monotonic() - started < 4 * 0.3 + LOADED_S
    s3.reset()
    s3.fault("", 99, "hang", op="list", delay=30.0)
    cli = [sys.executable, "-m", "lading", "stage", url, str(tmp_path / "b" / "docs")]
    cli += ["-o", f"endpoint_url={s3.endpoint}", "--quiet"]
    env = {**__import__("os").environ, "LADING_REMOTE_TIMEOUT": "0.3"}
    started = time.monotonic()
    done = subprocess.run(cli, capture_output=True, text=True, timeout=120, env=env)
    assert time.monotonic() - started < 4 * 0.3 + LOADED_S + 5.0  # + the interpreter's start
    assert done.returncode == 2, done.stderr
    # the error in one line, after the one line said at the first timeout (issue 50 item 3)
    said, err = done.stderr.strip().splitlines()
    assert said.startswith(f"lading: no answer from {s3.endpoint} after 0.3 s"), said
    assert url in err and "LADING_REMOTE_TIMEOUT" in err, err
    assert s3.endpoint in err
    s3.reset()


def test_a_copy_interrupted_by_a_dead_server_is_not_reused(
    url: str, faults: LocalS3, tmp_path: Path
) -> None:
    dest = tmp_path / "node" / "docs"
    faults.fault("text.off", 99, "reset")  # the server dies in the copy: no answer comes
    with pytest.raises(RemoteReadError):
        _stage(url, dest, faults)
    faults.reset()
    _right(_stage(url, dest, faults))  # the next run copies it whole
    assert (dest / STAGE_MARK).is_file()


def test_staging_and_remote_stores_share_one_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """One setting, one rule: a staging copy and a remote store's fetcher take their attempts
    and their message from lading.deadline (there were three loops and three messages)."""
    from lading.deadline import Deadline
    from lading.disk.remote import RemoteDir
    from lading.remote.settings import RemoteSettings

    monkeypatch.setenv("LADING_REMOTE_TIMEOUT", "2.5")
    staging = RemoteDir("memory://lading-deadline", {})
    fetcher = RemoteSettings.of("cache", "1M").fetcher("s3://bucket/x")
    assert staging.deadline == fetcher.deadline == Deadline(2.5)


def test_a_synchronous_filesystem_is_staged_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``memory://`` (fsspec, not async): the same listing and ranged reads, called directly;
    1,000-byte ranges here, so a file is read in many."""
    import fsspec

    from lading.disk import remote

    monkeypatch.setattr(remote, "BLOCK", 1000)

    local = tmp_path / "local"
    lading.build_store(
        write(tmp_path / "d.tsv", "".join(f"{k}\t{v}\n" for k, v in DOCS.items())), local
    )
    fs = fsspec.filesystem("memory")
    for path in local.rglob("*"):
        if path.is_file():
            fs.pipe_file(f"/trust-stage/{path.relative_to(local).as_posix()}", path.read_bytes())
    assert not fs.async_impl
    dest = stage("memory://trust-stage", tmp_path / "node" / "docs", progress=False)
    _right(dest)
    objects = remote.RemoteDir("memory://trust-stage", {})
    text = next(rel for rel in objects.files() if rel.endswith("text.bin"))
    size = objects.files()[text]["size"]
    assert b"".join(objects.blocks(text, size)) == (local / text).read_bytes()
