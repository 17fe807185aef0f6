"""``lading bench``: the study "Moving Stuff Around", reproducible by anyone on their hardware.

Strategies (``memory``, ``offsets``, ``packed``, ``irds``) x world sizes x loader-only and
training modes, each cell a fresh group of processes, with throughput over the whole loop and
memory over every process. See :func:`run_bench`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from lading.bench.cell import Cell, Settings
from lading.bench.data import STRATEGIES, default_collection, prepare
from lading.bench.grid import GridOptions, run_grid
from lading.bench.report import render

DEFAULT_PASSAGES = 100_000

__all__ = ["STRATEGIES", "Cell", "GridOptions", "Settings", "parse_bytes", "render", "run_bench"]


def parse_bytes(text: str) -> int:
    """``"8G"``, ``"512MiB"``, ``"1.5GB"`` or a plain byte count, as bytes."""
    match = re.fullmatch(r"\s*([0-9.]+)\s*([KMGT]?)(i?B)?\s*", text, re.IGNORECASE)
    if not match:
        raise ValueError(f"cannot read {text!r} as a size; write e.g. 8G, 512M or 1048576")
    scale = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}[match.group(2).upper()]
    return int(float(match.group(1)) * scale)


def run_bench(
    options: GridOptions,
    settings: Settings,
    out: Path,
    *,
    corpus: Path | None = None,
    queries: Path | None = None,
    qrels: Path | None = None,
    negatives: Path | None = None,
    passages: int = DEFAULT_PASSAGES,
    tokenizer: str | None = None,
) -> dict[str, Any]:
    """Prepare the data, run the grid, write results.json, report.md and the plots."""
    import psutil

    from lading.bench.data import cache_dir

    unknown = set(options.strategies) - set(STRATEGIES)
    if unknown:
        raise ValueError(f"unknown strategies {sorted(unknown)}; choose from {sorted(STRATEGIES)}")
    if "irds" in options.strategies:
        try:
            import ir_datasets  # noqa: F401
        except ImportError:
            options.strategies = [s for s in options.strategies if s != "irds"]
    if corpus is None:
        corpus, queries, qrels, negatives = default_collection(passages)
        work = cache_dir() / "bench" / f"synth-passages-{passages}" / "stores"
        name = f"lading synth passages {passages}"
    else:
        if queries is None or qrels is None:
            raise ValueError("with --corpus, give --queries and --qrels too")
        work = out / "stores"
        name = str(corpus)
    assert queries is not None and qrels is not None
    if options.memory_budget is None:
        options.memory_budget = int(psutil.virtual_memory().available)
    data = prepare(corpus, queries, qrels, negatives, work, options.strategies, tokenizer)
    info = {"name": name, "path": str(corpus), "text_bytes": corpus.stat().st_size}
    if data.packed.is_dir():
        from lading.stores import open_store

        store = open_store(data.packed)
        info.update(documents=len(store), text_bytes=store.meta["files"]["text.bin"]["size"])
    results = run_grid(options, settings, data, out, info)
    print(render(out))
    return results
