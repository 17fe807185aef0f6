"""The grid of cells, run one after another, with out-of-memory predicted before it happens.

The main grid is strategies x world sizes x modes; a second grid varies DataLoader workers,
pinned memory and a RAM disk at world size 1. A cell whose anonymous memory, extrapolated from
the same strategy at smaller world sizes (per-rank cost x ranks), would pass the budget is
recorded as OOM without being run; one that passes it while running is stopped and recorded.
Every cell runs ``repeats`` times, in rounds over the grid; results are written after every
run, so an interrupted grid keeps what it measured. The cells' warnings are shown once each
(:mod:`lading.bench.warned`), and kept in ``results["warnings"]`` with the cells that raised
them.
"""

from __future__ import annotations

import datetime
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lading.bench.cell import Cell, Settings, run_cell
from lading.bench.data import BenchData, to_ramdisk
from lading.bench.launched import Coordinators
from lading.bench.results import keep_earlier, new_results, write_results
from lading.bench.stats import load_average, merge_repeats
from lading.bench.warned import CellWarnings


@dataclass
class GridOptions:
    """The axes of a grid and the memory budget."""

    strategies: list[str]
    world_sizes: list[int]
    modes: list[str]
    workers: list[int] = field(default_factory=lambda: [0])
    pin_memory: bool = False
    ramdisk: bool = False
    parallel: str = "ddp"
    memory_budget: int | None = None
    variant_world_size: int = 1  # the workers/pin/RAM-disk variants' (launched: all ranks)
    remote: str | None = None  # where strategy "remote" reads the packed store (s3://...)


class GridInterrupted(KeyboardInterrupt):
    """Ctrl-C during a grid: ``runs`` of its ``of`` runs done (their records written, the
    results marked interrupted, where any was done)."""

    def __init__(self, runs: int, of: int) -> None:
        super().__init__(f"after {runs} of {of} runs")
        self.runs, self.of = runs, of


def grid_cells(options: GridOptions) -> list[Cell]:
    """The cells to run, main grid first, in an order that lets OOM be predicted."""
    first_workers = options.workers[0]
    cells = [
        Cell(s, w, m, first_workers, parallel=options.parallel)
        for m in options.modes
        for s in options.strategies
        for w in sorted(options.world_sizes)
    ]
    variants: list[Cell] = []
    for s in options.strategies:
        at = options.variant_world_size
        variants += [Cell(s, at, "loader", w) for w in options.workers[1:]]
        if options.pin_memory:
            variants.append(Cell(s, at, "loader", first_workers, pin_memory=True))
        if options.ramdisk:
            variants.append(Cell(s, at, "loader", first_workers, ramdisk=True))
    return cells + variants


def predict_oom(cell: Cell, done: list[dict[str, Any]], budget: int | None) -> str | None:
    """Why ``cell`` would exceed the budget, judged from smaller runs; None if it would not."""
    if budget is None:
        return None
    same = [
        r
        for r in done
        if (r["strategy"], r["mode"], r["workers"], r["pin_memory"], r["ramdisk"])
        == (cell.strategy, cell.mode, cell.workers, cell.pin_memory, cell.ramdisk)
        and r["world_size"] < cell.world_size
    ]
    if any(r["status"] == "oom" for r in same):
        return "a smaller world size of this strategy was already out of memory"
    measured = [r for r in same if r["status"] == "ok" and r["memory"].get("samples")]
    if not measured:
        return None
    # the monitor's budget counts each shared page once (summed Pss_Anon): predict the same
    per_rank = max(r["memory"]["peak_pss_anon"] / r["world_size"] for r in measured)
    predicted = per_rank * cell.world_size
    if predicted > budget:
        return (
            f"predicted {predicted / 2**20:,.0f} MiB of anonymous memory "
            f"({per_rank / 2**20:,.0f} MiB per rank) > budget {budget / 2**20:,.0f} MiB"
        )
    return None


def run_grid(
    options: GridOptions,
    settings: Settings,
    data: BenchData,
    out: Path,
    corpus_info: dict[str, Any],
    on_cell: Callable[[dict[str, Any]], None] | None = None,
    coordinators: Coordinators | None = None,
) -> dict[str, Any]:
    """Run every cell ``settings.repeats`` times; write ``out/results.json`` as it goes.

    The repeats are rounds over the whole grid (cell 1, 2, ..., n, then 1, 2, ... again), so a
    change in the machine's load hits every strategy alike. A cell that was OOM, n/a or failed
    is not run again. ``results["cells"]`` holds the merged records (:func:`merge_repeats`),
    ``results["load"]`` the load averages before, at each run and after.
    With ``coordinators`` (a launched bench), each cell runs across the launched processes,
    every one of them gets the same records, and only global rank 0 writes and shows progress.
    """
    from tqdm.auto import tqdm

    results = new_results(asdict(options), asdict(settings), corpus_info)
    load: dict[str, Any] = {"cpus": os.cpu_count(), "before": load_average(), "cells": []}
    results["load"] = load
    results["started"] = _now()
    cells = grid_cells(options)
    runs: list[list[dict[str, Any]]] = [[] for _ in cells]
    leader = coordinators is None or coordinators.leader
    if leader:
        kept = keep_earlier(out)
        if kept is not None:
            print(
                f"lading bench: the earlier run's results in {out} moved to {kept} "
                f"(`lading bench report {kept}` renders them again)",
                file=sys.stderr,
                flush=True,
            )
    repeats = max(1, settings.repeats)
    warned = CellWarnings(len(cells))  # the cells' warnings, each shown once
    bar = tqdm(total=len(cells) * repeats, desc="lading bench", unit="run", disable=not leader)
    try:
        for repeat in range(repeats):
            for i, cell in enumerate(cells):
                bar.set_postfix_str(f"{cell.label()}, repeat {repeat + 1}/{repeats}")
                if runs[i] and runs[i][-1]["status"] != "ok":
                    bar.update(1)
                    continue
                record = _one(cell, settings, data, options, results["cells"], coordinators)
                for line in warned.add(cell.label(), record.pop("warnings", [])):
                    if leader:  # above the bar, which is drawn again below
                        bar.write(line, file=sys.stderr)
                if warned.as_json():
                    results["warnings"] = warned.as_json()
                runs[i].append(record)
                load["cells"].append(record.get("load1", load_average()))
                results["cells"] = [merge_repeats(r) for r in runs if r]
                if leader:
                    write_results(results, out)
                if on_cell is not None:
                    on_cell(record)
                bar.update(1)
    except KeyboardInterrupt:
        bar.close()
        done = sum(map(len, runs))
        if leader and done:  # the report says the run was cut short, and where
            results["interrupted"] = {"runs": done, "of": len(cells) * repeats}
            load["after"], results["finished"] = load_average(), _now()
            write_results(results, out)
        raise GridInterrupted(done, len(cells) * repeats) from None
    bar.close()
    if leader:
        for line in warned.summary():
            print(line, file=sys.stderr, flush=True)
    load["after"] = load_average()
    results["finished"] = _now()
    if leader:
        write_results(results, out)
    return results


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _one(
    cell: Cell,
    settings: Settings,
    data: BenchData,
    options: GridOptions,
    done: list[dict[str, Any]],
    coordinators: Coordinators | None,
) -> dict[str, Any]:
    """One run of ``cell``: predicted OOM from the cells done, else run here or launched."""
    reason = predict_oom(cell, done, options.memory_budget)
    if reason is not None:
        return {
            **asdict(cell),
            "status": "oom",
            "reason": reason,
            "predicted": True,
            "memory": {"samples": 0},
        }
    if coordinators is not None:
        return coordinators.run_cell(cell, settings, data, options.memory_budget)
    return _run(cell, settings, data, options.memory_budget)


def _run(cell: Cell, settings: Settings, data: BenchData, budget: int | None) -> dict[str, Any]:
    if not cell.ramdisk:
        return run_cell(cell, settings, data, budget)
    root = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())
    folder = Path(tempfile.mkdtemp(prefix=f"lading-bench-{os.getpid()}-", dir=root))
    try:
        return {
            **run_cell(cell, settings, to_ramdisk(data, cell.strategy, folder), budget),
            "ramdisk_path": str(folder),
        }
    finally:
        shutil.rmtree(folder, ignore_errors=True)
