"""lading bench with the GPU leg's strategies: E, wait share and bytes per step per cell."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from lading.bench.report import render
from lading.bench.results import validate
from lading.bench.synth import synth
from lading.cli import main

pytestmark = pytest.mark.slow
pytest.importorskip("matplotlib")


def test_device_strategies_report_efficiency_and_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LADING_CACHE", str(tmp_path / "cache"))
    files = synth("passages", 600, tmp_path / "c", queries=30)
    out = tmp_path / "out"
    args = ["bench", "--steps", "2", "--warmup", "1", "--out", str(out), "--world-sizes", "1"]
    args += ["--seconds", "0", "--repeats", "2"]
    args += ["--corpus", str(files.corpus), "--queries", str(files.queries)]
    args += ["--qrels", str(files.qrels), "--modes", "train"]
    args += ["--strategies", "packed,packed+prefetch,gpu-resident"]
    assert main(args) == 0
    results = validate(json.loads((out / "results.json").read_text()))
    cells = {c["strategy"]: c for c in results["cells"]}
    for name in ("packed", "packed+prefetch"):
        cell = cells[name]
        assert cell["status"] == "ok", cell.get("reason")
        assert cell["efficiency"] > 0 and 0 <= cell["wait_share"] < 1
        median, low, high = cell["spread"]["efficiency"]  # two repeats: a range, not a point
        assert 0 < low <= median <= high and len(cell["repeats"]) == 2
    # narrow ids + lengths: well under a quarter of today's int64 ids, mask and token types
    wide, narrow = (cells[s]["h2d_bytes_per_step"] for s in ("packed", "packed+prefetch"))
    assert 0 < narrow * 4 < wide
    resident = cells["gpu-resident"]
    if torch.cuda.is_available():
        assert resident["status"] == "ok" and resident["h2d_bytes_per_step"] * 10 < narrow
    else:
        assert resident["status"] == "n/a" and "CUDA" in resident["reason"]
    report = render(out)
    assert "## Efficiency E (train mode)" in report
    assert "| gpu-resident | n/a |" in report or torch.cuda.is_available()
    assert (out / "efficiency.png").stat().st_size > 1000
