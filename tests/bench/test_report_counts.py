"""Counts in the report and the bench's lines read as English: "each cell ran once", "1
process", "1 worker", never "1 times" or "1 processes"."""

from __future__ import annotations

import re
from typing import Any

import pytest

from lading.bench.report import _times_run, measurement_lines, render_markdown
from lading.bench.stats import Ranking, Spread, busy_warning, merge_repeats

MiB = 2**20
ONE_PLURAL = re.compile(
    r"(?<![\d.,-])1 (times|processes|CPUs|steps|groups|documents|workers|cells|runs|"
    r"warm-up steps|untimed warm-up steps|timed steps)\b|time\(s\)"
)


def no_bad_counts(text: str) -> None:
    found = [m.group(0) for m in ONE_PLURAL.finditer(text)]
    assert not found, f"{found} in {text!r}"


def cell(world_size: int = 1, workers: int = 0, **extra: Any) -> dict[str, Any]:
    return merge_repeats(
        [
            {
                "strategy": "packed",
                "world_size": world_size,
                "mode": "loader",
                "workers": workers,
                "pin_memory": False,
                "ramdisk": False,
                "status": "ok",
                "samples_per_s": 100.0,
                "wait_share": 0.5,
                "store_anon": MiB,
                "baseline_anon": 0,
                "memory": {"samples": 3, "peak_anon": MiB, "peak_pss": MiB},
                **extra,
            }
        ]
    )


def results(repeats: int, **settings: Any) -> dict[str, Any]:
    return {
        "corpus": {"name": "synth", "text_bytes": 0, "documents": 1},
        "machine": {"cpus": 1, "gpus": [], "torch": "2"},
        "settings": {
            "repeats": repeats,
            "warmup": 1,
            "seconds": 0.5,
            "steps": 1,
            "batch_size": 1,
            "group_size": 1,
            "max_length": 8,
            **settings,
        },
        "options": {"modes": ["loader"], "workers": [0, 1]},
        "load": {"cpus": 1, "before": 0.1, "cells": [0.1], "after": 0.1},
        "cells": [cell(), cell(workers=1)],
    }


def test_a_cell_that_ran_once_is_said_to_have_run_once() -> None:
    assert _times_run(results(1)) == "Each cell ran once"
    assert _times_run(results(2)) == "Each cell ran 2 times"
    assert _times_run(results(3)) == "Each cell ran 3 times"


def test_an_interrupted_run_counts_its_repeats_in_english() -> None:
    cut = {**results(3), "interrupted": {"runs": 1, "of": 6}}
    text = _times_run(cut)
    assert "each cell was to run 3 times" in text
    assert "the cells here ran once" in text, text
    two = {**results(1), "interrupted": {"runs": 1, "of": 1}}
    text = _times_run(two)
    assert "each cell was to run once" in text and "Interrupted after 1 of 1 run**" in text, text


def test_the_report_of_one_repeat_one_process_one_cpu_has_no_plural_ones() -> None:
    text = render_markdown(results(1))
    assert "Each cell ran once" in text
    assert "| 1 process |" in text
    assert "Batches: 1 group x 1 document per rank" in text
    assert "1 untimed warm-up step, then" in text and "at least 1 step)" in text
    assert "on 1 CPU:" in text
    no_bad_counts(text)
    no_bad_counts("\n".join(measurement_lines(results(1))))


def test_the_variants_heading_names_their_world_size() -> None:
    both = results(3)
    both["cells"] = [cell(2), cell(2, workers=1)]
    both["options"]["workers"] = [0, 1]
    assert "(2 processes, loader mode)" in render_markdown(both)


def test_a_ranking_on_one_cpu_says_one_cpu() -> None:
    spread = Spread(100.0, 90.0, 110.0, 3)
    for decided in (True, False):
        found = Ranking(
            "x1", "packed", "memory", decided, spread, spread, band=0.5, load=2.0, cpus=1
        )
        assert "on 1 CPU" in found.text(), found.text()
        no_bad_counts(found.text())
    no_bad_counts(busy_warning({"cpus": 1, "before": 2.0, "cells": [3.0]}) or "")


def test_the_failed_cells_line_counts_in_english(capsys: pytest.CaptureFixture[str]) -> None:
    from lading.cli.bench import _failed_cells

    failed = {**cell(workers=1), "status": "error", "reason": "boom"}
    assert _failed_cells([failed]) == 1
    err = capsys.readouterr().err
    assert "1 of 1 cell failed" in err and "1 worker:" in err, err
    no_bad_counts(err)
