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


@pytest.mark.parametrize("cause", ["reset", "full"])
def test_a_block_not_kept_is_said_once_with_its_own_fix(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any, cause: str
) -> None:
    """A fill the ledger refuses is warned once, with the fix that fits the cause: a folder
    reset under this process names its own (open the store again), a full disk says to free
    space (the reset's fix was cut off at 160 characters and replaced by "free disk space
    ... or lower cache_bytes", a fix for another cause)."""
    import errno

    from lading.remote.cache.ledger import folder_reset

    error = (
        folder_reset(tmp_path / "a-cache-folder-whose-name-is-long" / ("x" * 80))
        if cause == "reset"
        else OSError(errno.ENOSPC, "No space left on device")
    )

    def mark(done: list[Any], failed: list[Any], checks: list[Any]) -> None:
        raise error

    filler = Filler(mark, lambda: None)
    with pytest.warns(RuntimeWarning) as caught:
        filler.put(_fill(0))
        filler.put(_fill(10))
        filler.close()
    said = [str(w.message) for w in caught if "could not keep" in str(w.message)]
    assert len(said) == 1, said
    if cause == "reset":
        assert "open the store or corpus again" in said[0]
        assert "free disk space" not in said[0]
    else:
        assert "free disk space" in said[0]


def test_a_ledger_refused_for_want_of_descriptors_names_them_not_the_disk(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At its descriptor limit SQLite says "unable to open database file", and the warning
    told the user to free disk space (a review's find, open corpora held ~115 sockets each):
    near the limit it names the descriptors and the fix; elsewhere the disk, as before."""
    import sqlite3

    refused = sqlite3.OperationalError("unable to open database file")
    monkeypatch.setattr(fill, "descriptors", lambda: (1020, 1024))
    with pytest.warns(RuntimeWarning, match=r"1,020 of its 1,024 file descriptors.*ulimit -n"):
        Filler(lambda *a: None, lambda: None).warn(refused)
    monkeypatch.setattr(fill, "descriptors", lambda: (40, 1024))
    with pytest.warns(RuntimeWarning, match="free disk space"):
        Filler(lambda *a: None, lambda: None).warn(refused)
