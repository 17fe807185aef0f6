"""The epoch's whole order, as the node cache's eviction reads it: when each range is next used.

A loader knows every batch of its epoch before reading one (``(seed, epoch)`` fix it). Fetching
only looks a window ahead (a GET started too early holds cache room too long), but eviction
should see the whole order: a block whose next use is 3,000 batches away is the one to give
up, whatever the window says (Belady's rule). :class:`Plan` holds that order as two integer
arrays per object, sorted by (range start, step): 16 bytes an access (an epoch of 1M documents
is 16 MB), built with one ``lexsort``; it answers "the first planned use of the ranges inside
``[start, end)`` at or after step ``s``" by two binary searches.

Reads move along it: a read that names its step, or whose rows equal a planned batch's (the
planned batches matched in order: a plain loop of ``get_many`` over them), is at that batch's
step; :meth:`Plan.match` finds it.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from lading.remote.ranges import Need

AHEAD = 8  # batches fetched ahead along a plan when nobody announces more (the loader's too)


class Plan:
    """The planned accesses of batches of needs (batch ``j`` read at ``steps[j]``, ascending:
    an epoch and the next one are two runs of steps, ``epoch << 32`` apart).

    Args:
        needs: every planned range, each with the step it is read at.
        signatures: a digest of each batch's rows (see :func:`signature`), in batch order.
        steps: each batch's step (ascending), or the first one's (the others follow it).
    """

    def __init__(
        self, needs: Sequence[Need], signatures: Sequence[bytes], steps: int | Sequence[int]
    ):
        if isinstance(steps, int):
            steps = range(steps, steps + len(signatures))
        self.batch_steps = np.asarray(steps, dtype=np.int64)
        self.first_step = int(self.batch_steps[0]) if len(steps) else 0
        self.steps = len(signatures)
        self._by_key: dict[str, tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]] = {}
        names = sorted({n.key for n in needs})
        code = {name: i for i, name in enumerate(names)}
        keys = np.fromiter((code[n.key] for n in needs), np.int64, len(needs))
        starts = np.fromiter((n.start for n in needs), np.int64, len(needs))
        at = np.fromiter((n.step for n in needs), np.int64, len(needs))
        order = np.lexsort((at, starts, keys))
        keys, starts, at = keys[order], starts[order], at[order]
        bounds = np.searchsorted(keys, np.arange(len(names) + 1)).tolist()
        for i, name in enumerate(names):
            lo, hi = bounds[i], bounds[i + 1]
            self._by_key[name] = (starts[lo:hi], at[lo:hi])
        # in step order too (needs come batch by batch): what steps first .. stop - 1 read
        self._names = names
        by_step = np.argsort(at, kind="stable")
        self._step_keys, self._step_starts = keys[by_step], starts[by_step]
        self._step_ends = np.fromiter((n.end for n in needs), np.int64, len(needs))[order][by_step]
        self._step_steps = at[by_step]
        self._batches: dict[bytes, list[int]] = {}
        for j, sig in enumerate(signatures):
            self._batches.setdefault(sig, []).append(j)
        self._cursor = 0  # batches before this one were read (or passed)

    def objects(self) -> list[str]:
        """The objects the plan reads."""
        return list(self._by_key)

    def ranges(self, first: int, stop: int) -> list[tuple[str, int, int]]:
        """The ranges read at steps ``first .. stop - 1`` (each once)."""
        lo, hi = np.searchsorted(self._step_steps, [first, stop]).tolist()
        names = self._names
        return sorted(
            {
                (names[k], a, b)
                for k, a, b in zip(
                    self._step_keys[lo:hi].tolist(),
                    self._step_starts[lo:hi].tolist(),
                    self._step_ends[lo:hi].tolist(),
                )
            }
        )

    def covers(self, step: int | None) -> bool:
        """Whether ``step`` is one of the plan's."""
        return step is not None and self.first_step <= step < self.last_step

    def index(self, step: int) -> int:
        """The number of planned batches before ``step``."""
        return int(np.searchsorted(self.batch_steps, step))

    @property
    def last_step(self) -> int:
        """The step after the plan's last batch."""
        return int(self.batch_steps[-1]) + 1 if self.steps else self.first_step

    def next_use(self, key: str, start: int, end: int, at_least: int) -> int | None:
        """The first planned step ``>= at_least`` that reads a range starting in
        ``[start, end)`` of ``key`` (ranges never straddle a block), or None."""
        found = self._by_key.get(key)
        if found is None:
            return None
        starts, steps = found
        lo, hi = np.searchsorted(starts, [start, end]).tolist()
        if lo == hi:
            return None
        if starts[lo] == starts[hi - 1]:  # one range (the usual block): its steps are sorted
            at = lo + int(np.searchsorted(steps[lo:hi], at_least))
            return int(steps[at]) if at < hi else None
        later = steps[lo:hi][steps[lo:hi] >= at_least]
        return int(later.min()) if len(later) else None

    def next_use_many(
        self, spans: Sequence[tuple[str, int, int]], at_least: int
    ) -> list[int | None]:
        """:meth:`next_use` of each ``(key, start, end)``, with numpy a key at a time (was one
        call a range: ~12 us each, ~28 a batch of 8 LM windows and their blocks)."""
        out: list[int | None] = [None] * len(spans)
        by_key: dict[str, list[int]] = {}
        for i, span in enumerate(spans):
            by_key.setdefault(span[0], []).append(i)
        for key, where in by_key.items():
            found = self._by_key.get(key)
            if found is None:
                continue
            at = np.array([spans[i][1:] for i in where], dtype=np.int64).reshape(-1, 2)
            steps = _first_from(found, at[:, 0], at[:, 1], at_least)
            for i, step in zip(where, steps.tolist()):
                out[i] = None if step < 0 else step
        return out

    def match(self, sig: bytes) -> int | None:
        """The step of the first unread planned batch whose rows have digest ``sig`` (it and
        every batch before it count as read from then on), or None: an unplanned read."""
        found = self._batches.get(sig)
        if not found:
            return None
        at = next((j for j in found if j >= self._cursor), None)
        if at is None:
            return None
        self._cursor = at + 1
        return int(self.batch_steps[at])

    def passed(self, step: int) -> None:
        """Batches before ``step`` were read (a read that named its step)."""
        self._cursor = max(self._cursor, self.index(step))


_NONE = np.iinfo(np.int64).max


def _first_from(
    found: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]],
    starts: npt.NDArray[np.int64],
    ends: npt.NDArray[np.int64],
    at_least: int,
) -> npt.NDArray[np.int64]:
    """For each range ``[starts[i], ends[i])``, the least planned step ``>= at_least`` among
    one object's accesses ``found`` (starts, steps; sorted by start) starting inside it, or
    -1: each range's accesses gathered into one array, a ``minimum.reduceat`` over them."""
    begin, steps = found
    lo, hi = np.searchsorted(begin, starts), np.searchsorted(begin, ends)
    counts = hi - lo
    out = np.full(len(starts), -1, dtype=np.int64)
    some = counts > 0
    if not some.any():
        return out
    lo, counts = lo[some], counts[some]
    first = np.cumsum(counts) - counts  # where each range's accesses start, gathered
    gathered = steps[np.repeat(lo - first, counts) + np.arange(int(counts.sum()))]
    least = np.minimum.reduceat(np.where(gathered >= at_least, gathered, _NONE), first)
    out[some] = np.where(least == _NONE, -1, least)
    return out


def signature(rows: npt.NDArray[np.int64]) -> bytes:
    """A digest of a batch's rows, in order (what a read is matched to its planned batch by)."""
    data = np.ascontiguousarray(rows, dtype=np.int64).tobytes()
    return hashlib.blake2b(data, digest_size=16).digest()


def order_file(url: str, snapshot: str, pid: int) -> Path:
    """Where process ``pid`` leaves its order of store ``url@snapshot`` for its DataLoader
    workers (outside the node cache: the cap is the cache's; 8 bytes a document)."""
    name = hashlib.blake2b(f"{url}@{snapshot}".encode(), digest_size=8).hexdigest()
    return Path(tempfile.gettempdir()) / "lading-orders" / f"{pid}-{name}.npz"


def save_order(path: Path, batches: Sequence[npt.NDArray[np.int64]], steps: Sequence[int]) -> None:
    """Write ``batches`` (rows) and their steps to ``path`` atomically (no pickle)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sizes = np.fromiter((len(b) for b in batches), np.int64, len(batches))
    rows = np.concatenate(batches) if batches else np.empty(0, dtype=np.int64)
    part = path.with_suffix(f".{os.getpid()}.part")
    with open(part, "wb") as f:
        np.savez(f, rows=rows.astype(np.int64), sizes=sizes, steps=np.asarray(steps, np.int64))
    os.replace(part, path)


def load_order(path: Path) -> tuple[list[npt.NDArray[np.int64]], list[int]] | None:
    """``(batches, steps)`` from :func:`save_order`'s file, or None when it is unreadable
    (a speed hint: a damaged one is ignored, never trusted further)."""
    try:
        with np.load(path, allow_pickle=False) as found:
            rows, sizes, steps = found["rows"], found["sizes"], found["steps"]
    except (OSError, ValueError, KeyError):
        return None
    if sizes.sum() != len(rows) or (sizes < 0).any() or len(steps) != len(sizes):
        return None
    batches = np.split(rows, np.cumsum(sizes)[:-1]) if len(sizes) else []
    return batches, steps.tolist()


def load_if_changed(
    path: Path, seen: float
) -> tuple[float, tuple[list[npt.NDArray[np.int64]], list[int]] | None]:
    """``(mtime, order)`` of the order file at ``path`` when its mtime is not ``seen`` (a
    parent saved a new one since: what a DataLoader worker checks before its reads), else
    ``(seen, None)``; ``order`` is None too when the file is absent or unreadable."""
    try:
        mtime = path.stat().st_mtime
    except OSError:
        return seen, None
    if mtime == seen:
        return seen, None
    return mtime, load_order(path)
