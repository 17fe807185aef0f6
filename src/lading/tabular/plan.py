"""Rows of parquet files as pieces and fragments, from metadata alone.

A *piece* is a row group (file, index, rows). Each epoch the pieces are shuffled from
``(seed, epoch)`` — the same order on every rank — into one sequence of ``N`` rows, whose
positions the loader core shares out (:mod:`lading.loading.plan`); :func:`share_of_runs`
turns a reader's positions back into fragments of row groups, split by row range, so any
number of row groups serves any number of readers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from lading.loading.order import Salt, permutation
from lading.loading.runs import Runs


class Piece(NamedTuple):
    """One row group of one file."""

    path: str
    row_group: int
    rows: int


class Fragment(NamedTuple):
    """Rows ``[start, stop)`` of a row group."""

    piece: Piece
    start: int
    stop: int


@dataclass(frozen=True)
class Share:
    """The rows one reader reads this epoch, as fragments of row groups, in order."""

    fragments: tuple[Fragment, ...]
    rows: int


def epoch_pieces(pieces: Sequence[Piece], seed: int, epoch: int, shuffle: bool) -> list[Piece]:
    """The epoch's piece order: a permutation from (seed, epoch), identical on every rank."""
    order = permutation(len(pieces), seed, Salt.PIECE_ORDER, epoch, shuffle=shuffle)
    return [pieces[i] for i in order]


def share_of_runs(ordered: Sequence[Piece], runs: Runs) -> Share:
    """The rows at ``runs`` (positions of the epoch's row sequence), as fragments, in order."""
    ends = np.cumsum([p.rows for p in ordered])
    fragments = []
    for lo, hi in zip(runs.starts.tolist(), runs.stops.tolist()):
        k = int(np.searchsorted(ends, lo, side="right"))
        while lo < hi:
            begin = int(ends[k]) - ordered[k].rows
            stop = min(hi, int(ends[k]))
            fragments.append(Fragment(ordered[k], lo - begin, stop - begin))
            lo, k = stop, k + 1
    return Share(tuple(fragments), len(runs))
