"""The bench's statistics: repeats merged into median and range, rankings only beyond the noise,
E never read above 1, the busy-machine warning, and the flags refused before anything runs."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO
from lading.bench.report import measurement_lines
from lading.bench.stats import (
    BUSY_CONTENTION,
    NOISE_FLOOR,
    Spread,
    busy_warning,
    efficiency_text,
    merge_repeats,
    noise_floor,
    rankings,
    report_rankings,
)
from lading.cli import build_parser, main


def run(rate: float, strategy: str = "memory", world_size: int = 1, **extra: Any) -> dict:  # type: ignore[type-arg]
    """A repeat's record as a cell returns it."""
    return {
        "strategy": strategy,
        "world_size": world_size,
        "mode": "loader",
        "status": "ok",
        "samples_per_s": rate,
        "wait_share": 0.5,
        "store_anon": 100,
        "baseline_anon": 1000,
        "memory": {"samples": 3, "peak_anon": 5000},
        **extra,
    }


def test_spread_overlap_is_inclusive() -> None:
    a, b = Spread.of([1.0, 2.0, 3.0]), Spread.of([3.0, 4.0])
    assert (a.median, a.low, a.high, a.n) == (2.0, 1.0, 3.0, 3)
    assert a.overlaps(b) and b.overlaps(a)  # touching at 3.0 is overlapping: no order claimed
    assert not a.overlaps(Spread.of([3.5, 9.0]))
    with pytest.raises(ValueError):
        Spread.of([])


def test_merge_keeps_each_repeat_and_the_median() -> None:
    merged = merge_repeats([run(300.0), run(100.0), run(200.0)])
    assert merged["samples_per_s"] == 200.0
    assert merged["spread"]["samples_per_s"] == [200.0, 100.0, 300.0]
    assert [r["samples_per_s"] for r in merged["repeats"]] == [300.0, 100.0, 200.0]
    assert merged["spread"]["above_baseline"] == [4000.0, 4000.0, 4000.0]


def test_a_failed_repeat_makes_the_cell_failed() -> None:
    oom = {**run(0.0), "status": "oom", "reason": "budget"}
    merged = merge_repeats([run(100.0), oom])
    assert merged["status"] == "oom" and len(merged["repeats"]) == 2


def _cells(**rates: list[float]) -> list[dict]:  # type: ignore[type-arg]
    return [merge_repeats([run(r, strategy=s) for r in rs]) for s, rs in rates.items()]


def test_ranking_only_where_ranges_do_not_overlap() -> None:
    (found,) = rankings(_cells(memory=[100, 110, 120], packed=[400, 420, 500]))  # ~4x apart
    assert found.decided and (found.first, found.second) == ("packed", "memory")
    assert "packed faster than memory" in found.text()
    # the medians differ (110 vs 115) but the ranges overlap: within noise, no order
    (noisy,) = rankings(_cells(memory=[100, 110, 150], offsets=[90, 115, 130]))
    assert not noisy.decided and "within noise" in noisy.text()
    assert "faster" not in noisy.text()


def test_cells_that_ran_once_are_not_ranked() -> None:
    """--repeats 1: one run per cell, a zero-width range. Widened to the band, 2x apart
    ranges did not overlap and the report printed "packed faster than memory" from one draw
    each, where the same data under schema 1 is told "rank nothing on it"."""
    cells = _cells(memory=[1000], packed=[2000])
    (once,) = rankings(cells)
    assert not once.decided and "ran once" in once.text() and "faster" not in once.text()
    (half,) = rankings(_cells(memory=[1000], packed=[2000, 2100, 2200]))  # one side once
    assert not half.decided
    results = {
        "settings": {"repeats": 1, "warmup": 3, "seconds": 0.5, "steps": 5},
        "load": {"cpus": 2, "before": 0.5, "cells": [0.5, 0.5], "after": 0.5},
    }
    assert not any(r.decided for r in report_rankings(results, cells))
    assert "nothing is ranked" in " ".join(measurement_lines(results))


def test_ranges_closer_than_the_noise_floor_are_not_ranked() -> None:
    """Disjoint but 1% apart (4,910-5,571 vs 4,261-4,864, seen in one quick grid): with three
    repeats that happens by chance; the ranges widened to +-25% of their medians overlap. So
    do 1.5x apart ranges (memory 4,010-6,024 vs packed-text 3,070-3,513 flipped next grid)."""
    (close,) = rankings(_cells(memory=[4910, 4986, 5571], offsets=[4261, 4688, 4864]))
    assert not close.decided
    (flipped,) = rankings(_cells(memory=[6024, 4010, 5220], packed_text=[3150, 3513, 3070]))
    assert not flipped.decided
    assert Spread.of([100.0]).widened() == Spread(100.0, 75.0, 125.0, 1)
    assert Spread.of([50.0, 100.0, 200.0]).widened() == Spread.of([50.0, 100.0, 200.0])


def test_rankings_compare_world_sizes_of_one_strategy() -> None:
    one = merge_repeats([run(r, world_size=1) for r in (100, 120, 140)])
    two = merge_repeats([run(r, world_size=2) for r in (130, 160, 170)])
    (found,) = rankings([one, two])
    assert found.scope == "loader, memory" and not found.decided  # 130 < 140: overlap


def test_world_sizes_not_ranked_by_rate_without_free_cpus() -> None:
    """1 vs 2 processes on 2 CPUs already running 3 others' processes measures the others."""
    one = merge_repeats([run(r, world_size=1, samples_per_cpu_s=r) for r in (100, 110, 120)])
    two = merge_repeats([run(r, world_size=2, samples_per_cpu_s=r) for r in (300, 310, 320)])
    (free,) = rankings([one, two], free_cpus=2.0)
    assert free.decided
    (busy,) = rankings([one, two], free_cpus=2 - 3.1)
    assert not busy.decided and "not ranked: 2 processes, 0.0 CPUs free" in busy.text()
    (cost,) = rankings([one, two], key="samples_per_cpu_s", free_cpus=0.0)
    assert cost.decided and "cheaper than" in cost.text()


def test_the_band_widens_with_the_load_and_a_busy_machine_decides_nothing() -> None:
    """At load 16-49 on 2 CPUs the quick grid's decided rankings changed run to run (one,
    memory faster than offsets at 1 process, reversed): a ranking is decided only where it
    holds at the load each cell ran under (the highest 1-minute load average of its
    repeats, per CPU)."""

    def pair(load1: float) -> list[dict[str, Any]]:
        return [
            merge_repeats([run(r, strategy="memory", load1=load1) for r in (200, 205, 210)]),
            merge_repeats([run(r, strategy="offsets", load1=1.0) for r in (100, 102, 104)]),
        ]

    (calm,) = rankings(pair(2.0), cpus=2)  # 2x apart at load 1 per CPU: as before
    assert calm.decided and "memory faster than offsets" in calm.text()
    (loaded,) = rankings(pair(10.0), cpus=2)  # 5 per CPU: the band is wider than 2x
    assert not loaded.decided and "within noise at load 10.0 on 2 CPUs" in loaded.text()
    (busy,) = rankings(pair(16.0), cpus=2)
    assert not busy.decided
    assert "not decided: the machine was busy (load 16.0 on 2 CPUs" in busy.text()
    far = [
        merge_repeats([run(r, strategy="packed", load1=10.0) for r in (900, 950, 1000)]),
        pair(10.0)[1],
    ]
    (kept,) = rankings(far, cpus=2)  # 9x apart holds even there, and says at which band
    assert kept.decided and "band +-36% at load 10.0 on 2 CPUs" in kept.text()
    assert noise_floor(None) == noise_floor(3.5) == NOISE_FLOOR < noise_floor(5.0)
    assert noise_floor(BUSY_CONTENTION) is None


def test_efficiency_above_one_is_never_a_gain() -> None:
    assert efficiency_text(Spread.of([0.95, 1.02, 1.317])) == "within noise of 1 (0.95-1.32)"
    above = efficiency_text(Spread.of([1.05, 1.1, 1.2]))
    assert "noise" in above and not above.startswith("1.1")
    assert efficiency_text(Spread.of([0.5, 0.6, 0.7])) == "0.60 (0.50-0.70)"


def test_busy_warning_from_the_load_averages() -> None:
    assert busy_warning({"cpus": 2, "before": 0.2, "cells": [1.5, 1.9]}) is None
    assert "busy" in (busy_warning({"cpus": 2, "before": 1.4, "cells": [1.5]}) or "")
    assert "up to 3.10" in (busy_warning({"cpus": 2, "before": 0.1, "cells": [3.1]}) or "")


def _plan(*flags: str) -> Any:
    from lading.cli import bench_plan

    return bench_plan(build_parser().parse_args(["bench", *flags]))


def test_pin_memory_refused_without_cuda(capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine can pin memory")
    assert main(["bench", "--pin-memory", "--out", "unused"]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]  # after "importing torch..."
    assert error.startswith("lading bench: --pin-memory") and "CUDA" in error


def test_missing_model_refused_in_loader_mode_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "no-such-model"
    assert main(["bench", "--modes", "loader", "--model", str(missing), "--out", "x"]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith(f"lading bench: --model {missing}: no model folder")
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "tokenizer.json").write_text("{}")
    _, settings, _ = _plan("--model", str(model))
    assert settings.model == str(model)


# --negatives and run sampling: tests/test_bench_flags.py


def test_timing_flags_reach_the_settings() -> None:
    from lading.bench import QUICK

    _, settings, _ = _plan()
    assert (settings.seconds, settings.repeats) == (QUICK.seconds, QUICK.repeats)
    assert QUICK.repeats >= 3 and QUICK.seconds > 0
    _, settings, _ = _plan("--seconds", "0.5", "--repeats", "4")
    assert (settings.seconds, settings.repeats) == (0.5, 4)
    with pytest.raises(SystemExit):  # argparse's one line naming --repeats (tests/cli)
        _plan("--repeats", "0")
    with pytest.raises(ValueError, match="--seconds"):
        _plan("--seconds", "-1")
    assert isinstance(build_parser().parse_args(["bench"]), argparse.Namespace)


BENCHMARKS = REPO / "benchmarks"


def test_benchmarks_write_tracked_results_only_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import common

    monkeypatch.setattr(common, "OUT", tmp_path / "out")
    tracked = tmp_path / "RESULTS.md"
    tracked.write_text("# Benchmark results\n\n## Old\n\nkept\n")
    written = common.write_section(tracked, "New", "body", "python x.py", write=False)
    assert written == tmp_path / "out" / "RESULTS.md"
    assert tracked.read_text() == "# Benchmark results\n\n## Old\n\nkept\n"
    assert "## Old" in written.read_text() and "## New" in written.read_text()
    assert common.write_section(tracked, "New", "body", "python x.py", write=True) == tracked
    assert "## New" in tracked.read_text()


def test_every_benchmark_says_whether_it_writes_the_tracked_file() -> None:
    """No call of write_section in benchmarks/ without ``write=``: a plain run of any script
    must leave the clone clean."""
    import ast

    calls = 0
    for script in sorted(BENCHMARKS.glob("*.py")):
        for node in ast.walk(ast.parse(script.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "write_section":
                calls += 1
                assert any(k.arg == "write" for k in node.keywords), f"{script.name}:{node.lineno}"
    assert calls >= 10


def test_stability_check_reads_medians_at_the_reports_resolution(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """bench_stability's median check: a run's median outside another run's narrow repeat range
    but inside its +-25% band (what the report ranks at) passes; one outside the band fails;
    the drift between runs is reported."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import bench_stability

    def run(median: float) -> dict[str, Any]:
        cell = {
            "strategy": "packed", "world_size": 1, "mode": "loader", "status": "ok",
            "pin_memory": False, "ramdisk": False, "repeats": [{}, {}, {}],
            "spread": {"samples_per_s": [median, median * 0.99, median * 1.01]},
        }  # fmt: skip
        return {"cells": [cell]}

    checked, strict, hull, banded = bench_stability.check_medians([run(100), run(110)])
    assert checked == 2 and len(strict) == 2 and len(hull) == 2 and banded == []
    _, _, _, banded = bench_stability.check_medians([run(100), run(110), run(200)])
    assert len(banded) == 3  # 200 is outside both others' bands; both are outside 200's
    assert bench_stability.drift([run(100), run(110)]) == pytest.approx([0.1])


def test_stability_under_load_counts_rankings_decided_both_ways(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """bench_stability --busy's verdict: a pair decided one way in a run and the other way in
    another is a reversal; the same order twice is a ranking decided in every run."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import bench_stability

    def grid(memory: float, offsets: float) -> dict[str, Any]:
        cells = [
            {**merge_repeats([run(r, strategy=s) for r in (v, v, v)]),
             "pin_memory": False, "ramdisk": False}
            for s, v in (("memory", memory), ("offsets", offsets))
        ]  # fmt: skip
        return {"cells": cells, "load": {"cpus": 2, "before": 0.0, "cells": [1.0]}}

    per_run, common, flips = bench_stability.reversed_rankings([grid(400, 100), grid(400, 90)])
    assert (per_run, common, flips) == ([1, 1], 1, [])
    per_run, common, flips = bench_stability.reversed_rankings([grid(400, 100), grid(100, 400)])
    assert per_run == [1, 1] and common == 0 and len(flips) == 1
    assert "memory > offsets and offsets > memory" in flips[0]
