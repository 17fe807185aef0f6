"""The counts of a snapshot's reads hold what is still to be read, not every range ever
announced: a loader whose DataLoader workers read announces in the main process, where no read
ever consumes an announcement."""

from __future__ import annotations

from lading.remote.cache import figures
from lading.remote.cache.figures import Figures


def _keys(n: int, start: int = 0) -> list[tuple[int, int, int]]:
    return [(0, 10 * i, 10 * i + 10) for i in range(start, start + n)]


def test_announcements_never_read_here_stay_bounded() -> None:
    """70,000 ranges announced and fetched for by the window, read in other processes: the
    main process remembered every one (~150-200 B each: ~1.5 GB for a 9M-passage epoch)."""
    f = Figures()
    for lo in range(0, 70_000, 500):
        keys = _keys(500, lo)
        f.ahead(keys, keys, 0)
    assert len(f._announced) <= figures._FORGET
    assert len(f._fetched) <= figures._FORGET


def test_a_range_read_as_often_as_announced_is_forgotten_and_counted_planned() -> None:
    f = Figures()
    keys = _keys(100)
    f.ahead(keys, [], 0)
    f.ahead(keys[:10], [], 0)  # announced twice (two steps of the window)
    got = {k: b"x" * 10 for k in keys}
    f.read({k: [0] for k in keys}, got, set(), 0)
    f.read({k: [0] for k in keys[:10]}, got, set(), 1)
    assert len(f._announced) == 0  # a count of 0 was kept for every range ever read
    mine = f.mine()
    assert mine["hits"] == 110 and mine["misses"] == 0
    f.read({keys[0]: [0]}, got, set(), 2)  # a third read: not announced
    assert f.counts["unplanned"] == 1


def test_a_reading_process_keeps_every_announcement_until_its_read() -> None:
    """A process that reads what it announces (no DataLoader workers) with more than
    ``_FORGET`` ranges announced and not yet read (a window of 16 batches of > 4,096 ranges):
    none is let go, so each read of them counts as planned."""
    f = Figures()
    got = {k: b"x" * 10 for k in _keys(70_001)}
    f.read({(0, 0, 10): [0]}, got, set(), 0)  # this process reads
    keys = _keys(70_000, 1)
    for lo in range(0, len(keys), 500):
        f.ahead(keys[lo : lo + 500], [], 0)
    f.read({k: [0] for k in keys}, got, set(), 1)
    assert f.counts["unplanned"] == 1  # the first read only
    assert len(f._announced) == 0
