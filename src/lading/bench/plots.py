"""The bench's figures: throughput and the documents' memory against world size, with error bars.

Every figure is titled with the corpus, the grid and the machine, so a PNG passed around still
says what it shows. Memory is drawn as what the documents cost, not as totals: the ~150 MiB each
interpreter with torch holds before any document would swamp a dict's 8 MiB per rank and draw
four parallel lines. Error bars span the repeats (min-max); an axis is logarithmic only where its
values span more than :data:`LOG_ABOVE` times; legends sit outside the axes.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

MiB = 2**20
LOG_ABOVE = 20.0  # max/min ratio past which a linear axis squeezes the small values flat

MARKERS = ("o", "s", "^", "D", "v", "P", "X")
STYLES = ("-", "--", "-.", ":")
Getter = Callable[[dict[str, Any]], "tuple[float, float, float] | None"]


def _spread(key: str, scale: float = 1.0) -> Getter:
    """(median, low, high) of ``key`` over a cell's repeats, divided by ``scale``."""

    def get(cell: dict[str, Any]) -> tuple[float, float, float] | None:
        if key in cell.get("spread", {}):
            m, lo, hi = cell["spread"][key]
        elif key == "above_baseline" and "baseline_anon" in cell:
            m = lo = hi = cell["memory"]["peak_anon"] - cell["baseline_anon"]
        elif key in cell:
            m = lo = hi = cell[key]
        elif key in cell.get("memory", {}):  # a results file from before memory had spreads
            m = lo = hi = cell["memory"][key]
        else:
            return None
        return m / scale, lo / scale, hi / scale

    return get


def title(results: dict[str, Any]) -> str:
    """Corpus, grid and machine in two lines."""
    corpus, options, settings = results["corpus"], results["options"], results["settings"]
    m = results["machine"]
    docs = corpus.get("documents")
    where = f"{len(m['gpus'])} GPU ({m['gpus'][0]})" if m.get("gpus") else "no GPU"
    timing = (
        f"{settings['repeats']} x {settings['seconds']:g} s per cell"
        if "repeats" in settings
        else f"{settings.get('steps')} steps per cell"
    )
    return (
        f"{corpus.get('name', '?')}" + (f", {docs:,} docs" if docs else "") + "\n"
        f"{','.join(options['modes'])} mode; world sizes {options['world_sizes']}; {timing}; "
        f"{m['cpus']} CPUs, {where}"
    )


def _draw(ax: Any, cells: list[dict[str, Any]], get: Getter, modes: bool) -> None:
    """One line per strategy (and mode), with min-max error bars; log only for wide ranges."""
    lows, highs = [], []
    lines = [
        (mode, strategy)
        for mode in dict.fromkeys(c["mode"] for c in cells)
        for strategy in dict.fromkeys(c["strategy"] for c in cells)
    ]
    for n, (mode, strategy) in enumerate(lines):
        points = sorted(
            (c["world_size"], v)
            for c in cells
            if (c["mode"], c["strategy"]) == (mode, strategy) and (v := get(c)) is not None
        )
        if not points:
            continue
        # equal values (every store's 0 MiB) would hide one line under another: each line
        # its own marker and style, nudged sideways by a few hundredths of a process
        dodge = (n - (len(lines) - 1) / 2) * 0.025
        xs = [x + dodge for x, _ in points]
        med = [v[0] for _, v in points]
        err = [[v[0] - v[1] for _, v in points], [v[2] - v[0] for _, v in points]]
        label = f"{strategy} ({mode})" if modes else strategy
        ax.errorbar(
            xs,
            med,
            yerr=err,
            marker=MARKERS[n % len(MARKERS)],
            linestyle=STYLES[n % len(STYLES)],
            capsize=3,
            label=label,
        )
        lows += [v[1] for _, v in points]
        highs += [v[2] for _, v in points]
    positive = [v for v in lows if v > 0]
    if positive and max(highs) / min(positive) > LOG_ABOVE and min(lows) > 0:
        ax.set_yscale("log")
    ax.set_xticks(sorted({c["world_size"] for c in cells}))
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)


FIGURES: tuple[tuple[str, str, Getter], ...] = (
    ("samples_per_s.png", "samples/s, all ranks (median, min-max)", _spread("samples_per_s")),
    (
        "memory_anon.png",
        "anon. memory above interpreters (MiB)",
        _spread("above_baseline", MiB),
    ),
    (
        "memory_store.png",
        "anon. memory gained by opening the store, all ranks (MiB)",
        _spread("store_anon", MiB),
    ),
    ("memory_pss.png", "peak PSS, all processes (MiB, median, min-max)", _spread("peak_pss", MiB)),
)


def _save(fig: Any, path: Path) -> Path:
    """Lay ``fig`` out, write it to ``path`` and close it (pyplot keeps every figure open until
    closed: a grid's plots would pile up in memory)."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def main_cells(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The cells of the grid's main axis (the first worker count, unpinned, no RAM disk): what
    the tables and figures compare across strategies and world sizes."""
    first_workers = results["options"]["workers"][0]
    return [
        c
        for c in results["cells"]
        if c["workers"] == first_workers and not c["pin_memory"] and not c["ramdisk"]
    ]


def write_plots(results: dict[str, Any], out: Path) -> list[Path]:
    """The figures of :data:`FIGURES`, ``summary.png`` and (train mode) ``efficiency.png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    main = main_cells(results)
    cells = [c for c in main if c["status"] == "ok"]
    modes = len({c["mode"] for c in cells}) > 1
    paths = []
    for name, ylabel, get in FIGURES:
        fig, ax = plt.subplots(figsize=(8.0, 4.4), dpi=110)
        _draw(ax, cells, get, modes)
        for c in main:
            if c["status"] == "oom":
                ax.axvline(c["world_size"], color="red", alpha=0.15)
        ax.set_xlabel("processes (world size)")
        ax.set_ylabel(ylabel)
        ax.set_title(title(results), fontsize=8)
        paths.append(_save(fig, out / name))
    paths.append(summary_plot(results, cells, out))
    paths += efficiency_plot(results, cells, out)
    return paths


def summary_plot(results: dict[str, Any], cells: list[dict[str, Any]], out: Path) -> Path:
    """``summary.png``: the study at a glance, throughput beside the documents' memory."""
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11.0, 4.4), dpi=110)
    modes = len({c["mode"] for c in cells}) > 1
    _draw(left, cells, _spread("samples_per_s"), modes)
    legend = left.get_legend()
    if legend is not None:  # one legend for both panels: the right one's
        legend.remove()
    _draw(right, cells, _spread("store_anon", MiB), modes)
    left.set_ylabel("samples/s, all ranks")
    right.set_ylabel("anon. memory gained by opening the store, all ranks (MiB)")
    for ax in (left, right):
        ax.set_xlabel("processes (world size)")
    fig.suptitle(title(results), fontsize=8)
    return _save(fig, out / "summary.png")


def efficiency_plot(results: dict[str, Any], cells: list[dict[str, Any]], out: Path) -> list[Path]:
    """``efficiency.png``: E against world size per strategy, with the line E = 1 (train mode)."""
    rated = [c for c in cells if c["mode"] == "train" and "efficiency" in c]
    if not rated:
        return []
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8.0, 4.4), dpi=110)
    _draw(ax, rated, _spread("efficiency"), False)
    ax.axhline(1.0, color="grey", alpha=0.6, linestyle="--")
    ax.set_xlabel("processes (world size)")
    ax.set_ylabel("E = step time on device batches / real (1: ideal)")
    ax.set_title(title(results), fontsize=8)
    return [_save(fig, out / "efficiency.png")]
