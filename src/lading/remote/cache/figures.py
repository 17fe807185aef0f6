"""What one snapshot's reads of the node cache did, counted per range read.

A range is a *hit* when no GET was made for it (it was cached, or fetched for another range or
process) and a *miss* when one was (by the window ahead on its behalf, or by the read itself);
it is *unplanned* when no window announced it first. :class:`Figures` keeps this process's
counts under a lock of its own (never held across I/O) and hands the node the difference since
it last did, so the node's figures sum every process that used the folder.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from lading.remote.ranges import NO_STEP

Key = tuple[int, int, int]  # object id, start, end
FIGURES = (
    "hits",
    "misses",
    "unplanned",
    "bytes_used",
    "bytes_bypassed",
    "bytes_held",
    "hits_ahead",
)
# ranges announced or fetched for but not read here: past this many, the oldest are let go
# (a loader whose DataLoader workers read announces in the main process, where no read
# consumes them: every range of every epoch was remembered, ~150-200 B each)
_FORGET = 65536


class Figures:
    """This process's counts for one snapshot's reads (see the module doc)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        self.by_epoch: dict[int, list[int]] = {}  # step >> 32 -> [hits, misses]
        self._announced: Counter[Key] = Counter()  # ranges a window announced, not yet read
        self._fetched: set[Key] = set()  # ranges a window fetched for, not yet read
        self._reported: Counter[str] = Counter()  # figures the node was given

    def add(self, figure: str, amount: int) -> None:
        with self._lock:
            self.counts[figure] += amount

    def ahead(self, announced: list[Key], fetched: list[Key], cached: int) -> None:
        """A window announced ``announced``, fetched ``fetched`` for them, found ``cached``."""
        with self._lock:
            self._announced.update(announced)
            self._fetched.update(fetched)
            self.counts["hits_ahead"] += cached
            if self.counts["reads"]:  # reads here take what is announced: every count exact
                return
            if len(self._fetched) > _FORGET:  # announced here, read in other processes
                self._fetched = set()
            if len(self._announced) > _FORGET:  # the newest half kept (a dict keeps order)
                newest = list(self._announced.items())[-_FORGET // 2 :]
                self._announced = Counter(dict(newest))

    def read(
        self, where: dict[Key, list[int]], got: dict[Key, bytes], fetched: set[Key], now: int | None
    ) -> None:
        """A read of the ranges ``where`` (each at its places in the call) at step ``now``;
        ``fetched``: the ranges it made a GET for."""
        epoch = None if now is None or now >= NO_STEP else now >> 32
        fetched = set(fetched)  # the first read of a range fetched now is its miss, not all
        with self._lock:
            c = self.counts
            for k, places in where.items():
                if k[2] <= k[1]:
                    continue  # an empty range: nothing to read, nothing to count
                for _ in places:
                    # one GET serves every read of its range until one has read it (the
                    # window may have announced it for several steps: a read kept it)
                    miss = k in fetched or k in self._fetched
                    fetched.discard(k)
                    self._fetched.discard(k)
                    told = self._announced.get(k, 0)
                    if told > 1:
                        self._announced[k] = told - 1
                    elif told:
                        del self._announced[k]  # (a count of 0 kept was a range's ~150 B)
                    else:
                        c["unplanned"] += 1
                    c["misses" if miss else "hits"] += 1
                    c["bytes_used"] += len(got[k])
                    if epoch is not None:
                        self.by_epoch.setdefault(epoch, [0, 0])[miss] += 1
            c["reads"] += 1
            if len(self._fetched) > _FORGET:  # fetched for, read under another key
                self._fetched = set()

    def news(self, fetcher: dict[str, int]) -> Counter[str]:
        """What the node has not been told yet, this fetcher's figures included."""
        with self._lock:
            now = Counter({**self.counts, **fetcher})
            delta = now - self._reported
            self._reported = now
        return delta

    def mine(self) -> dict[str, Any]:
        """The counts a reader sees (:meth:`~.reads.NodeCache.stats`)."""
        with self._lock:
            out: dict[str, Any] = {k: self.counts.get(k, 0) for k in FIGURES}
            out["wait_s"] = self.counts.get("wait_us", 0) / 1e6
            out["by_epoch"] = {e: tuple(c) for e, c in self.by_epoch.items()}
        return out
