"""Which share of N items is mine: pure index math for ranks and DataLoader workers.

Every function here is deterministic and side-effect free, so any process can compute any other
process's share. DDP needs every rank to take the same number of steps; ``equal_share`` gets
there either by padding (repeating items from the start of the order, as torch's
DistributedSampler does) or by dropping the tail.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import numpy.typing as npt

Equalize = Literal["pad", "drop"]
EQUALIZE_MODES: tuple[str, ...] = ("pad", "drop")


def contiguous_range(n: int, parts: int, index: int) -> tuple[int, int]:
    """Bounds ``[start, stop)`` of part ``index`` when ``n`` items are cut into ``parts`` runs.

    Sizes differ by at most one; the first ``n % parts`` parts get the extra item.
    """
    _check_part(parts, index)
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    base, extra = divmod(n, parts)
    start = index * base + min(index, extra)
    return start, start + base + (1 if index < extra else 0)


def per_rank_count(n: int, world_size: int, equalize: Equalize) -> int:
    """Items every rank gets from ``n`` when shares are made equal by ``equalize``."""
    _check_equalize(equalize)
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    if equalize == "pad":
        return -(-n // world_size)
    return n // world_size


def equal_share(
    order: npt.NDArray[np.int64], world_size: int, rank: int, equalize: Equalize = "pad"
) -> npt.NDArray[np.int64]:
    """The items of ``order`` that ``rank`` reads, the same count on every rank.

    Items are dealt round-robin (``order[rank::world_size]``) so every rank sees a sample of the
    whole order rather than one slice of it. With ``"pad"`` the order is first extended by
    wrapping around to a multiple of ``world_size`` (each item seen at least once, at most
    ``world_size - 1`` seen twice); with ``"drop"`` the last ``len(order) % world_size`` items
    are left out (each item seen at most once).
    """
    _check_part(world_size, rank)
    count = per_rank_count(len(order), world_size, equalize)
    total = count * world_size
    if total > len(order):  # only with "pad", and then len(order) > 0
        reps = -(-total // len(order))
        order = np.tile(order, reps)[:total]
    else:
        order = order[:total]
    return order[rank::world_size]


def worker_share(
    share: npt.NDArray[np.int64], num_workers: int, worker_id: int
) -> npt.NDArray[np.int64]:
    """The part of a rank's ``share`` that DataLoader worker ``worker_id`` reads (round-robin)."""
    _check_part(num_workers, worker_id)
    return share[worker_id::num_workers]


def _check_part(parts: int, index: int) -> None:
    if parts < 1:
        raise ValueError(f"number of parts must be >= 1, got {parts}")
    if not 0 <= index < parts:
        raise ValueError(f"part index {index} outside [0, {parts})")


def _check_equalize(equalize: str) -> None:
    if equalize not in EQUALIZE_MODES:
        raise ValueError(
            f"unknown equalize mode {equalize!r}; choose from {sorted(EQUALIZE_MODES)}"
        )


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

    def positions(self) -> npt.NDArray[np.int64]:
        """Every position, in order (for tests and small sequences)."""
        if not len(self.starts):
            return np.zeros(0, dtype=np.int64)
        return np.concatenate([np.arange(a, b) for a, b in zip(self.starts, self.stops)])
