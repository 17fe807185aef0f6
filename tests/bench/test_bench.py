"""lading bench end to end on a small grid: every cell, positive numbers, schema, table, plots."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from lading.bench.report import render
from lading.bench.results import validate
from lading.bench.synth import synth
from lading.cli import main

pytestmark = pytest.mark.slow
pytest.importorskip("matplotlib")


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG header (and proof that it is a PNG)."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    width, height = struct.unpack(">II", head[16:24])
    return width, height


@pytest.fixture(scope="module")
def collection(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    files = synth("passages", 2000, tmp_path_factory.mktemp("bench") / "c", queries=40)
    return {
        "--corpus": str(files.corpus),
        "--queries": str(files.queries),
        "--qrels": str(files.qrels),
    }


def bench(collection: dict[str, str], out: Path, *extra: str, code: int = 0) -> dict:  # type: ignore[type-arg]
    args = ["bench", "--steps", "3", "--warmup", "1", "--seconds", "0", "--out", str(out)]
    args += [] if "--repeats" in extra else ["--repeats", "1"]
    for key, value in collection.items():
        args += [key, value]
    assert main(args + list(extra)) == code
    return json.loads((out / "results.json").read_text())


def test_small_grid(
    collection: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("LADING_CACHE", str(tmp_path / "cache"))
    results = bench(
        collection,
        tmp_path / "out",
        "--strategies",
        "memory,packed",
        "--world-sizes",
        "1,2",
        "--modes",
        "loader,train",
        "--workers",
        "0,1",
    )
    validate(results)
    cells = {(c["strategy"], c["world_size"], c["mode"], c["workers"]): c for c in results["cells"]}
    expected = {
        (s, w, m, 0) for s in ("memory", "packed") for w in (1, 2) for m in ("loader", "train")
    } | {("memory", 1, "loader", 1), ("packed", 1, "loader", 1)}
    assert set(cells) == expected
    for cell in cells.values():
        assert cell["status"] == "ok", cell.get("reason")
        assert cell["samples_per_s"] > 0
        assert cell["memory"]["peak_anon"] > 0 and cell["memory"]["peak_pss"] > 0
        assert cell["memory"]["processes"] >= cell["world_size"] + cell["workers"]
    # the dict is a copy per rank: two ranks hold about twice what one holds
    one, two = cells[("memory", 1, "loader", 0)], cells[("memory", 2, "loader", 0)]
    assert two["store_anon"] > 1.5 * one["store_anon"] > 0
    packed = cells[("packed", 2, "loader", 0)]
    assert packed["store_anon"] < 0.2 * two["store_anon"]  # a memory map costs next to nothing
    assert results["machine"]["torch"] and results["corpus"]["documents"] == 2000
    table = capsys.readouterr().out
    assert "## loader mode" in table
    assert "| packed | PackedStore (memory map) | at build (stored ids) |" in table
    assert "| memory | a dict in every rank | collator |" in table
    assert "## Memory gained by opening the store, all ranks together (MiB)" in table
    for name in ("samples_per_s.png", "memory_anon.png", "memory_pss.png", "memory_store.png"):
        width, height = png_size(tmp_path / "out" / name)
        assert width > 300 and height > 200
    (tmp_path / "out" / "report.md").unlink()
    assert "## train mode" in render(tmp_path / "out")
    assert (tmp_path / "out" / "report.md").is_file()


def test_packed_text_reads_the_packed_store_as_text(
    collection: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LADING_CACHE", str(tmp_path / "cache"))
    args = ("--strategies", "packed-text", "--world-sizes", "1", "--modes", "loader")
    results = bench(collection, tmp_path / "out", *args, "--repeats", "2")
    (cell,) = results["cells"]
    assert cell["strategy"] == "packed-text" and cell["status"] == "ok", cell.get("reason")
    assert len(cell["repeats"]) == 2 and cell["steps"] >= 3  # two runs, each >= --steps
    median, low, high = cell["spread"]["samples_per_s"]
    assert low <= median == cell["samples_per_s"] <= high
    assert cell["samples_per_s"] > 0 and cell["store_anon"] < 2**20  # a map, not a copy
    report = (tmp_path / "out" / "report.md").read_text()
    assert "| packed-text | PackedStore (memory map) | collator |" in report


def test_each_strategy_tokenizes_where_the_report_says(
    collection: dict[str, str], tmp_path: Path
) -> None:
    """packed and packed-text open the same store; only packed may read its stored ids, while
    packed-text, like memory and offsets, encodes the text in the collator on every batch."""
    from lading.bench.cell import Settings, collator_for, open_strategy
    from lading.bench.data import prepare
    from lading.stores.tokens import load_tokenizer

    files = {k.lstrip("-"): Path(v) for k, v in collection.items()}
    strategies = ["memory", "offsets", "packed", "packed-text"]
    data = prepare(
        files["corpus"], files["queries"], files["qrels"], None, tmp_path / "w", strategies
    )
    tokenizer = load_tokenizer(data.tokenizer)
    stored = {
        s: collator_for(s, open_strategy(s, data), tokenizer, Settings()).use_tokens
        for s in strategies
    }
    assert stored == {"memory": False, "offsets": False, "packed": True, "packed-text": False}


def test_quick_grid_by_default_full_grid_one_flag_away() -> None:
    from lading.bench import FULL, QUICK
    from lading.cli import bench_plan, build_parser, default_world_sizes

    options, settings, passages = bench_plan(build_parser().parse_args(["bench"]))
    assert (passages, options.world_sizes, options.modes) == (20_000, [1, 2], ["loader"])
    assert options.strategies == list(QUICK.strategies)
    assert "packed-text" in options.strategies and "memory" in options.strategies
    assert (settings.steps, settings.warmup) == (QUICK.steps, QUICK.warmup)
    options, settings, passages = bench_plan(build_parser().parse_args(["bench", "--full"]))
    assert (passages, options.modes) == (100_000, ["loader", "train"])
    assert (settings.seconds, settings.repeats) == (FULL.seconds, FULL.repeats)
    assert options.strategies == list(FULL.strategies) and "irds" in options.strategies
    assert options.world_sizes == default_world_sizes()  # 1,2,4 on CPU; up to 8 GPUs
    given = ["bench", "--full", "--modes", "train", "--steps", "7", "--world-sizes", "1,4"]
    options, settings, passages = bench_plan(build_parser().parse_args(given))
    assert (options.modes, settings.steps, options.world_sizes) == (["train"], 7, [1, 4])


def test_tiny_budget_gives_oom_cells_and_the_grid_goes_on(
    collection: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LADING_CACHE", str(tmp_path / "cache"))
    results = bench(
        collection,
        tmp_path / "out",
        "--strategies",
        "memory,packed",
        "--world-sizes",
        "1,2",
        "--modes",
        "loader",
        "--memory-budget",
        "1M",
    )
    statuses = [(c["strategy"], c["world_size"], c["status"]) for c in results["cells"]]
    assert statuses == [
        ("memory", 1, "oom"),
        ("memory", 2, "oom"),
        ("packed", 1, "oom"),
        ("packed", 2, "oom"),
    ]
    assert results["cells"][1].get("predicted") is True  # x2 predicted from x1, not run
    assert "OOM" in (tmp_path / "out" / "report.md").read_text()


def test_a_cell_that_fails_makes_the_run_exit_1_naming_it(
    collection: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 2,000 passages cannot give a group of 3,000 distinct documents: the cell errors
    extra = ("--strategies", "packed", "--world-sizes", "1", "--modes", "loader")
    results = bench(collection, tmp_path / "out", *extra, "--group-size", "3000", code=1)
    [cell] = results["cells"]
    assert cell["status"] == "error" and "group_size" in cell["reason"]
    err = capsys.readouterr().err
    assert "1 of 1 cell failed" in err and "packed" in err and "group_size" in err, err
    assert "Cells that did not run to the end" in (tmp_path / "out" / "report.md").read_text()


def test_report_refuses_foreign_files(tmp_path: Path) -> None:
    (tmp_path / "results.json").write_text(json.dumps({"schema": "other/1"}))
    with pytest.raises(ValueError, match="not a lading bench result"):
        render(tmp_path)


def test_hf_strategy_runs_as_a_column_beside_the_others(
    collection: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--strategies memory,hf``: the HF datasets cell is measured by the same harness, and
    its rank pays for the id map a Dataset needs (a dict per rank, as the study's memory)."""
    pytest.importorskip("datasets")
    monkeypatch.setenv("LADING_CACHE", str(tmp_path / "cache"))
    args = ("--strategies", "memory,hf", "--world-sizes", "1", "--modes", "loader")
    results = bench(collection, tmp_path / "out", *args)
    cells = {c["strategy"]: c for c in results["cells"]}
    assert set(cells) == {"memory", "hf"}
    assert cells["hf"]["status"] == "ok", cells["hf"].get("reason")
    assert cells["hf"]["samples_per_s"] > 0 and cells["hf"]["store_anon"] > 0
    report = (tmp_path / "out" / "report.md").read_text()
    assert "| hf | HF datasets (Arrow, memory map) + an id map per rank | collator |" in report


def test_a_rerun_into_the_same_folder_keeps_the_earlier_results(
    collection: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A quick rerun into a folder holding a run's results replaced them without a word (a
    review, 2026-12-07: a full run's 24 cells became 1). They are moved aside, renderable."""
    monkeypatch.setenv("LADING_CACHE", str(tmp_path / "cache"))
    extra = ("--world-sizes", "1", "--modes", "loader")
    first = bench(collection, tmp_path / "out", "--strategies", "memory,packed", *extra)
    second = bench(collection, tmp_path / "out", "--strategies", "packed", *extra)
    assert len(first["cells"]) == 2 and len(second["cells"]) == 1
    [kept] = list((tmp_path / "out").glob("earlier-*"))
    assert json.loads((kept / "results.json").read_text()) == first
    assert (kept / "report.md").is_file() and "moved to" in capsys.readouterr().err
    assert "memory" in render(kept)


def test_a_cut_results_file_is_named(tmp_path: Path) -> None:
    from lading.bench.results import load_results

    (tmp_path / "results.json").write_text('{"schema": "lading.bench/2", "cells": [')
    with pytest.raises(ValueError, match=r"results\.json is not valid JSON"):
        load_results(tmp_path)
