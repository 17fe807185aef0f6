"""The grid of cells, run one after another, with out-of-memory predicted before it happens.

The main grid is strategies x world sizes x modes; a second grid varies DataLoader workers,
pinned memory and a RAM disk at world size 1. A cell whose anonymous memory, extrapolated from
the same strategy at smaller world sizes (per-rank cost x ranks), would pass the budget is
recorded as OOM without being run; one that passes it while running is stopped and recorded.
Results are written after every cell, so an interrupted grid keeps what it measured.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lading.bench.cell import Cell, Settings, run_cell
from lading.bench.data import BenchData, to_ramdisk
from lading.bench.launched import Coordinators
from lading.bench.report import new_results, write_results


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
    per_rank = max(r["memory"]["peak_anon"] / r["world_size"] for r in measured)
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
    """Run every cell; write ``out/results.json`` as it goes; return the results.

    With ``coordinators`` (a launched bench), each cell runs across the launched processes,
    every one of them gets the same records, and only global rank 0 writes and shows progress.
    """
    from tqdm.auto import tqdm

    results = new_results(asdict(options), asdict(settings), corpus_info)
    cells = grid_cells(options)
    leader = coordinators is None or coordinators.leader
    bar = tqdm(cells, desc="lading bench", unit="cell", disable=not leader)
    for cell in bar:
        bar.set_postfix_str(cell.label())
        reason = predict_oom(cell, results["cells"], options.memory_budget)
        if reason is not None:
            record = {
                **asdict(cell),
                "status": "oom",
                "reason": reason,
                "predicted": True,
                "memory": {"samples": 0},
            }
        elif coordinators is not None:
            record = coordinators.run_cell(cell, settings, data, options.memory_budget)
        else:
            record = _run(cell, settings, data, options.memory_budget)
        results["cells"].append(record)
        if leader:
            write_results(results, out)
        if on_cell is not None:
            on_cell(record)
    return results


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
