"""The epoch's whole order of reads, as eviction reads it: when each byte range is next needed.

A loader knows every batch of its epoch before reading one (``(seed, epoch)`` fix it). Fetching
looks only a window ahead (a GET started too early holds cache room too long), but eviction
should see the whole order: a block whose next use is 3,000 batches away is the one to give
up, whatever the window says (Belady's rule). :class:`Schedule` holds that order as integer
arrays per object, sorted by range start, and again by step: 60 bytes a read (an epoch of 1M
documents is 60 MB, measured with ``tracemalloc``), built with one ``lexsort``; a plan of many
reads (a remote store's) is made from arrays (:meth:`Schedule.of_arrays`: 140 bytes a read at
the peak of making it, against 312 and ~9x the CPU through a :class:`Need` a read;
benchmarks/bench_plan_memory.py); it answers "the first planned read overlapping
``[start, end)`` at or after step ``s``" with two binary searches a block, for many blocks at
once.

It is the planning process's own (a loader's): it never goes through a file or a shared
object; the node's ledger learns the next use of each cached block from it.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from lading.remote.ranges import Need
from lading.step import STEPS_PER_EPOCH

Span = tuple[str, int, int]  # object key, start, end
_NONE = np.iinfo(np.int64).max


class Schedule:
    """Every planned read ``needs`` (a range and the step it is read at), from ``first_step``
    (the step the plan was made at) to ``last_step`` (after its last read)."""

    def __init__(self, needs: Sequence[Need], first_step: int | None = None) -> None:
        keys = sorted({n.key for n in needs})
        code = {k: i for i, k in enumerate(keys)}
        n = len(needs)
        obj = np.fromiter((code[x.key] for x in needs), np.int64, n)
        starts = np.fromiter((x.start for x in needs), np.int64, n)
        ends = np.fromiter((x.end for x in needs), np.int64, n)
        steps = np.fromiter((x.step for x in needs), np.int64, n)
        self._build(keys, (obj, starts, ends, steps), first_step)

    @classmethod
    def of_arrays(
        cls,
        keys: Sequence[str],
        obj: npt.NDArray[np.int64],
        starts: npt.NDArray[np.int64],
        ends: npt.NDArray[np.int64],
        steps: npt.NDArray[np.int64],
        first_step: int | None = None,
    ) -> Schedule:
        """The schedule of reads given as arrays (read ``i``: ``keys[obj[i]]``, bytes
        ``[starts[i], ends[i])``, at ``steps[i]``), with no Python object a read: the same as
        ``Schedule`` of the same reads as :class:`Need` s, built in a fraction of the time and
        memory (a plan of a ranker's epoch is millions of reads)."""
        obj = np.asarray(obj, np.int64)
        names = sorted({keys[i] for i in np.unique(obj).tolist()})  # the objects read
        code = {k: i for i, k in enumerate(names)}
        recode = np.array([code.get(k, -1) for k in keys], dtype=np.int64)
        self = cls.__new__(cls)
        self._build(names, (recode[obj], starts, ends, steps), first_step)
        return self

    def _build(self, keys: list[str], reads: tuple[Any, ...], first_step: int | None) -> None:
        """Index the reads, given as arrays ``(obj, starts, ends, steps)`` as
        :meth:`of_arrays` takes them (``obj``: codes into ``keys``, which are sorted)."""
        obj, starts, ends, steps = (np.asarray(x, np.int64) for x in reads)
        n = len(obj)
        order = np.lexsort((steps, starts, obj))
        obj, starts, ends, steps = obj[order], starts[order], ends[order], steps[order]
        bounds = np.searchsorted(obj, np.arange(len(keys) + 1))
        self._by_key: dict[str, tuple[Any, ...]] = {}
        for i, key in enumerate(keys):
            lo, hi = int(bounds[i]), int(bounds[i + 1])
            longest = int((ends[lo:hi] - starts[lo:hi]).max()) if hi > lo else 0
            self._by_key[key] = (starts[lo:hi], ends[lo:hi], steps[lo:hi], np.int64(longest))
        last = _run_last(obj, starts, ends, steps)
        by_step = np.argsort(steps, kind="stable")
        code_of = obj[by_step].astype(np.int32)  # (objects are few: 4 bytes a read saved)
        self._step_order = (code_of, starts[by_step], ends[by_step], steps[by_step])
        self._run_last = last[by_step]
        self._keys = keys
        self._read_steps: list[int] | None = None  # the steps with a read (on first use)
        self.first_step = int(steps.min()) if first_step is None and n else int(first_step or 0)
        self.last_step = int(steps.max()) + 1 if n else self.first_step

    def objects(self) -> list[str]:
        """The objects the schedule reads."""
        return list(self._keys)

    def covers(self, step: int | None) -> bool:
        """Whether ``step`` is within the schedule."""
        return step is not None and self.first_step <= step < self.last_step

    def reads_between(self, first: int, stop: int) -> bool:
        """Whether a read is planned at a step in ``first .. stop - 1`` (a bisect: a planner
        asks at every batch, most of which read nothing new)."""
        if self._read_steps is None:
            self._read_steps = np.unique(self._step_order[3]).tolist()
        at = bisect.bisect_left(self._read_steps, first)
        return at < len(self._read_steps) and self._read_steps[at] < stop

    def spans(self, first: int, stop: int, used_from: int | None = None) -> list[Span]:
        """The ranges read at steps ``first .. stop - 1``, each once; ``used_from``: only those
        whose run of touching or overlapping reads within their epoch has a read at that step
        or after. Where blocks are coalesced from touching reads only (along a plan), no
        block of the others is read again within the epoch."""
        obj, starts, ends, steps = self._step_order
        lo, hi = np.searchsorted(steps, [first, stop]).tolist()
        keys = self._keys
        rows = np.arange(lo, hi)
        if used_from is not None:
            rows = rows[self._run_last[lo:hi] >= used_from]
        found = zip(obj[rows].tolist(), starts[rows].tolist(), ends[rows].tolist())
        return sorted({(keys[k], a, b) for k, a, b in found})

    def needs(self, first: int, stop: int) -> list[Need]:
        """The planned reads at steps ``first .. stop - 1``, in step order."""
        obj, starts, ends, steps = self._step_order
        lo, hi = np.searchsorted(steps, [first, stop]).tolist()
        keys = self._keys
        rows = zip(
            obj[lo:hi].tolist(), starts[lo:hi].tolist(), ends[lo:hi].tolist(), steps[lo:hi].tolist()
        )
        return [Need(keys[k], a, b, s) for k, a, b, s in rows]

    def next_use_many(self, spans: Sequence[Span], at_least: int) -> list[int | None]:
        """For each ``(key, start, end)`` (a block), the first planned step ``>= at_least``
        whose read overlaps it, or None; with numpy, a key at a time."""
        out: list[int | None] = [None] * len(spans)
        by_key: dict[str, list[int]] = {}
        for i, span in enumerate(spans):
            by_key.setdefault(span[0], []).append(i)
        for key, where in by_key.items():
            found = self._by_key.get(key)
            if found is None:
                continue
            at = np.array([spans[i][1:] for i in where], dtype=np.int64).reshape(-1, 2)
            steps = _first_overlapping(found, at[:, 0], at[:, 1], at_least)
            for i, step in zip(where, steps.tolist()):
                out[i] = None if step < 0 else step
        return out


def _run_last(
    obj: npt.NDArray[np.int64],
    starts: npt.NDArray[np.int64],
    ends: npt.NDArray[np.int64],
    steps: npt.NDArray[np.int64],
) -> npt.NDArray[np.int64]:
    """For reads sorted by object, start and step: the last step of each one's run within
    its epoch (the reads of one object and epoch joined by touching or overlapping: a read
    starting after every earlier one of them ends opens a run)."""
    last = np.zeros(len(obj), dtype=np.int64)
    bounds = np.flatnonzero(np.diff(obj)) + 1
    for lo, hi in zip([0, *bounds.tolist()], [*bounds.tolist(), len(obj)]):  # objects: few
        if hi == lo:
            continue
        epoch = steps[lo:hi] // STEPS_PER_EPOCH
        if (epoch == epoch[0]).all():
            last[lo:hi] = _runs(starts[lo:hi], ends[lo:hi], steps[lo:hi])
            continue
        order = np.argsort(epoch, kind="stable")  # by epoch, each still by start
        cuts = np.flatnonzero(np.diff(epoch[order])) + 1
        for a, b in zip([0, *cuts.tolist()], [*cuts.tolist(), hi - lo]):  # epochs: few
            at = order[a:b] + lo
            last[at] = _runs(starts[at], ends[at], steps[at])
    return last


def _runs(
    starts: npt.NDArray[np.int64], ends: npt.NDArray[np.int64], steps: npt.NDArray[np.int64]
) -> npt.NDArray[np.int64]:
    """For one object's reads of one epoch sorted by start: the last step of each one's run."""
    before = np.maximum.accumulate(ends)  # the furthest end of the reads up to each
    opens = np.flatnonzero(np.concatenate(([True], starts[1:] > before[:-1])))
    last = np.maximum.reduceat(steps, opens)
    return np.repeat(last, np.diff(np.append(opens, len(starts))))


def _first_overlapping(
    found: tuple[Any, ...],
    starts: npt.NDArray[np.int64],
    ends: npt.NDArray[np.int64],
    at_least: int,
) -> npt.NDArray[np.int64]:
    """For each block ``[starts[i], ends[i])``, the least planned step ``>= at_least`` among one
    object's reads ``found`` (starts, ends, steps, the longest read; sorted by start) that
    overlap it, or -1: the candidates (reads starting less than the longest read before the
    block, up to its end) gathered into one array, a ``minimum.reduceat`` over them."""
    begin, finish, steps, longest = found
    lo = np.searchsorted(begin, starts - longest, side="right")
    hi = np.searchsorted(begin, ends, side="left")
    counts = np.maximum(hi - lo, 0)
    out = np.full(len(starts), -1, dtype=np.int64)
    some = counts > 0
    if not some.any():
        return out
    lo, counts, block_start = lo[some], counts[some], starts[some]
    first = np.cumsum(counts) - counts
    at = np.repeat(lo - first, counts) + np.arange(int(counts.sum()))
    owner = np.repeat(np.arange(len(lo)), counts)
    good = (steps[at] >= at_least) & (finish[at] > block_start[owner])
    least = np.minimum.reduceat(np.where(good, steps[at], _NONE), first)
    out[some] = np.where(least == _NONE, -1, least)
    return out


def epoch_firsts(
    steps: npt.NDArray[np.int64], sizes: npt.NDArray[np.int64], epoch: int, budget: int
) -> npt.NDArray[np.intp]:
    """The reads (``steps[i]``, ``sizes[i]`` bytes or tokens) that ``epoch`` makes first, in
    step order, up to ``budget`` in all: what a cap under an epoch can keep for it through the
    epoch before (documents, :mod:`lading.stores.remote.kept`; LM ranges,
    :mod:`lading.lm.remote_kept`)."""
    mine = np.flatnonzero(steps // STEPS_PER_EPOCH == epoch)
    mine = mine[np.argsort(steps[mine], kind="stable")]
    return mine[: int(np.searchsorted(np.cumsum(sizes[mine]), budget, side="right"))]
