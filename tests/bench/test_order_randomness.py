"""``benchmarks/lm_order_randomness.py``: the figures RESULTS quotes for the window orders."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "lm_order_randomness.py"


def test_the_feistel_order_measures_as_a_uniform_draw_does() -> None:
    """Every row printed; the Feistel order's pairs within 1 % at the numpy draw's, the
    smallest blocks' far above it (the locality shuffle's price)."""
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--windows", "1953", "--seeds", "3"],
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout  # fmt: skip
    rows = {
        line.split(" | ")[0].lstrip("| "): line.split(" | ")
        for line in out.splitlines()
        if line.startswith("| ") and not line.startswith("| order")
    }
    assert len(rows) == 6, out
    close = {name: float(cells[2].split()[0]) for name, cells in rows.items()}
    reference = close["numpy random permutation (the reference)"]
    assert abs(close["exact global shuffle (Feistel order)"] - reference) < 0.006, out
    assert close["blocks of 12 windows, buffer 4"] > 5 * reference, out
