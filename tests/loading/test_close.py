"""``Loader.close`` with DataLoader workers that will not stop: one remote deadline in all,
shared by the workers' shutdown and the dataset's ``settle`` (the GETs it asked for ahead),
each given the whole of it rather than ``settle`` getting what the workers left (nothing)."""

from __future__ import annotations

import multiprocessing
import os
import time

import pytest
import torch

import lading

pytestmark = pytest.mark.skipif(
    "fork" not in multiprocessing.get_all_start_methods(), reason="needs the fork start method"
)


class StuckAfterTheFirstBatch(torch.utils.data.Dataset):
    """A worker's first batch (4 items) comes at once; any later item never comes (a worker
    stuck in a GET the server never answers). ``settle`` notes the time it is given and whether it
    was called while the workers were still being shut down."""

    def __init__(self) -> None:
        self.given: list[float] = []
        self.calls = 0  # in each worker, its own

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> int:
        self.calls += 1
        if self.calls > 4:
            time.sleep(3600)
        return i

    def settle(self, timeout: float) -> None:
        self.given.append(timeout)


@pytest.mark.slow  # waits out a 2 s deadline
def test_settle_gets_the_remote_deadline_while_stuck_workers_are_shut_down(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LADING_REMOTE_TIMEOUT", "2")
    data = StuckAfterTheFirstBatch()
    loader = lading.loader(
        data, 4, collate_fn=list, num_workers=2, multiprocessing_context="fork", prefetch_factor=1
    )
    batches = iter(loader)
    next(batches)
    time.sleep(0.5)  # the workers now sit in later batches' items
    workers = [w for w in multiprocessing.active_children() if w.pid != os.getpid()]
    started = time.monotonic()
    loader.close()
    elapsed = time.monotonic() - started
    assert elapsed < 3.5, f"close took {elapsed:.1f} s at a 2 s deadline"
    assert data.given and data.given[0] >= 1.5, data.given  # was: 0.0, the workers took it all
    assert not [w for w in workers if w.is_alive()], "a worker outlived close"


class SettleFails(StuckAfterTheFirstBatch):
    """As above, with a ``settle`` hook that raises (a user's, or one interrupted by Ctrl-C)."""

    def settle(self, timeout: float) -> None:
        raise RuntimeError("settle hook failed")


@pytest.mark.slow  # waits out a 2 s deadline
def test_a_settle_that_raises_still_ends_the_stuck_workers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LADING_REMOTE_TIMEOUT", "2")
    loader = lading.loader(
        SettleFails(),
        4,
        collate_fn=list,
        num_workers=2,
        multiprocessing_context="fork",
        prefetch_factor=1,
    )
    batches = iter(loader)
    next(batches)
    time.sleep(0.5)
    workers = [w for w in multiprocessing.active_children() if w.pid != os.getpid()]
    with pytest.raises(RuntimeError, match="settle hook failed"):  # the hook's error is the user's
        loader.close()
    # ... and the workers still end with close (were: left alive, stuck for ever)
    assert not [w for w in workers if w.is_alive()], "a worker outlived close"
