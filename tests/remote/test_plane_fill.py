"""The fill thread: GETs that finish close together are written and marked in one ledger
transaction (a transaction a finished call cost ~25 us a cold document of client CPU), and
``close`` does not wait out the linger."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from lading.remote.cache import fill
from lading.remote.cache.fill import Fill, Filler, ready

Marked = list[list[tuple[int, int]]]


def _filler(
    monkeypatch: pytest.MonkeyPatch, linger: float
) -> tuple[Filler, Marked, threading.Event]:
    """A fill thread lingering ``linger`` s, what each of its transactions marked (``(object,
    start)`` of each block), and an event set at its first."""
    monkeypatch.setattr(fill, "LINGER_S", linger)
    marked: Marked = []
    seen = threading.Event()

    def mark(done: list[Any], failed: list[Any], checks: list[Any]) -> None:
        marked.append([(obj, start) for obj, start, *_ in done])
        seen.set()

    return Filler(mark, lambda: None), marked, seen


def _fill(start: int) -> Fill:
    return Fill(0, start, start + 10, 0, start, ready(bytes(10)))


def test_gets_finishing_within_the_linger_are_filled_in_one_transaction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    filler, marked, seen = _filler(monkeypatch, 0.5)
    try:
        filler.put(_fill(0))
        time.sleep(0.05)  # the thread has the first by now: it waits for more
        filler.put(_fill(10))
        assert seen.wait(5)
    finally:
        filler.close()
    assert marked == [[(0, 0), (0, 10)]]


def test_close_fills_what_it_was_given_without_waiting_out_the_linger(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    filler, marked, _ = _filler(monkeypatch, 30.0)
    filler.put(_fill(0))
    time.sleep(0.05)
    began = time.monotonic()
    filler.close()
    assert time.monotonic() - began < 5.0
    assert marked == [[(0, 0)]]
    filler.put(_fill(10))  # after close: dropped
    time.sleep(0.05)
    assert marked == [[(0, 0)]]
