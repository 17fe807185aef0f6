"""Ctrl-C during ``lading bench``: one line from the parent, no rank's traceback, no process
left, and what was measured kept with a report that says the run was cut short."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from lading.bench.synth import synth

pytestmark = pytest.mark.slow  # the CLI in a subprocess, ranks spawned: ~20-40 s on 2 cores
pytest.importorskip("matplotlib")


def _ranks(pid: int) -> list[psutil.Process]:
    """The spawned processes below ``pid`` (a cell's ranks, their workers)."""
    try:
        children = psutil.Process(pid).children(recursive=True)
        return [c for c in children if "spawn_main" in " ".join(c.cmdline())]
    except psutil.Error:
        return []


def test_ctrl_c_stops_the_grid_in_one_line_and_keeps_what_was_measured(tmp_path: Path) -> None:
    """Ctrl-C (SIGINT to the foreground process group: the parent and every rank) printed a
    KeyboardInterrupt traceback from each spawned rank, mid-import or mid-step; the report
    kept "Each cell ran 3 times" for cells that ran once."""
    files = synth("passages", 2000, tmp_path / "c", queries=40)
    out = tmp_path / "out"
    args = ["--corpus", str(files.corpus), "--queries", str(files.queries)]
    args += ["--qrels", str(files.qrels), "--strategies", "memory,packed", "--world-sizes", "1,2"]
    args += ["--repeats", "50", "--seconds", "0", "--steps", "3", "--warmup", "1"]
    args += ["--out", str(out)]
    env = {**os.environ, "LADING_CACHE": str(tmp_path / "cache")}
    code = "import sys; from lading.cli import run; sys.argv[0] = 'lading'; run()"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "bench", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own group, as a terminal's foreground job
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # (pytest's: ignored?)
    )
    try:
        deadline = time.monotonic() + 240
        ranks: list[psutil.Process] = []
        while not (out / "results.json").is_file() or not ranks:
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
            ranks = _ranks(proc.pid)
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C with a cell's ranks running
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("lading bench: interrupted after ") and "report.md" in last, last
    _, alive = psutil.wait_procs(ranks, timeout=10)
    assert not alive, alive  # the cell's ranks went with the parent
    results = json.loads((out / "results.json").read_text())
    cut = results["interrupted"]
    assert 1 <= cut["runs"] < cut["of"] == 4 * 50, cut
    assert sum(len(c["repeats"]) for c in results["cells"]) == cut["runs"]
    report = (out / "report.md").read_text()
    assert f"Interrupted after {cut['runs']} of 200 runs" in report
    assert "Each cell ran 50 times" not in report
