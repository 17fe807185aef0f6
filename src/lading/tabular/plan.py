"""Which rows each (rank, worker) reads: planned from parquet metadata alone.

A *piece* is a row group (file, index, rows). Each epoch the pieces are shuffled from
``(seed, epoch)`` — the same order on every rank — into one virtual sequence of ``N`` rows, and
that sequence is cut into ``readers = world_size x num_workers`` contiguous, equal ranges: a
reader's range may start or end inside a row group (split by row range), so any number of row
groups serves any number of readers and no reader is ever empty. Equal ranges mean equal
batch counts on every rank, so DDP never waits for a rank that ran out.

``equalize="truncate"`` gives every reader ``N // readers`` rows and drops the last
``N % readers`` of the shuffled sequence (different rows each epoch); ``"pad"`` gives
``ceil(N / readers)`` and wraps around to repeat the first ``readers - N % readers`` rows.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from lading.split import Runs

EQUALIZE: tuple[str, ...] = ("pad", "truncate")


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


def parquet_files(paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> list[Path]:
    """Every ``*.parquet`` file under ``paths`` (files or folders), sorted."""
    items = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    files: list[Path] = []
    for item in items:
        path = Path(item)
        if path.is_dir():
            files += sorted(p for p in path.rglob("*.parquet") if p.is_file())
        elif path.is_file():
            files.append(path)
        else:
            raise FileNotFoundError(f"no parquet file or folder at {path}")
    if not files:
        raise ValueError(f"no *.parquet files under {items}")
    return files


def pieces_of(files: Sequence[Path]) -> list[Piece]:
    """Row groups of ``files``, from their footers only (no data is read)."""
    import pyarrow.parquet as pq

    pieces = []
    for file in files:
        metadata = pq.ParquetFile(file).metadata
        for i in range(metadata.num_row_groups):
            rows = metadata.row_group(i).num_rows
            if rows:
                pieces.append(Piece(str(file), i, rows))
    return pieces


@dataclass(frozen=True)
class Share:
    """The rows one reader reads this epoch, as fragments of row groups, in order."""

    fragments: tuple[Fragment, ...]
    rows: int


def rows_per_reader(total: int, readers: int, equalize: str) -> int:
    """Rows every reader gets; raises when some reader would get none."""
    if equalize not in EQUALIZE:
        raise ValueError(f"unknown equalize {equalize!r}; choose from {sorted(EQUALIZE)}")
    each = total // readers if equalize == "truncate" else -(-total // readers)
    if each == 0:
        raise ValueError(
            f"{total} rows cannot give each of {readers} readers (world_size x num_workers) "
            "a row: use fewer DataLoader workers or processes, or equalize='pad'"
        )
    return each


def epoch_pieces(pieces: Sequence[Piece], seed: int, epoch: int, shuffle: bool) -> list[Piece]:
    """The epoch's piece order: a permutation from (seed, epoch), identical on every rank."""
    if not shuffle:
        return list(pieces)
    order = np.random.default_rng([seed, epoch, 11]).permutation(len(pieces))
    return [pieces[i] for i in order]


def share_of(ordered: Sequence[Piece], reader: int, readers: int, equalize: str) -> Share:
    """Reader ``reader``'s contiguous range of the epoch's row sequence."""
    total = sum(p.rows for p in ordered)
    each = rows_per_reader(total, readers, equalize)
    start = reader * each
    return Share(tuple(_fragments(ordered, start, start + each, total)), each)


def _fragments(ordered: Sequence[Piece], start: int, stop: int, total: int) -> Iterator[Fragment]:
    """Fragments covering sequence rows ``[start, stop)``, wrapping past ``total``."""
    position = 0
    wanted = [(start, min(stop, total))]
    if stop > total:  # padding: wrap around to the start of the sequence
        wanted.append((0, stop - total))
    for lo, hi in wanted:
        position = 0
        for piece in ordered:
            begin, end = position, position + piece.rows
            position = end
            if end <= lo:
                continue
            if begin >= hi:
                break
            yield Fragment(piece, max(lo, begin) - begin, min(hi, end) - begin)


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


def chunk_order(key: list[int], size: int, shuffle: bool) -> np.ndarray:
    """The order in which a reader serves the ``size`` rows of one chunk."""
    if not shuffle:
        return np.arange(size)
    return np.random.default_rng(key).permutation(size)
