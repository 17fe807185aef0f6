"""What an LM loader over remote corpora tells the node cache: each batch's token ranges, a
window ahead to fetch and the whole epoch to evict by, and one read of the cache a batch.

A batch of any LM mode reads ``tokens[a:b]`` of its corpora (pieces of documents: a window is
a contiguous range of the epoch stream, so its pieces are exact ranges of ``tokens.bin``). Its
ranges are found by building it with the corpora's :class:`~lading.lm.remote.RemoteTokens`
recording instead of reading (no token value decides what a batch reads, only the plan: the
build is the one source of truth for every mode, mixtures, packing and ``boundaries=True``
included). :class:`RemoteReads` wraps the loader's workload and

- announces (:func:`lading.loading.lookahead.announcer`, the map loader's route): at each
  iteration's start the epoch's whole order of ranges (and the next epoch's) goes to each
  corpus's node cache as its eviction plan (:meth:`~lading.remote.cache.NodeCache.plan`),
  and every ``LOOKAHEAD`` batches the next ones are prefetched; the order is also written for
  this process's DataLoader workers (:func:`~lading.remote.schedule.save_order`);
- builds a batch with one read of the cache per corpus (every range of the batch at once, at
  the batch's step), which the build's slices are then served from. A DataLoader worker first
  takes its parent's order (:meth:`at_step`), so what it reads keeps its next use.

Reads never depend on what the cache holds: the same batches come with a cold cache, a cap too
small for a window (read around the cache), or faults the fetcher retries.
"""

from __future__ import annotations

import os
import secrets
import threading
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from lading.lm.remote import RemoteTokens
from lading.lm.segment import SegmentBatchKey
from lading.lm.workload import LMWorkload
from lading.loading.hooks import Hooks
from lading.loading.lookahead import STEPS_PER_EPOCH, Announce, announcer, step_of
from lading.loading.state import Cursor
from lading.remote.ranges import Need
from lading.remote.schedule import (
    Plan,
    load_if_changed,
    order_file,
    save_order,
    signature,
)

Ranges = npt.NDArray[np.int64]  # [k, 3]: (corpus, first token, end token) of a batch's reads
KEPT_PLANS = 3  # plans whose cuts stay: blocks fetched under them may still be cached
# a prefetch this many steps ahead may give up blocks planned for later (the next epoch's): else,
# once the cache holds only those, nothing is fetched ahead and every read waits for its GETs
# (bench_remote_lm.py's windows: 0.27M tokens/s, 10.6 of 15.6 s waiting; 1.57-1.60M at 16,
# 1.21-1.38M at 8). The next epoch's windows start elsewhere, so few of its reads would hit.
NEAR_STEPS = 16
# a batch's build sets its corpora's ``ready`` and ``recording`` (RemoteTokens), which loaders
# sharing a corpus share: one build at a time in a process (a loader's read-ahead thread beside
# another loader's); a forked child (a DataLoader worker) starts with its own, free
_BUILDING = threading.RLock()


def _new_lock() -> None:
    global _BUILDING
    _BUILDING = threading.RLock()


os.register_at_fork(after_in_child=_new_lock)


def remote_reads(workload: LMWorkload) -> RemoteReads | None:
    """``workload`` wrapped to plan its remote corpora's reads, or None when all are local."""
    if not any(c.remote is not None for c, _ in workload.data.parts):
        return None
    return RemoteReads(workload)


def _same(key: Any) -> Any:
    return key


class RemoteReads:
    """An :class:`~lading.lm.workload.LMWorkload` whose remote corpora read through the node
    cache as planned (see the module doc); everything else is the workload's.

    Attributes:
        announce: what the loader calls with each iteration's batch keys.
    """

    def __init__(self, workload: LMWorkload, token: str | None = None) -> None:
        self.inner = workload
        self.remote: dict[int, RemoteTokens] = {}
        for part, (corpus, _) in enumerate(workload.data.parts):
            if corpus.remote is not None:
                self.remote[part] = corpus.remote.tokens
                corpus.remote.cache.near_steps = NEAR_STEPS
        self.token = token or secrets.token_hex(4)  # names this loader's order file
        self.announce: Announce | None = announcer(Hooks.of(self), _same)
        self._ranges: dict[SegmentBatchKey, Ranges] = {}  # of the keys planned last
        self._planned = False  # this process planned (else: a worker, reading its parent's)
        self._order_seen = 0.0
        # each corpus's cuts: token positions where the planned ranges start or end (the
        # last KEPT_PLANS plans'); reads and needs are cut there (see split)
        self._cuts: dict[int, npt.NDArray[np.int64]] = {}
        self._plans_cuts: dict[int, list[npt.NDArray[np.int64]]] = {}
        _warn_small_caches(self.remote, workload)

    def __getattr__(self, name: str) -> Any:  # batches, keys, layout, fingerprint, ...
        if name == "inner":  # not set yet (unpickling)
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __getstate__(self) -> dict[str, Any]:
        return {"inner": self.inner, "token": self.token}

    def __setstate__(self, state: dict[str, Any]) -> None:
        with warnings.catch_warnings():  # the loader warned where it was made: once
            warnings.simplefilter("ignore")
            self.__init__(state["inner"], state["token"])  # type: ignore[misc]

    # ------------------------------------------------------------------ reading

    def bulk(self, cursor: Cursor) -> Iterator[Any] | None:
        """Batch by batch (so that reads follow the plan), but on a device, where the corpus
        was staged whole (``device=``)."""
        return self.inner.bulk(cursor) if self.inner.resident is not None else None

    def build(self, key: SegmentBatchKey) -> Any:
        """Batch ``key``: its ranges read in one call of each corpus's cache, then built."""
        with _BUILDING:
            return self._build(key)

    def _build(self, key: SegmentBatchKey) -> Any:
        step = step_of(key.epoch, key.batch)
        self.at_step(step)
        ranges = self.ranges(key)
        try:
            for part, tokens in self.remote.items():
                mine = ranges[ranges[:, 0] == part]
                pieces, of = split(mine, self._cuts.get(part))
                read = tokens.read(list(zip(pieces[:, 1].tolist(), pieces[:, 2].tolist())), step)
                bounds = np.searchsorted(of, np.arange(len(mine) + 1)).tolist()
                tokens.ready = {
                    (a, b): read[lo] if hi - lo == 1 else np.concatenate(read[lo:hi])
                    for a, b, lo, hi in zip(
                        mine[:, 1].tolist(), mine[:, 2].tolist(), bounds[:-1], bounds[1:]
                    )
                }
            return self.inner.build(key)
        finally:
            for tokens in self.remote.values():
                tokens.ready = {}

    def ranges(self, key: SegmentBatchKey) -> Ranges:
        """``(corpus, a, b)`` of each ``tokens[a:b]`` batch ``key`` reads (found by building
        it with the remote corpora recording, not reading)."""
        found = self._ranges.get(key)
        if found is not None:
            return found
        with _BUILDING:
            return self._record(key)

    def _record(self, key: SegmentBatchKey) -> Ranges:
        log: list[tuple[int, int, int]] = []
        for part, tokens in self.remote.items():  # a corpus may be in several loaders' parts
            tokens.recording, tokens.part = log, part
        try:
            self.inner.build(key)
        finally:
            for tokens in self.remote.values():
                tokens.recording = None
        return np.array(log, dtype=np.int64).reshape(-1, 3)

    # ------------------------------------------------------------------ what comes next

    def _needs(self, ranges: Sequence[Ranges], steps: Sequence[int]) -> dict[int, list[Need]]:
        """Each corpus's needs of batches of ranges (batch ``j`` read at ``steps[j]``), cut
        into the pieces of the planned partition (see :func:`split`)."""
        needs: dict[int, list[Need]] = {part: [] for part in self.remote}
        for found, step in zip(ranges, steps):
            for part, tokens in self.remote.items():
                pieces, _ = split(found[found[:, 0] == part], self._cuts.get(part))
                size, key = tokens.itemsize, tokens.key
                needs[part] += [
                    Need(key, a * size, b * size, step)
                    for a, b in zip(pieces[:, 1].tolist(), pieces[:, 2].tolist())
                ]
        return needs

    def prefetch(self, keys: list[SegmentBatchKey], first_step: int, now: int) -> None:
        """Fetch the ranges of ``keys`` (batch ``j`` read at step ``first_step + j``)."""
        ranges = [self.ranges(k) for k in keys]
        steps = range(first_step, first_step + len(keys))
        for part, needs in self._needs(ranges, steps).items():
            self.remote[part].cache.prefetch(needs, now)

    def plan(self, keys: list[SegmentBatchKey], first_step: int, steps: Sequence[int]) -> None:
        """The order of ``keys`` (read at ``steps``) as each cache's eviction plan; written
        for this process's DataLoader workers too."""
        ranges = [self.ranges(k) for k in keys]
        self._ranges = dict(zip(keys, ranges))
        self._planned = True
        self._take(ranges, list(steps))
        save_order(self._order_file(os.getpid()), ranges, list(steps))

    def _take(self, ranges: Sequence[Ranges], steps: list[int]) -> None:
        """Plan ``ranges`` (read at ``steps``): the partition of each corpus's tokens gets
        the ends of this epoch's ranges as cuts (the next epoch's are only planned, for
        eviction: they are cut when its own plan comes, which keeps this one's cuts, those
        of the blocks still cached), then each cache takes their order."""
        epoch = steps[0] // STEPS_PER_EPOCH if steps else 0
        now = [r for r, step in zip(ranges, steps) if step // STEPS_PER_EPOCH == epoch]
        every = np.concatenate(now) if now else np.empty((0, 3), dtype=np.int64)
        for part in self.remote:
            mine = every[every[:, 0] == part]
            ends = np.unique(mine[:, 1:])
            kept = self._plans_cuts.setdefault(part, [])
            kept[:] = [*kept[-(KEPT_PLANS - 1) :], ends]
            self._cuts[part] = np.unique(np.concatenate(kept))
        signatures = [signature(np.array([s], dtype=np.int64)) for s in steps]
        for part, needs in self._needs(ranges, steps).items():
            self.remote[part].cache.plan(Plan(needs, signatures, steps))

    def at_step(self, step: int) -> None:
        """The reads that follow are ``step``'s. In a process that did not plan (a DataLoader
        worker), the order its parent planned is taken first, whenever it changed."""
        if self._planned:
            return
        self._order_seen, loaded = load_if_changed(self._order_file(os.getppid()), self._order_seen)
        if loaded is not None:
            ranges = [r.reshape(-1, 3) for r in loaded[0]]
            if all(int(r[:, 0].min(initial=0)) >= 0 for r in ranges):
                self._take(ranges, loaded[1])

    def _order_file(self, pid: int) -> Path:
        """Where process ``pid`` leaves this loader's order for its DataLoader workers."""
        names = "|".join(f"{t.cache.namespace}/{t.key}" for t in self.remote.values())
        return order_file(f"{names}#{self.token}", "lm", pid)


def split(
    ranges: Ranges, cuts: npt.NDArray[np.int64] | None
) -> tuple[Ranges, npt.NDArray[np.int64]]:
    """``ranges`` (``[k, 3]``) cut at every cut strictly inside one, and the range each piece
    is of (ascending).

    Why: windows overlap (consecutive ones share a token; another epoch's windows start
    elsewhere), and the node cache keeps disjoint blocks, reading a range that straddles a
    block's end around the cache (fetched again at each read). Cut at every planned range's
    ends, the needs of a plan are each other's equals or disjoint, and so is every block
    made of them: each read piece lies inside one block or outside all.
    """
    k = len(ranges)
    if cuts is None or not len(cuts) or not k:
        return ranges, np.arange(k, dtype=np.int64)
    a, b = ranges[:, 1], ranges[:, 2]
    lo = np.searchsorted(cuts, a, side="right")  # the first cut > a
    inner = np.maximum(np.searchsorted(cuts, b, side="left") - lo, 0)  # cuts in (a, b)
    if not inner.any():
        return ranges, np.arange(k, dtype=np.int64)
    of = np.repeat(np.arange(k, dtype=np.int64), inner + 1)
    first = np.concatenate(([0], np.cumsum(inner + 1)[:-1]))
    j = np.arange(len(of), dtype=np.int64) - first[of]  # the piece's place in its range
    at = lo[of] + j  # cuts[at - 1] starts piece j > 0, cuts[at] ends one before the last
    last = j == inner[of]
    starts = np.where(j == 0, a[of], cuts[np.minimum(at - 1, len(cuts) - 1)])
    ends = np.where(last, b[of], cuts[np.minimum(at, len(cuts) - 1)])
    return np.stack([ranges[of, 0], starts, ends], axis=1), of


def _warn_small_caches(remote: dict[int, RemoteTokens], workload: LMWorkload) -> None:
    """Warn, in one line naming the fix, of a node cache that cannot hold one batch row (a
    window): its reads go around the cache (right, but every byte fetched at each read)."""
    for tokens in remote.values():
        row = (workload.max_seq + 1) * tokens.itemsize
        cap = tokens.cache.ledger.cap
        if cap < row:
            warnings.warn(
                f"cache_bytes={cap} cannot hold one window of {workload.max_seq + 1} tokens "
                f"({row} bytes) of {tokens.cache.namespace}: its tokens are read around the "
                f"node cache, fetched at every read; give cache_bytes of at least "
                f"{8 * workload.reading.batch_size * row} (8 batches) to fetch ahead",
                UserWarning,
                stacklevel=5,  # the caller of LanguageModelLoader(...)
            )
