"""Ragged list columns (a session's item ids) to fixed-width arrays, with their lengths.

Truncation keeps the *most recent* items (the end of the list): next-item models predict from
the latest interactions. ``pad="right"`` puts the items first and the padding after; ``"left"``
puts the padding first, so the last item always sits in the last column.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

PADS: tuple[str, ...] = ("left", "right")


def pad_lists(
    values: npt.NDArray[Any],
    offsets: npt.NDArray[np.int64],
    max_len: int,
    pad: str = "right",
    fill: int | float = 0,
    padded_with: int | float | None = None,
) -> tuple[npt.NDArray[Any], npt.NDArray[np.int64]]:
    """``(padded [rows, max_len], lengths [rows])`` of a ragged array given as values + offsets.

    Row ``i`` is ``values[offsets[i]:offsets[i+1]]``, less its trailing run of
    ``padded_with`` where given (lists the files already padded: T4R's end in 0s); longer rows
    keep their last ``max_len`` items; ``lengths`` are the kept counts.
    """
    if pad not in PADS:
        raise ValueError(f"unknown pad {pad!r}; choose from {sorted(PADS)}")
    if max_len < 1:
        raise ValueError(f"max_len must be >= 1, got {max_len}")
    rows = len(offsets) - 1
    full = np.diff(offsets).astype(np.int64)
    if padded_with is not None and rows and len(values):
        full = _without_trailing(values, offsets, full, padded_with)
    lengths = np.minimum(full, max_len)
    out = np.full((rows, max_len), fill, dtype=values.dtype)
    if rows == 0 or lengths.sum() == 0:
        return out, lengths
    # source positions: the last `lengths[i]` items of row i
    row_of = np.repeat(np.arange(rows), lengths)
    within = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    source = offsets[:-1][row_of] + (full - lengths)[row_of] + within
    column = within if pad == "right" else within + (max_len - lengths)[row_of]
    out[row_of, column] = values[source]
    return out, lengths


def _without_trailing(
    values: npt.NDArray[Any],
    offsets: npt.NDArray[np.int64],
    full: npt.NDArray[np.int64],
    padded_with: int | float,
) -> npt.NDArray[np.int64]:
    """Each row's length less its trailing run of ``padded_with``: up to its last other item
    (a row of padding alone: 0)."""
    starts = offsets[:-1].astype(np.int64)
    end = int(offsets[-1])
    if isinstance(padded_with, float) and np.isnan(padded_with):  # (NaN equals nothing)
        items = ~np.isnan(values[:end])
    else:
        items = values[:end] != padded_with
    positions = np.where(items, np.arange(end), -1)
    nonempty = full > 0
    last = np.full(len(full), -1, dtype=np.int64)  # each row's last item that is not padding
    last[nonempty] = np.maximum.reduceat(positions, starts[nonempty])
    return np.where(last >= starts, last - starts + 1, 0)
