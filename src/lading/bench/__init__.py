"""``lading bench``: the study "Moving Stuff Around", reproducible by anyone on their hardware.

Strategies (``memory``, ``offsets``, ``packed``, ``packed-text``, ``irds``, and the peers
``hf``, ``mds``, ``litdata`` of :mod:`lading.bench.peers`) x world sizes x
loader-only and training modes, each cell a fresh group of processes, with throughput over the
whole loop and memory over every process. See :func:`run_bench`. Two grids come ready:
:data:`QUICK` (``lading bench``: minutes on a laptop, still showing that the dict's memory grows
with the world size while the others' does not) and :data:`FULL` (``lading bench --full``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from lading.bench.cell import Cell, Settings
from lading.bench.data import (
    DOCUMENTS_LIVE_IN,
    STRATEGIES,
    TOKENIZED_IN,
    BenchData,
    default_collection,
    prepare,
)
from lading.bench.grid import GridInterrupted, GridOptions, run_grid
from lading.bench.peers import PEER_STRATEGIES, unavailable
from lading.bench.report import render

DEFAULT_PASSAGES = 100_000


@dataclass(frozen=True)
class Preset:
    """A ready grid: what ``lading bench`` runs unless an option says otherwise."""

    passages: int
    strategies: tuple[str, ...]
    world_sizes: tuple[int, ...] | None  # None: 1, 2, 4 on CPU; 1, 2, 4, 8 up to the GPUs
    modes: tuple[str, ...]
    seconds: float  # each repeat's timed window, after the warm-up
    repeats: int
    steps: int  # at least this many timed steps per window
    warmup: int


# loader mode, world sizes 1 and 2: 8 cells x 3 repeats of a 0.5 s window. Starting a run's
# processes costs more than its window (torch's import alone is ~2 s of CPU per process):
# 81-178 s per grid measured on 2 shared CPU cores at load 1.9-7.1 (2026-11-23)
QUICK = Preset(
    20_000, ("memory", "offsets", "packed", "packed-text"), (1, 2), ("loader",), 0.5, 3, 5, 3
)
# the study's grid: every strategy, loader and training, 3 repeats of a 2 s window per cell
FULL = Preset(
    DEFAULT_PASSAGES,
    # irds and the peers (hf, mds, litdata): where installed, else a skipped column with the reason
    ("memory", "offsets", "packed", "packed-text", "irds", "hf", "mds", "litdata"),
    None,
    ("loader", "train"),
    2.0,
    3,
    5,
    5,
)

__all__ = [
    "DOCUMENTS_LIVE_IN",
    "FULL",
    "QUICK",
    "STRATEGIES",
    "TOKENIZED_IN",
    "Cell",
    "GridOptions",
    "Preset",
    "Settings",
    "parse_bytes",
    "render",
    "run_bench",
]


def parse_bytes(text: str, what: str = "size") -> int:
    """``"8G"``, ``"512MiB"``, ``"1.5GB"`` or a plain byte count, as bytes: the node cache's
    reader of sizes (:func:`lading.remote.settings.parse_bytes`), so ``--memory-budget`` and
    ``cache_bytes=`` take the same forms; a ValueError names ``what`` and the forms."""
    from lading.remote.settings import parse_bytes as read_size

    return read_size(text, what)


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

    unknown = set(options.strategies) - set(STRATEGIES)
    if unknown:
        raise ValueError(f"unknown strategies {sorted(unknown)}; choose from {sorted(STRATEGIES)}")
    skipped: dict[str, str] = {}  # strategy -> why it cannot run here: said, never a failure
    if "irds" in options.strategies:
        try:
            import ir_datasets  # noqa: F401
        except ImportError as e:
            skipped["irds"] = f"ir_datasets is not installed ({e}); pip install 'lading[irds]'"
    for peer in PEER_STRATEGIES:
        why = unavailable(peer) if peer in options.strategies else None
        if why is not None:
            print(f"lading bench: strategy {peer} skipped: {why}", file=sys.stderr)
            skipped[peer] = why
    options.strategies = [s for s in options.strategies if s not in skipped]
    from lading.bench.launched import Coordinators, launched_world

    launched = launched_world()
    coordinators: Coordinators | None = None
    if launched is not None:
        if options.ramdisk:
            raise ValueError(
                "--ramdisk copies the stores per process; across nodes it is not supported. "
                "Run it on one machine, without torchrun"
            )
        options.variant_world_size = launched.world_size
        if launched.is_builder():  # first, alone on this node (or in all): the others wait
            _collection(corpus, queries, qrels, negatives, passages, out, options, tokenizer)
        coordinators = Coordinators.join(launched)  # returns when every process has joined
        coordinators.check_world_sizes(options.world_sizes)
    collection = _collection(corpus, queries, qrels, negatives, passages, out, options, tokenizer)
    data, name = collection
    if data.negatives is not None and settings.sampling == "random":
        settings = replace(settings, sampling="run")  # negatives given are negatives used
    corpus = data.corpus
    if options.memory_budget is None:
        options.memory_budget = int(psutil.virtual_memory().available)
    info: dict[str, Any] = {"name": name, "path": str(corpus), "text_bytes": corpus.stat().st_size}
    if skipped:
        info["skipped"] = skipped  # the report names each skipped strategy with its reason
    if data.packed.is_dir():
        from lading.stores import open_store
        from lading.stores.layout import column_bytes

        store = open_store(data.packed)
        info.update(documents=len(store), text_bytes=column_bytes(store.meta, "text"))
    if launched is not None:
        info["launch"] = {
            "launcher": launched.launcher,
            "world_size": launched.world_size,
            "processes_per_node": launched.local_world_size,
        }
    try:
        results = run_grid(options, settings, data, out, info, coordinators=coordinators)
    except GridInterrupted as cut:  # the report of what was measured, marked interrupted
        if cut.runs and (coordinators is None or coordinators.leader):
            render(out)
        raise
    finally:
        if coordinators is not None:
            coordinators.leave()
    if coordinators is None or coordinators.leader:
        print(render(out))
    return results


def say(line: str) -> None:
    """A progress line on stderr, at once: the grid's bar comes only after the preparation."""
    print(line, file=sys.stderr, flush=True)


def _collection(
    corpus: Path | None,
    queries: Path | None,
    qrels: Path | None,
    negatives: Path | None,
    passages: int,
    out: Path,
    options: GridOptions,
    tokenizer: str | None,
) -> tuple[BenchData, str]:
    """The bench's data, made on first use (the default synthetic collection if no corpus)."""
    from lading.bench.data import cache_dir

    if corpus is None:
        say(f"lading bench: preparing the synthetic collection ({passages:,} passages, cached)")
        corpus, queries, qrels, negatives = default_collection(passages)
        work = cache_dir() / "bench" / f"synth-passages-{passages}" / "stores"
        if tokenizer is not None:  # the cached stores hold the trained tokenizer's ids
            work = work.with_name(f"stores-{_file_key(tokenizer)}")
        name = f"lading synth passages {passages}"
    else:
        if queries is None or qrels is None:
            raise ValueError("with --corpus, give --queries and --qrels too")
        work = out / "stores"
        name = str(corpus)
    assert queries is not None and qrels is not None
    say(f"lading bench: preparing the stores of {', '.join(options.strategies)} in {work}")
    data = prepare(
        corpus, queries, qrels, negatives, work, options.strategies, tokenizer, options.remote
    )
    return data, name


def _file_key(path: str) -> str:
    """A short key of a tokenizer's bytes: stores of another tokenizer go to another folder."""
    import hashlib

    file = Path(path)
    if file.is_dir():
        file = file / "tokenizer.json"
    return hashlib.sha256(file.read_bytes()).hexdigest()[:12]
