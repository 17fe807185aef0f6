"""A remote failure a user meets is one line of one family (lading.errors.RemoteError) naming
the object or bucket, the endpoint and the fix, and what retrying cannot fix is not retried:
access denied, no credentials, no bucket, a URL that cannot be right, an unknown client
option, an object deleted since the snapshot was opened (issue 50 item 3)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import lading
from conftest import HEALTHY_S, LOADED_S, write
from lading.cli import main
from lading.errors import (
    RemoteAccessError,
    RemoteChangedError,
    RemoteError,
    RemoteNotFoundError,
    RemoteURLError,
)
from lading.remote.clients import open_client
from lading.remote.objects import RemoteReadError
from lading.testing import LocalS3
from lading.testing.localserver import free_port

DOCS = {f"d{i}": f"document {i}" for i in range(40)}
_made = iter(range(10**6))


@pytest.fixture(scope="module")
def store_url(s3: LocalS3, tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = tmp_path_factory.mktemp("errors")
    source = write(folder / "docs.tsv", "".join(f"{k}\t{v}\n" for k, v in DOCS.items()))
    s3.make_bucket("remote-errors")
    url = "s3://remote-errors/docs"
    lading.build_store(source, url, cache=str(folder / "build-cache"), progress=False)
    return url


@pytest.fixture
def faults(s3: LocalS3) -> Iterator[LocalS3]:
    s3.reset()
    yield s3
    s3.reset()


def _open(url: str, tmp_path: Path, timeout: float = HEALTHY_S, **more: object) -> object:
    cache = tmp_path / f"cache-{next(_made)}"
    return lading.open_store(url, cache=cache, cache_bytes="1M", timeout=timeout, **more)  # type: ignore[arg-type]


def _parquet(url: str, tmp_path: Path) -> object:
    from lading.tabular import PartitionedParquet

    return PartitionedParquet([url], batch_size=2, cache=tmp_path / f"pq-{next(_made)}")


def _corpus(url: str, tmp_path: Path) -> object:
    from lading.lm import TokenCorpus

    return TokenCorpus.open(url, cache=tmp_path / f"tc-{next(_made)}")


OPENERS = {"open_store": _open, "TokenCorpus.open": _corpus, "PartitionedParquet": _parquet}


def _one_line(error: BaseException) -> str:
    message = str(error)
    assert "\n" not in message, message
    assert "Debug source" not in message and "<?xml" not in message, message
    return message


@pytest.mark.parametrize("opener", sorted(OPENERS))
def test_access_denied_is_said_at_once_naming_the_credentials_and_the_policy(
    store_url: str, faults: LocalS3, tmp_path: Path, opener: str
) -> None:
    url = store_url if opener != "PartitionedParquet" else "s3://remote-errors/x.parquet"
    faults.fault("", 99, "error", status=403, op="any")
    started = time.monotonic()
    with pytest.raises(RemoteAccessError) as caught:
        OPENERS[opener](url, tmp_path)
    assert time.monotonic() - started < LOADED_S
    assert faults.stats()["faults"] == 1  # not retried as if it were transient
    message = _one_line(caught.value)
    assert "access denied" in message and "AWS_ACCESS_KEY_ID" in message
    assert "policy" in message and "remote-errors" in message and faults.endpoint in message
    assert "raise the timeout" not in message


@pytest.mark.parametrize("opener", sorted(OPENERS))
def test_a_401_with_credentials_set_says_they_were_refused_not_missing(
    store_url: str, faults: LocalS3, tmp_path: Path, opener: str
) -> None:
    """The server refusing the keys it was given (401: "lacked valid authentication
    credentials") is not "no credentials found": that line sent users looking for keys they
    had set."""
    url = store_url if opener != "PartitionedParquet" else "s3://remote-errors/x.parquet"
    faults.fault("", 99, "error", status=401, op="any")
    with pytest.raises(RemoteAccessError) as caught:
        OPENERS[opener](url, tmp_path)
    message = _one_line(caught.value)
    assert "no credentials found" not in message, message
    assert "access denied" in message and "AWS_ACCESS_KEY_ID" in message, message


def test_no_credentials_at_all_is_said(
    store_url: str, faults: LocalS3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    # where the instance metadata would be asked: nothing answers there
    monkeypatch.setenv("AWS_METADATA_ENDPOINT", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", f"http://127.0.0.1:{free_port()}")
    with pytest.raises(RemoteAccessError) as caught:
        _open(store_url, tmp_path)
    message = _one_line(caught.value)
    assert "no credentials found" in message and "AWS_ACCESS_KEY_ID" in message
    assert "failed 4 times" not in message


@pytest.mark.parametrize("opener", sorted(OPENERS))
def test_a_missing_bucket_is_one_class_naming_bucket_endpoint_and_fix(
    faults: LocalS3, tmp_path: Path, opener: str
) -> None:
    with pytest.raises(RemoteNotFoundError) as caught:
        OPENERS[opener]("s3://no-such-bucket-here/x", tmp_path)
    message = _one_line(caught.value)
    assert "bucket 'no-such-bucket-here' does not exist" in message
    assert faults.endpoint in message and "create the bucket" in message


@pytest.mark.parametrize("opener", sorted(OPENERS))
@pytest.mark.parametrize(
    ("url", "meant"),
    [
        ("s3://remote-errors//docs", "s3://remote-errors/docs"),
        ("s3:///remote-errors/docs", "s3://remote-errors/docs"),
        ("S3://remote-errors/docs", "s3://remote-errors/docs"),
    ],
)
def test_a_url_that_cannot_be_right_says_what_was_meant(
    store_url: str, tmp_path: Path, opener: str, url: str, meant: str
) -> None:
    with pytest.raises(RemoteURLError) as caught:
        OPENERS[opener](url, tmp_path)
    assert f"did you mean {meant}?" in _one_line(caught.value)


@pytest.mark.parametrize("typed", ["s3:/remote-errors/docs", "s3//remote-errors/docs"])
def test_a_mistyped_scheme_gets_a_did_you_mean(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, typed: str
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(lading.StoreFormatError, match="did you mean s3://remote-errors/docs"):
        lading.open_store(typed)
    with pytest.raises(FileNotFoundError, match="did you mean s3://remote-errors/docs"):
        lading.stage(typed, tmp_path / "staged", progress=False)


def test_an_unknown_client_option_is_named(store_url: str, tmp_path: Path) -> None:
    with pytest.raises(RemoteURLError) as caught:
        _open(store_url, tmp_path, storage_options={"bogus_key": 1})
    assert "bogus_key" in _one_line(caught.value)


@pytest.mark.parametrize("key", ["allow_http", "aws_allow_http"])
def test_an_http_client_option_is_taken_not_a_rust_panic(
    store_url: str, s3: LocalS3, tmp_path: Path, key: str
) -> None:
    """``allow_http`` (MinIO's users set it, and AWS_ALLOW_HTTP) is one of obstore's client
    options: passed among the store's config keys it raised a Rust panic (a BaseException, past
    every ``except Exception``) after a 60-frame backtrace on stderr."""
    options = {"endpoint_url": s3.endpoint, key: "true"}
    store = _open(store_url, tmp_path, storage_options=options)
    assert len(store) > 0
    store.close()


def _stage(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    started = time.monotonic()
    code = main(["stage", *argv, "--quiet"])
    assert time.monotonic() - started < LOADED_S  # nothing was retried for a minute
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    return code, err


def test_lading_stage_says_which_bucket_is_missing(
    faults: LocalS3, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = _stage(capsys, "s3://no-such-bucket-here/docs", str(tmp_path / "d"))
    assert code == 2 and "bucket 'no-such-bucket-here' does not exist" in err
    assert faults.endpoint in err


def test_lading_stage_access_denied_is_one_line(
    store_url: str, faults: LocalS3, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    faults.fault("", 99, "error", status=403, op="any")
    code, err = _stage(capsys, store_url, str(tmp_path / "d"))
    assert code == 2 and "access denied" in err and "AWS_ACCESS_KEY_ID" in err
    assert faults.stats()["faults"] == 1


def test_lading_stage_names_an_unknown_option(
    store_url: str, faults: LocalS3, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = _stage(capsys, store_url, str(tmp_path / "d"), "-o", "bogus=1")
    assert code == 2 and "bogus" in err and "raise the timeout" not in err


def test_an_object_deleted_since_the_open_is_said_and_verify_says_damaged(
    s3: LocalS3, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = write(tmp_path / "docs.tsv", "".join(f"{k}\t{v}\n" for k, v in DOCS.items()))
    s3.make_bucket("remote-errors-gone")
    url = "s3://remote-errors-gone/docs"
    lading.build_store(source, url, cache=str(tmp_path / "build-cache"), progress=False)
    store = _open(url, tmp_path)
    client = open_client(url)
    client.delete(next(k for k in client.list() if k.endswith("text.bin")))
    with pytest.raises(RemoteChangedError) as caught:
        store.get_many(["d3"])  # type: ignore[attr-defined]
    message = _one_line(caught.value)
    assert "deleted or overwritten since the snapshot was opened" in message
    assert "text.bin" in message and "reopen" in message and "rebuild" in message
    store.close()  # type: ignore[attr-defined]
    code = main(["verify", url])
    err = capsys.readouterr().err
    assert code == 1 and "text.bin" in err and "rebuild" in err, err


def test_an_object_overwritten_in_place_says_reopening_will_not_help(
    s3: LocalS3, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    """A snapshot's object written over in place (lading never does: another program did).
    ``lading get`` opens the store just now, so "reopen the store" (the advice for an object
    deleted under an open store) would be no fix: its open's spot check says the object was
    replaced and that the store must be rebuilt (review A of 2026-12-07 asked; this holds
    it)."""
    source = write(tmp_path / "docs.tsv", "".join(f"{k}\t{v}\n" for k, v in DOCS.items()))
    s3.make_bucket("remote-errors-over")
    url = "s3://remote-errors-over/docs"
    lading.build_store(source, url, cache=str(tmp_path / "build-cache"), progress=False)
    client = open_client(url)
    key = next(k for k in client.list() if k.endswith("text.bin"))
    client.put(key, b"x" * len(client.get(key)))
    monkeypatch.setenv("LADING_CACHE", str(tmp_path / "cache"))
    code = main(["get", url, "d3"])
    err = capsys.readouterr().err
    assert code == 2 and "text.bin" in err and "\n" not in err.strip(), err
    assert "replaced or damaged after the build" in err and "rebuild" in err, err
    assert "reopen the store" not in err, err


def test_every_remote_error_is_one_family() -> None:
    from lading.errors import RemoteReadError, RemoteWriteError
    from lading.remote.objects import PermanentError, RemoteNotSupportedError

    for kind in (
        RemoteAccessError, RemoteChangedError, RemoteNotFoundError, RemoteURLError,
        RemoteReadError, RemoteWriteError, PermanentError, RemoteNotSupportedError,
    ):  # fmt: skip
        assert issubclass(kind, RemoteError)
    assert issubclass(RemoteAccessError, PermanentError)  # never retried


@pytest.mark.slow  # waits on the deadline: 4 attempts of T
@pytest.mark.parametrize("call", ["open_store", "lading stage"])
def test_a_server_that_never_answers_is_said_at_the_first_timeout(
    store_url: str, faults: LocalS3, tmp_path: Path, capfd: pytest.CaptureFixture[str], call: str
) -> None:
    t = 0.5  # every attempt meets the hang: nothing has to answer in time
    faults.fault(
        "meta.json" if call == "open_store" else "",
        99,
        "hang",
        op="get" if call == "open_store" else "list",
    )
    import lading.deadline

    lading.deadline._silence_said.clear()  # another test's line this minute
    with pytest.raises(RemoteError):
        if call == "open_store":
            _open(store_url, tmp_path, timeout=t)
        else:
            lading.stage(store_url, tmp_path / "d", remote_timeout=t, progress=False)
    said = [line for line in capfd.readouterr().err.splitlines() if "no answer" in line]
    assert len(said) == 1, said  # once, not at every attempt
    assert said[0].startswith(f"lading: no answer from {faults.endpoint} after 0.5 s")
    assert "retrying 1/3" in said[0] and "LADING_REMOTE_TIMEOUT" in said[0]


@pytest.mark.parametrize("code", ["InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied"])
def test_wrong_credentials_are_access_denied_by_their_code(code: str) -> None:
    """moto checks no signature: S3's codes for a wrong key or secret, as botocore words them
    (``lading stage`` printed 62 lines for one), are told apart from a transient failure."""
    from lading.disk.remote import refused

    said = f"An error occurred ({code}) when calling the ListObjectsV2 operation: ..."
    assert refused(said) and not refused("An error occurred (SlowDown) when calling ...")


def test_verify_of_a_missing_remote_store_exits_2_as_a_missing_folder_does(
    s3: LocalS3, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Nothing there to check (a bucket without the store) is bad input, 2, not damage, 1."""
    s3.make_bucket("remote-errors-nostore")
    code = main(["verify", "s3://remote-errors-nostore/nothing"])
    err = capsys.readouterr().err
    assert code == 2 and "no store at s3://remote-errors-nostore/nothing" in err, err


def test_no_credentials_through_fsspec_is_said(
    store_url: str, s3: LocalS3, monkeypatch: pytest.MonkeyPatch
) -> None:
    """botocore's NoCredentialsError (the fsspec backend) is still "no credentials found", now
    that the word "credentials" in a server's 401 no longer means it."""
    pytest.importorskip("s3fs")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/config")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    client = open_client(store_url, backend="fsspec", options={"endpoint_url": s3.endpoint})
    with pytest.raises(RemoteAccessError) as caught:
        client.get("meta.json")
    message = _one_line(caught.value)
    assert "no credentials found" in message and "AWS_ACCESS_KEY_ID" in message, message


@pytest.mark.parametrize("pinned", [False, True])
def test_the_fetcher_counts_the_requests_it_sends(
    store_url: str, faults: LocalS3, pinned: bool
) -> None:
    """Ranges that touch go out as one request (obstore's ``get_ranges`` merges them even at
    ``coalesce=0``): the fetcher counted one GET a range (7 counted, 1 sent), so every
    ``gets`` figure read high where the planner had cut a run at block limits. Pinned, the
    first range (of the first call to an object) goes alone with its ``If-Match``. Ranges
    that overlap (windows sharing a token) are sent once: ``bytes_fetched`` counted them a
    range, 0.02-3 % over the server's bytes on a token corpus."""
    import functools

    from lading.remote.fetch import Fetcher

    fetcher = Fetcher(functools.partial(open_client, store_url, "obstore"), timeout=HEALTHY_S)
    try:
        info = fetcher.list()
        key = next(k for k in info if k.endswith("text.bin"))
        etag = info[key].etag if pinned else None
        ranges = [(0, 3), (3, 7), (7, 12), (40, 44), (43, 50), (44, 48)]
        whole = open_client(store_url).get(key)  # (not by the fetcher: its first call pins)
        faults.reset()
        sent, fetched = fetcher.gets, fetcher.bytes_fetched
        got = fetcher.read([(key, a, b, etag) for a, b in ranges])
        assert got == [whole[a:b] for a, b in ranges]
        want = 3 if pinned else 2  # pinned: (0, 3) alone, then (3, 12) and (40, 50)
        assert fetcher.gets - sent == faults.stats()["gets"] == want
        assert fetcher.bytes_fetched - fetched == faults.stats()["get_bytes"] == 22
    finally:
        fetcher.close()


def test_only_a_client_that_sends_if_match_counts_its_reads_as_pinned(store_url: str) -> None:
    """A read counted as pinned confirms the node cache's unpinned blocks of its object; fsspec
    sends ``If-Match`` through s3fs only, so a gcsfs or memory filesystem's reads (sent without
    it) must count as unpinned, never as a check that passed."""
    import fsspec

    from lading.remote.client_fsspec import FsspecClient
    from lading.remote.fetch import pinned_ranges

    fsspec.filesystem("memory").pipe("/pins/x", b"hello")
    assert pinned_ranges(FsspecClient("memory://pins"), 3, "an-etag") == 0
    pytest.importorskip("s3fs")
    s3fs_client = open_client(store_url, "fsspec")
    assert pinned_ranges(s3fs_client, 3, "an-etag") == 3  # each range its own pinned GET
    assert pinned_ranges(open_client(store_url, "obstore"), 3, "an-etag") == 1


def test_a_client_that_cannot_send_if_match_is_not_asked_to_check() -> None:
    """``Fetcher.confirm`` of an object through a client that cannot send ``If-Match``
    (fsspec but for s3fs) checks nothing and says nothing passed: its reads are all unpinned,
    and asking one to pin failed an assertion on every read of an unconfirmed block."""
    import functools

    import fsspec

    from lading.remote.client_fsspec import FsspecClient
    from lading.remote.fetch import Fetcher

    fsspec.filesystem("memory").pipe("/nopin/x", b"hello")
    fetcher = Fetcher(functools.partial(FsspecClient, "memory://nopin"), timeout=HEALTHY_S)
    try:
        assert fetcher.confirm([("x", "an-etag")]) == {}
        assert fetcher.gets == 0 and fetcher.passed("x") is None
    finally:
        fetcher.close()


@pytest.fixture
def obstore_fetcher(store_url: str) -> Iterator[tuple[Any, str, bytes]]:
    """A fetcher through obstore (one retry), the store's ``text.bin`` key and its bytes."""
    import functools

    from lading.remote.fetch import Fetcher

    fetcher = Fetcher(
        functools.partial(open_client, store_url, "obstore"), timeout=HEALTHY_S, retries=1
    )
    try:
        key = next(k for k in fetcher.list() if k.endswith("text.bin"))
        yield fetcher, key, open_client(store_url).get(key)
    finally:
        fetcher.close()


TOUCHING = [(0, 32), (32, 58)]  # one request of 58 bytes: a short reply gives 29


def test_a_reply_shorter_than_touching_ranges_is_named_short_not_a_rust_panic(
    obstore_fetcher: tuple[Any, str, bytes], faults: LocalS3
) -> None:
    """Touching ranges go out as one request; a reply cut short before the second range's
    start made obstore panic while slicing it ("range start must not be greater than end"),
    and every try failed as ``RustPanic: rust future panicked: unknown error``. Such a call
    is now read again a range at a time: a short reply is named as one, and a fault that
    passes is recovered from."""
    fetcher, key, whole = obstore_fetcher
    faults.fault("text.bin", 99, "short")
    with pytest.raises(RemoteReadError, match="came back short") as caught:
        fetcher.read([(key, a, b, None) for a, b in TOUCHING])
    assert "RustPanic" not in str(caught.value)
    faults.reset()
    faults.fault("text.bin", 1, "short")  # once: the next try reads them whole
    assert fetcher.read([(key, a, b, None) for a, b in TOUCHING]) == [whole[0:32], whole[32:58]]


def test_every_get_a_short_reply_costs_is_counted_in_the_fetchers_gets(
    obstore_fetcher: tuple[Any, str, bytes], faults: LocalS3
) -> None:
    """A call of touching ranges whose reply came back short is read again a range at a
    time; those GETs are sent, so ``gets`` (what ``cache_stats()`` and the benchmarks report)
    counts them, as the server does: it counted the first request alone."""
    fetcher, key, whole = obstore_fetcher
    faults.reset()
    before = fetcher.gets
    faults.fault("text.bin", 1, "short")  # once: the ranges read again come whole
    assert fetcher.read([(key, a, b, None) for a, b in TOUCHING]) == [whole[0:32], whole[32:58]]
    sent = faults.stats()["gets"]
    assert sent == 3, sent  # the short reply, then a range at a time
    assert fetcher.gets - before == sent
