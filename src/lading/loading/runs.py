"""Sequences of positions stored as runs: the currency of every plan, share and remainder.

Pure index math, deterministic and side-effect free, so any process can compute any other
process's share (the planner that cuts shares is :mod:`lading.loading.plan`).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt


class Runs:
    """A sequence of positions of some base sequence, stored as runs ``[start, stop)``.

    What is left of an epoch after a resume on another number of processes is rarely one
    range: every stream or reader of the old run stopped at its own point. ``Runs`` keeps the
    left-over positions in their base order with two int64 per run, and cuts that sequence into
    new equal shares without ever listing the positions one by one.
    """

    def __init__(self, starts: npt.ArrayLike, stops: npt.ArrayLike) -> None:
        starts = np.asarray(starts, dtype=np.int64)
        stops = np.asarray(stops, dtype=np.int64)
        keep = stops > starts
        self.starts, self.stops = starts[keep], stops[keep]
        self.ends = np.cumsum(self.stops - self.starts)  # sequence position past each run

    @classmethod
    def whole(cls, n: int) -> Runs:
        """Positions ``0 … n-1``."""
        return cls([0], [n])

    @classmethod
    def of_positions(cls, positions: npt.ArrayLike) -> Runs:
        """The given positions, in the given order, adjacent ones merged into runs."""
        pos = np.asarray(positions, dtype=np.int64)
        if len(pos) == 0:
            return cls([], [])
        breaks = np.flatnonzero(np.diff(pos) != 1) + 1
        firsts = np.concatenate([[0], breaks])
        lasts = np.concatenate([breaks, [len(pos)]])
        return cls(pos[firsts], pos[lasts - 1] + 1)

    @classmethod
    def concat(cls, parts: list[Runs]) -> Runs:
        """The sequences of ``parts`` one after the other."""
        if not parts:
            return cls([], [])
        return cls(
            np.concatenate([p.starts for p in parts]), np.concatenate([p.stops for p in parts])
        )

    def __len__(self) -> int:
        return int(self.ends[-1]) if len(self.ends) else 0

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Runs)
            and np.array_equal(self.starts, other.starts)
            and np.array_equal(self.stops, other.stops)
        )

    def slice(self, lo: int, hi: int) -> Runs:
        """Sequence positions ``[lo, hi)`` (clipped to the sequence) as runs of the base."""
        lo, hi = max(0, lo), min(len(self), hi)
        if hi <= lo:
            return Runs([], [])
        first = int(np.searchsorted(self.ends, lo, side="right"))
        last = int(np.searchsorted(self.ends, hi, side="left"))
        starts = self.starts[first : last + 1].copy()
        stops = self.stops[first : last + 1].copy()
        begins = self.ends[first : last + 1] - (self.stops - self.starts)[first : last + 1]
        starts[0] += lo - int(begins[0])
        stops[-1] -= int(self.ends[last]) - hi
        return Runs(starts, stops)

    def within(self, inner: Runs) -> Runs:
        """``inner``, whose positions index this sequence, as positions of the base."""
        return Runs.concat([self.slice(int(a), int(b)) for a, b in zip(inner.starts, inner.stops)])

    def wrap(self, n: int) -> Runs:
        """Positions taken modulo ``n``: a run past ``n`` continues from 0 (padding wraps)."""
        if n <= 0:
            return Runs([], [])
        inside = self.stops <= n
        if inside.all():  # nothing to wrap: the common case, kept vectorised
            return self
        starts, stops = [], []
        for a, b in zip(self.starts.tolist(), self.stops.tolist()):
            while a < b:
                lap, at = divmod(a, n)
                end = min(b, (lap + 1) * n)
                starts.append(at)
                stops.append(at + end - a)
                a = end
        return Runs(starts, stops)

    def clip(self, n: int) -> Runs:
        """Only the positions below ``n``, in order."""
        return Runs(np.minimum(self.starts, n), np.minimum(self.stops, n))

    def sorted(self) -> Runs:
        """The same positions in increasing order (runs must not overlap)."""
        order = np.argsort(self.starts, kind="stable")
        return Runs(self.starts[order], self.stops[order])

    def minus(self, other: Runs) -> Runs:
        """The positions of this sequence that are not in ``other``, in this sequence's order.

        This sequence's runs must be increasing and disjoint (a share, a whole range); ``other``
        may be in any order.
        """
        if len(self.starts) > 1 and np.any(self.starts[1:] < self.stops[:-1]):
            raise ValueError("Runs.minus needs increasing, disjoint runs")
        cut = other.sorted()
        starts, stops, k = [], [], 0
        cut_starts, cut_stops = cut.starts.tolist(), cut.stops.tolist()
        for a, b in zip(self.starts.tolist(), self.stops.tolist()):
            while k < len(cut_starts) and cut_stops[k] <= a:
                k += 1
            j = k
            while a < b:
                if j == len(cut_starts) or cut_starts[j] >= b:
                    starts.append(a)
                    stops.append(b)
                    break
                if cut_starts[j] > a:
                    starts.append(a)
                    stops.append(cut_starts[j])
                a = max(a, cut_stops[j])
                j += 1
        return Runs(starts, stops)

    def to_dict(self) -> dict[str, list[int]]:
        """JSON-able form (two lists of integers) for loader states."""
        return {"starts": self.starts.tolist(), "stops": self.stops.tolist()}

    @classmethod
    def from_dict(cls, state: dict[str, list[int]]) -> Runs:
        """Inverse of :meth:`to_dict`."""
        return cls(state["starts"], state["stops"])

    def positions(self) -> npt.NDArray[np.int64]:
        """Every position, in order (for samplers over map-style datasets and for tests)."""
        lengths = self.stops - self.starts
        if not len(lengths):
            return np.zeros(0, dtype=np.int64)
        firsts = self.ends - lengths  # sequence position of each run's first item
        return np.arange(int(self.ends[-1]), dtype=np.int64) + np.repeat(
            self.starts - firsts, lengths
        )
