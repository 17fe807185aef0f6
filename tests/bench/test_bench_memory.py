"""The memory figures of the report and plots: medians and ranges over the repeats, as the
report says every figure is, and named for what they measure."""

from __future__ import annotations

from typing import Any

from lading.bench.plots import FIGURES
from lading.bench.report import _value, render_markdown
from lading.bench.stats import merge_repeats

MiB = 2**20


def repeat(rate: float, anon_mib: int, pss_mib: int) -> dict[str, Any]:
    return {
        "strategy": "memory",
        "world_size": 1,
        "mode": "loader",
        "workers": 0,
        "pin_memory": False,
        "ramdisk": False,
        "status": "ok",
        "samples_per_s": rate,
        "wait_share": 0.5,
        "store_anon": 2 * MiB,
        "baseline_anon": 0,
        "memory": {"samples": 3, "peak_anon": anon_mib * MiB, "peak_pss": pss_mib * MiB},
    }


# the repeat with the median rate (200/s) held the least memory: its memory is no median
REPEATS = [repeat(100.0, 5, 50), repeat(300.0, 3, 30), repeat(200.0, 1, 10)]


def test_peak_memory_is_merged_into_median_and_range() -> None:
    merged = merge_repeats(REPEATS)
    assert merged["spread"]["peak_anon"] == [3 * MiB, 1 * MiB, 5 * MiB]
    assert merged["spread"]["peak_pss"] == [30 * MiB, 10 * MiB, 50 * MiB]
    assert [r["peak_pss"] for r in merged["repeats"]] == [50 * MiB, 30 * MiB, 10 * MiB]


def test_the_table_shows_memory_medians_with_their_range() -> None:
    text = _value(merge_repeats(REPEATS))
    assert "anon 3 MiB (1-5; store +2)" in text
    assert "PSS 30 MiB (10-50)" in text


def test_a_single_run_shows_its_memory_without_a_range() -> None:
    text = _value(merge_repeats([repeat(100.0, 5, 50)]))
    assert "anon 5 MiB (store +2)" in text and text.endswith("PSS 50 MiB")


def test_the_pss_plot_draws_the_median_and_range() -> None:
    get = {name: getter for name, _, getter in FIGURES}["memory_pss.png"]
    assert get(merge_repeats(REPEATS)) == (30.0, 10.0, 50.0)


def results(cells: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "corpus": {"name": "synth", "text_bytes": 0},
        "machine": {"cpus": 2, "gpus": [], "torch": "2"},
        "settings": {"steps": 5, "warmup": 5},
        "options": {"modes": ["loader"], "workers": [0]},
        "cells": cells,
    }


def test_the_report_names_the_documents_memory_for_what_it_measured() -> None:
    # store_anon is taken right after the store opens (the rank's anonymous memory then less
    # before), not at the end of the run: the report says so, as the memory table's title
    cells = [merge_repeats([{**r, "world_size": w} for r in REPEATS]) for w in (1, 2)]
    text = render_markdown(results(cells))
    assert "to the end of the run" not in text
    assert "gained by opening the store" in text
    assert "## Memory gained by opening the store, all ranks together (MiB)" in text
    titles = {name: title for name, title, _ in FIGURES}
    assert "gained by opening the store" in titles["memory_store.png"]


def test_a_train_cells_memory_leaves_out_the_batches_kept_for_the_replay() -> None:
    import torch

    from lading.bench.cell import Cell, cell_record
    from lading.bench.synthetic import KEEP_AT_MOST, Recorded
    from lading.train import StepResult

    class Noop:
        def step(self, batch: Any) -> StepResult:
            return StepResult(None, 0)

    recorded = Recorded(Noop(), keep=True)
    for _ in range(KEEP_AT_MOST + 10):
        recorded.step({"input_ids": torch.zeros(8, 16, dtype=torch.int64), "group_size": 4})
    assert recorded.kept_host_bytes() == KEEP_AT_MOST * 8 * 16 * 8  # the kept ones only
    ranks = {
        r: {
            "rows": 10.0,
            "steps": 10,
            "seconds": 1.0,
            "wait_s": 0.1,
            "synthetic_s": 1.0,
            "h2d_bytes_per_step": 0.0,
            "strategy_anon": 0,
            "store_anon": 0,
            "replay_kept_bytes": 3 * MiB,
        }
        for r in (0, 1)
    }
    memory = {"samples": 3, "peak_anon": 100 * MiB, "peak_pss": 120 * MiB, "peak_pss_anon": 1}
    got = cell_record(Cell("packed", 2, "train"), ranks, [], memory, False)
    assert got["memory"]["peak_anon"] == 94 * MiB and got["memory"]["peak_pss"] == 114 * MiB
    assert got["memory"]["replay_kept"] == 6 * MiB  # reported, beside the figures
    assert got["memory"]["peak_pss_anon"] == 1  # the budget's figure: what was really held


def test_the_report_says_a_train_cells_memory_leaves_out_the_replay() -> None:
    cells = [merge_repeats([{**r, "mode": "train"} for r in REPEATS])]
    assert "kept for its replay" in render_markdown(results(cells))
    assert "kept for its replay" not in render_markdown(results([merge_repeats(REPEATS)]))
