"""A read that joins a GET of this process already under way (a read-ahead's fill, a window's
GET held for its read) and sees it fail.

An outage ends a pass; the user waits for the server and resumes. A GET sent before the resume,
still in its last attempt when the resumed read joined it, failed with the outage's error after
the server came back, and the read raised that error once more (the outage-resume test was red
once in CI for it). Now such a GET, whose last attempt went before the read began, is sent again
by the read, once. One whose attempt went after is the read's own failure (it spent the read's
time: sending it again would make a server that stopped answering cost two deadlines)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from conftest import HEALTHY_S
from lading.errors import RemoteReadError
from lading.remote.cache import NodeCache, node_of
from lading.remote.cache.around import AroundGets
from lading.remote.cache.node import Flight
from lading.remote.clients import open_client
from lading.remote.fetch import Fetcher, Future, _settle
from lading.testing import LocalS3


def _cache(tmp_path: Path, data: bytes) -> NodeCache:
    (tmp_path / "obj").mkdir()
    (tmp_path / "obj" / "text.bin").write_bytes(data)
    url = f"file://{tmp_path / 'obj'}"
    fetcher = Fetcher(lambda: open_client(url, "fsspec"))
    return NodeCache(node_of(tmp_path / "cache", 10_000), fetcher, url)


def _fail_later(future: Future, sent_after_the_read: bool, then: object = None) -> threading.Thread:
    """Fail ``future`` with an outage's error 0.2 s from now (the read waiting on it), its
    last attempt sent before the read began or just now; then run ``then``."""

    def fail() -> None:
        time.sleep(0.2)
        if sent_after_the_read:
            future.sent = time.monotonic()
        _settle([(future, None)], RemoteReadError("GET s3://b/text.bin: 503 (the outage)"))
        if callable(then):
            then()

    thread = threading.Thread(target=fail)
    thread.start()
    return thread


@pytest.mark.parametrize("after", [False, True], ids=["sent-before-the-read", "sent-during-it"])
def test_a_read_ahead_get_failing_under_a_read(tmp_path: Path, after: bool) -> None:
    """The fill thread's GET of a block this process claimed (a read-ahead): the read finds
    it in flight and waits on it."""
    data = os.urandom(1000)
    cache = _cache(tmp_path, data)
    obj, me = cache.obj("text.bin"), cache.node.owner.token
    with cache.ledger.write() as conn:  # this process's claim of [0, 500), its GET under way
        conn.execute("INSERT INTO blocks VALUES (?, 0, 500, 0, 0, ?, NULL, NULL, NULL)", (obj, me))
        conn.execute("UPDATE regions SET state = 1, used = 500 WHERE id = 0")
    future = Future(threading.Condition())
    future.sent = time.monotonic() - 1.0  # its last attempt, before the read
    with cache.node.lock:
        cache.node.inflight[obj, 0] = Flight(500, future)
    # the fill thread hears of the failure: the claim given back, no longer in flight
    thread = _fail_later(future, after, lambda: cache.node._mark([], [(obj, 0, 500)]))
    try:
        if after:
            with pytest.raises(RemoteReadError, match="the outage"):
                cache.read([("text.bin", 100, 300)])
        else:
            assert cache.read([("text.bin", 100, 300)]) == [data[100:300]]
    finally:
        thread.join(HEALTHY_S)
        cache.close()


@pytest.mark.parametrize("after", [False, True], ids=["sent-before-the-read", "sent-during-it"])
def test_a_held_get_failing_under_its_read(tmp_path: Path, after: bool) -> None:
    """A window's GET of a range read around the cache, held for its read."""
    data = os.urandom(1000)
    cache = _cache(tmp_path, data)
    around, future = AroundGets(), Future(threading.Condition())
    future.sent = time.monotonic() - 1.0
    around.hold([(cache.obj("text.bin"), 100, 300)], [future], [0])
    thread = _fail_later(future, after)
    try:
        if after:
            with pytest.raises(RemoteReadError, match="the outage"):
                cache.read([("text.bin", 100, 300)], 0, around=around)
        else:
            assert cache.read([("text.bin", 100, 300)], 0, around=around) == [data[100:300]]
            assert cache.stats()["gets"] >= 1  # its own GET
    finally:
        thread.join(HEALTHY_S)
        cache.close()


def test_a_held_get_that_failed_before_its_read_is_sent_again(tmp_path: Path) -> None:
    """Failed before the read took it (the pass that raised let it go only if it had failed
    by then): the read sends it again instead of raising the old error."""
    data = os.urandom(1000)
    cache = _cache(tmp_path, data)
    around, future = AroundGets(), Future(threading.Condition())
    future.sent = time.monotonic() - 1.0
    _settle([(future, None)], RemoteReadError("GET s3://b/text.bin: 503 (the outage)"))
    around.hold([(cache.obj("text.bin"), 100, 300)], [future], [0])
    try:
        assert cache.read([("text.bin", 100, 300)], 0, around=around) == [data[100:300]]
    finally:
        cache.close()


def test_an_attempt_queued_for_a_slot_counts_as_begun(s3: LocalS3, bucket: str) -> None:
    """A read-ahead GET whose attempt waits for a slot behind a hung one began (``sent``)
    when it was queued: a read that joins it later and sees it fail raises its error rather
    than sending it again (a GET that never got a slot kept ``sent == 0.0`` and was sent
    again: two deadlines against a server that stopped answering)."""
    url = f"s3://{bucket}/queued"
    open_client(url).put("a.bin", os.urandom(1000))
    s3.fault("a.bin", 10, "hang", delay=30.0)
    fetcher = Fetcher(lambda: open_client(url), in_flight=1, retries=0, timeout=1.0)
    try:
        first = fetcher.submit("a.bin", 0, 100)  # holds the one slot
        queued = fetcher.submit("a.bin", 100, 200)
        time.sleep(0.3)
        assert first.sent > 0.0 and queued.sent > 0.0 and not queued.done()
    finally:
        fetcher.close()
        s3.reset()
