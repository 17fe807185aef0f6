"""benchmarks/bench_merge.py times a merge, not the child's start-up: its "s per 10M" column
scales the merge seconds by 10M / documents, and a start-up inside them was scaled too (a 1M
corpus row read 6.2 s per 10M where the 10M row measured 1.0 s)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def bench_merge() -> Any:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import bench_merge

        return bench_merge
    finally:
        sys.path.remove(str(BENCHMARKS))


def test_the_merge_clock_starts_after_the_imports(tmp_path: Path) -> None:
    # the import-only child merges nothing: its merge seconds are the clock read twice in a
    # row, its start-up (numpy, lading) the rest. Before, its "merge" took the whole start-up
    merged = bench_merge().merge_once("floor", tmp_path)
    assert 0 <= merged.seconds < merged.startup_s, merged
    assert merged.rss_mib > 0 and merged.written == 0
