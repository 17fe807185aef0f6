"""A user's own loop over a bucket's store, with ``plan`` and ``prefetch`` as their docstrings
describe them (not ``lading.loader``): a cap that holds the corpus keeps it, and a window that
announces a batch at several steps fetches each document once.

Were: ``plan`` of one epoch at a time (no read of the next epoch told) kept nothing through the
cache at any cap (every epoch fetched every document again: 0 hits in 3 epochs at a cap 1,400x
the corpus); a window of the next 4 batches at each step fetched each document ~3.5 times (each
announcement started another GET around the cache, the last one kept).
"""

from __future__ import annotations

import random
from pathlib import Path

import lading
from conftest import write
from lading.step import step_of

DOCS = 200


def _store(bucket: str, tmp_path: Path) -> tuple[str, list[str]]:
    rng = random.Random(1)
    lines = [f"D{i}\tT{i} " + "w" * rng.randrange(50, 400) for i in range(DOCS)]
    src = write(tmp_path / "docs.tsv", "\n".join(lines) + "\n")
    url = f"s3://{bucket}/own-loop"
    lading.build_store(src, url, cache=str(tmp_path / "up"), progress=False)
    return url, [f"D{i}" for i in range(DOCS)]


def _epochs(url: str, ids: list[str], cache: Path, ahead: int) -> list[int]:
    """GETs of each of 3 epochs that fetched a document's bytes: each epoch planned at its
    start (that epoch only), each step announcing the next ``ahead`` batches, then reading its
    own. A one-byte GET is no document's: it confirms blocks filled by unpinned GETs whose
    object's last check was sent before their bytes came (``lading.remote.fetch``'s pinning),
    which under load (a CI run at a load of 10) falls in epoch 2 or 3 in 5 runs of 25."""
    rng = random.Random(2)
    store = lading.open_store(url, cache=cache, cache_bytes="64M")
    gets = []
    for epoch in range(3):
        order = ids[:]
        rng.shuffle(order)
        batches = [order[i : i + 10] for i in range(0, DOCS, 10)]
        store.plan(batches, first_step=step_of(epoch, 0))
        before = store.cache_stats()
        for j, batch in enumerate(batches):
            store.prefetch(batches[j : j + ahead], first_step=step_of(epoch, j))
            got = store.get_many(batch, step=step_of(epoch, j))
            assert all(t.startswith(f"T{d[1:]} ") for t, d in zip(got, batch))
        store._columns.cache.drain(30)
        after = store.cache_stats()
        sent, fetched = (after[k] - before[k] for k in ("gets", "bytes_fetched"))
        gets.append(sent if fetched > sent else 0)  # (some bytes a GET: a document's)
    store.close()
    return gets


def test_a_plan_of_one_epoch_at_a_time_keeps_what_the_cap_holds(
    bucket: str, tmp_path: Path
) -> None:
    url, ids = _store(bucket, tmp_path)
    gets = _epochs(url, ids, tmp_path / "c", ahead=1)
    assert 0 < gets[0] <= DOCS, gets
    assert gets[1] == 0 and gets[2] == 0, gets  # every document kept by the 64M cap


def test_a_window_announcing_a_batch_at_several_steps_fetches_it_once(
    bucket: str, tmp_path: Path
) -> None:
    url, ids = _store(bucket, tmp_path)
    gets = _epochs(url, ids, tmp_path / "c", ahead=4)
    assert 0 < gets[0] <= DOCS, gets  # (each document at most one GET: coalesced, fewer)
    assert gets[1] == 0 and gets[2] == 0, gets
