"""benchmarks/remote_step.py's figures over its timed steps, on a clock that only the steps
move: every step waits 100 ms for its batch and works 100 ms, so the rate is pairs / 0.2 s and
the wait share one half, whatever ``--warmup`` is."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def remote_step() -> Any:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import remote_step

        return remote_step
    finally:
        sys.path.remove(str(BENCHMARKS))


@pytest.mark.parametrize("warmup", [0, 1, 2])
def test_the_rate_and_the_wait_share_cover_every_timed_step(warmup: int) -> None:
    bench, now = remote_step(), [0.0]

    def tick() -> None:
        now[0] += 0.1

    steps = bench.timed_steps(tick, tick, 10, warmup, clock=lambda: now[0])
    got = bench.figures(steps, pairs=4, warmup=warmup)
    # the old figures: 4 x (timed - 1) pairs and the waits of all but the first timed step
    # over the time of all timed steps (4 % low at 8 timed steps of 40), and --warmup 0 raised
    # ZeroDivisionError (an elapsed of marks[-1] - marks[-1])
    assert got["rate"] == pytest.approx(4 / 0.2)
    assert got["wait_share"] == pytest.approx(0.5)
    assert got["wait_ms"] == pytest.approx(100.0)
