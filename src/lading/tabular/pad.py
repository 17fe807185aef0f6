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
) -> tuple[npt.NDArray[Any], npt.NDArray[np.int64]]:
    """``(padded [rows, max_len], lengths [rows])`` of a ragged array given as values + offsets.

    Row ``i`` is ``values[offsets[i]:offsets[i+1]]``; longer rows keep their last ``max_len``
    items; ``lengths`` are the kept counts.
    """
    if pad not in PADS:
        raise ValueError(f"unknown pad {pad!r}; choose from {sorted(PADS)}")
    if max_len < 1:
        raise ValueError(f"max_len must be >= 1, got {max_len}")
    rows = len(offsets) - 1
    full = np.diff(offsets).astype(np.int64)
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
