"""A cell's record from its ranks' reports: what the group delivered, and the wait share.

Every rank reports its rows, the group's window (``seconds``: the slowest rank's time summed
over the blocks, :func:`lading.bench.window.run_window`) and its own time (``busy_s``).
"""

from __future__ import annotations

from typing import Any

import pytest

from lading.bench.cell import Cell, cell_record


def rank(rows: float, seconds: float, wait_s: float, busy_s: float | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "rows": rows,
        "steps": 10,
        "seconds": seconds,
        "wait_s": wait_s,
        "cpu_s": 1.0,
        "synthetic_s": 0.0,
        "h2d_bytes_per_step": 0.0,
        "strategy_anon": 0,
        "store_anon": 0,
    }
    if busy_s is not None:
        out["busy_s"] = busy_s
    return out


def record(*ranks: dict[str, Any]) -> dict[str, Any]:
    cell = Cell("packed", len(ranks), "loader")
    return cell_record(cell, dict(enumerate(ranks)), [], {"samples": 0}, False)


def test_the_rate_is_the_rows_of_all_ranks_over_the_slowest_window() -> None:
    # ranks in lockstep, one twice as slow: the group delivered 200 rows in 2 s. Summing each
    # rank's rows over its own clock published 100/1 + 100/2 = 150/s
    got = record(rank(100, 1.0, 0.9), rank(100, 2.0, 1.9))
    assert got["samples_per_s"] == pytest.approx(100.0)
    assert got["window_s"] == 2.0


def test_the_wait_share_is_each_ranks_own_time_waiting() -> None:
    # a fast rank idle at the meetings (1.5 s of a 2 s window) is not waiting for its batches;
    # its own loop waited 0.45 of its 0.5 s
    got = record(rank(100, 2.0, 0.45, busy_s=0.5), rank(100, 2.0, 1.8, busy_s=2.0))
    assert got["wait_share"] == pytest.approx((0.9 + 0.9) / 2)
    assert got["samples_per_s"] == pytest.approx(100.0)
