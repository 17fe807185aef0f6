"""The fetcher's attempt timeout counts from when a GET is sent, not from when it was queued
for one of the fetcher's slots (a review, 2026-12-08): behind a server that answers every
GET in 2 s, GETs queued behind others timed out before they were sent ("no answer ... after
20 s" for requests never sent), and each retry went out beside the timed-out call still
running (227 requests in flight for a cap of 120)."""

from __future__ import annotations

import functools

import pytest

from lading.errors import RemotePermanentError
from lading.remote.clients import open_client
from lading.remote.fetch import CALL_RANGES, Fetcher
from lading.testing import LocalS3


@pytest.mark.slow  # a server answering in 1 s: ~4 s
def test_a_get_queued_for_a_slot_is_not_timed_out_for_the_wait(s3: LocalS3, bucket: str) -> None:
    url = f"s3://{bucket}/slots"
    writer = open_client(url, "obstore")
    for i in range(6):
        writer.put(f"o{i}", bytes([i]) * 100)
    fetcher = Fetcher(
        functools.partial(open_client, url, "obstore"), in_flight=2 * CALL_RANGES, timeout=1.6
    )  # two calls in flight at once
    try:
        s3.reset()
        s3.fault("slots/o", 6, "slow", delay=1.0)  # every GET answered after 1 s
        got = fetcher.read([(f"o{i}", 10, 20, None) for i in range(6)])  # 3 waves of 2
        stats = s3.stats()
    finally:
        fetcher.close()
        s3.reset()
    assert got == [bytes([i]) * 10 for i in range(6)]
    assert fetcher.retried == 0, f"{fetcher.retried} retries: a wait for a slot timed out"
    assert stats["max_in_flight"] <= 2, stats["max_in_flight"]


@pytest.mark.slow  # a server that never answers: ~3 s
def test_gets_queued_behind_a_stalled_server_fail_within_the_deadline(
    s3: LocalS3, bucket: str
) -> None:
    """The wait for a slot is bounded by the GET's whole deadline (a review of the change
    above: with only each send timed, 4 GETs queued for 1 slot on a silent server took 4
    timeouts, and 1,000 announced ones would take hours); one never sent says why."""
    import time

    url = f"s3://{bucket}/stalled"
    writer = open_client(url, "obstore")
    for i in range(4):
        writer.put(f"o{i}", bytes([i]) * 100)
    fetcher = Fetcher(
        functools.partial(open_client, url, "obstore"),
        in_flight=CALL_RANGES, timeout=1.0, retries=0, backoff=0.2,
    )  # fmt: skip  # one call in flight at once
    try:
        s3.reset()
        s3.fault("stalled/o", 100, "hang")
        started = time.monotonic()
        futures = [fetcher.submit(f"o{i}", 0, 10) for i in range(4)]
        errors = [f.exception(30) for f in futures]
        elapsed = time.monotonic() - started
    finally:
        fetcher.close()
        s3.reset()
    total = fetcher.deadline.total  # 1 s an attempt, no retry, 0.3 s of pause at most
    # (one sent just before the deadline has a whole attempt's time: total + 1 s at most)
    assert elapsed < total + 1.0 + 0.5, f"{elapsed:.1f} s for a deadline of {total:.1f} s"
    assert all(e is not None for e in errors), errors
    said = [str(e) for e in errors]
    assert sum("request slots past the remote deadline" in e for e in said) >= 2, said
    # (not permanent: a read that joined one as a prefetch sends its ranges again, once)
    assert not any(isinstance(e, RemotePermanentError) for e in errors), errors
