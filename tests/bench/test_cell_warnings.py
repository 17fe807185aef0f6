"""The cells' warnings reach the user once each, not once per cell process.

Every cell of a grid runs its ranks in fresh processes, and each rank builds the training
groups: on real data the same two ``GroupsWarning`` lines were printed 72 times, across the
progress bar. The ranks now send their warnings to the bench, which shows each distinct one
once, when first raised, and says at the end how many cells raised it; a warning only some
cells raise is still shown, and a rank that dies after warning has its warning kept.
"""

from __future__ import annotations

import os
import signal
import time
import warnings
from pathlib import Path
from typing import Any

import pytest

from lading.bench import cell as cell_module
from lading.bench.cell import Cell, Settings, run_cell, serve_rank
from lading.bench.warned import CellWarnings

LEFT_OUT = "/x/train.py:207: GroupsWarning: training groups left out 3 judged documents\n"
NO_NEGATIVE = "/x/train.py:207: GroupsWarning: 2 of 5 queries have no negative\n"


def test_each_distinct_warning_is_shown_once_with_the_cells_that_raised_it() -> None:
    seen = CellWarnings(cells=4)
    first = seen.add("memory x1 loader", [LEFT_OUT, NO_NEGATIVE])
    assert sum(line.count("training groups left out") for line in first) == 1
    assert sum(line.count("no negative") for line in first) == 1
    assert "memory x1 loader" in "".join(first)
    # the same warnings from another cell, and from the same cell's next repeat: not again
    assert seen.add("memory x2 loader", [NO_NEGATIVE, LEFT_OUT]) == []
    assert seen.add("memory x1 loader", [LEFT_OUT]) == []
    # a warning only one cell raises is still shown, once
    odd = "/x/store.py:9: UserWarning: a shard was read twice\n"
    later = seen.add("packed x2 loader", [odd, LEFT_OUT])
    assert "a shard was read twice" in "".join(later) and "left out" not in "".join(later)
    assert seen.add("packed x1 loader", []) == []
    summary = "\n".join(seen.summary())
    assert "raised in 3 of 4 cells" in summary and "training groups left out" in summary
    assert "raised in 2 of 4 cells" in summary and "no negative" in summary
    assert "raised in 1 of 4 cells" in summary and "read twice" in summary
    assert seen.as_json() == [
        {
            "warning": LEFT_OUT.strip(),
            "cells": ["memory x1 loader", "memory x2 loader", "packed x2 loader"],
        },
        {"warning": NO_NEGATIVE.strip(), "cells": ["memory x1 loader", "memory x2 loader"]},
        {"warning": odd.strip(), "cells": ["packed x2 loader"]},
    ]


def test_the_report_lists_each_warning_once_with_its_cells() -> None:
    from lading.bench.report import warning_lines

    seen = CellWarnings(cells=2)
    seen.add("packed x1 loader", [LEFT_OUT + "  return TrainingGroups(\n"])
    seen.add("packed x2 loader", [LEFT_OUT + "  return TrainingGroups(\n"])
    cells: list[dict[str, Any]] = [{}, {}]
    text = "\n".join(warning_lines({"cells": cells, "warnings": seen.as_json()}))
    assert "## Warnings the cells raised" in text and "Raised in 2 of 2 cells" in text
    assert text.count("training groups left out") == 1 and "    " + LEFT_OUT.strip() in text
    assert warning_lines({"cells": cells}) == []


def test_no_warnings_no_summary() -> None:
    seen = CellWarnings(cells=2)
    assert seen.add("packed x1 loader", []) == []
    assert seen.summary() == [] and seen.as_json() == []


def warns_twice_then_dies(
    rank: int, cell: Any, settings: Any, data: Any, env: Any, out: Any
) -> None:
    """A rank that warns (the same warning three times, and another), then, a moment later,
    dies by a signal before its report: what it warned reaches the bench all the same."""

    def work() -> dict[str, float]:
        for _ in range(3):
            warnings.warn("training groups left out 3 judged documents", UserWarning, stacklevel=1)
        warnings.warn("2 of 5 queries have no negative", UserWarning, stacklevel=1)
        time.sleep(0.3)  # the warnings leave when raised; the queue's thread sends them
        os.kill(os.getpid(), signal.SIGSEGV)
        return {}

    serve_rank(rank, out, work)


def test_a_rank_that_warns_then_dies_has_its_warnings_kept_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real_finish = cell_module.finish
    monkeypatch.setattr(
        cell_module, "finish", lambda procs, pids: real_finish(procs, pids, grace_s=0.2)
    )
    monkeypatch.setattr(cell_module, "rank_main", warns_twice_then_dies)
    record = run_cell(Cell("packed", 1, "loader"), Settings(timeout_s=30), None, None)  # type: ignore[arg-type]
    assert record["status"] == "error" and "SIGSEGV" in record["reason"]
    texts = record["warnings"]
    assert len(texts) == 2, texts
    assert "UserWarning: training groups left out 3 judged documents" in texts[0]
    assert "UserWarning: 2 of 5 queries have no negative" in texts[1]


@pytest.mark.slow  # the CLI's grid: a cell at 1 and at 2 processes, ranks spawned (~20 s)
def test_a_grid_shows_the_ranks_groups_warning_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("matplotlib")
    from lading.bench.synth import synth
    from lading.cli import main

    monkeypatch.setenv("LADING_CACHE", str(tmp_path / "cache"))
    files = synth("passages", 500, tmp_path / "c", queries=20)
    qrels = tmp_path / "qrels.txt"  # a judged document the corpus lacks: a GroupsWarning
    qrels.write_text(files.qrels.read_text() + "q-missing 0 no-such-document 1\n")
    args = ["bench", "--steps", "2", "--warmup", "0", "--seconds", "0", "--repeats", "1"]
    args += ["--out", str(tmp_path / "out"), "--strategies", "packed", "--world-sizes", "1,2"]
    args += ["--corpus", str(files.corpus), "--queries", str(files.queries), "--qrels", str(qrels)]
    assert main(args) == 0
    err = capfd.readouterr().err
    # the warning as Python prints it (its source line under it): once, not once per rank
    assert err.count("  return TrainingGroups(") == 1, err
    shown = [line for line in err.splitlines() if "GroupsWarning: training groups" in line]
    assert len(shown) == 2, err  # the warning, and the end's count of the cells that raised it
    assert "raised in 2 of 2 cells" in shown[1], err
