"""The study's tables in Markdown, rendered from ``results.json`` (:mod:`lading.bench.results`)
alone, and ``lading bench report DIR``, which re-renders them and the plots.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from lading.bench.data import DOCUMENTS_LIVE_IN, TOKENIZED_IN
from lading.bench.plots import main_cells, write_plots
from lading.bench.results import load_results
from lading.bench.stats import (
    BUSY_CONTENTION,
    CALM_CONTENTION,
    NOISE_FLOOR,
    busy_warning,
    efficiency_text,
    report_rankings,
    spread_of,
)
from lading.bench.synthetic import KEEP_AT_MOST
from lading.bench.words import counted, times

MiB = 2**20


def _value(cell: dict[str, Any] | None) -> str:
    if cell is None:
        return "-"
    if cell["status"] == "oom":
        return "OOM"
    if cell["status"] == "error":
        return "error"
    if cell["status"] == "n/a":
        return "n/a"
    added = cell.get("store_anon")
    store = [f"store +{added / MiB:,.0f}"] if added is not None else []
    rate = spread_of(cell, "samples_per_s")
    assert rate is not None  # an ok cell has a rate
    ranged = f" ({rate.low:,.0f}-{rate.high:,.0f})" if rate.n > 1 else " (1 run)"
    cost = spread_of(cell, "samples_per_cpu_s")
    per_cpu = f", {cost.median:,.0f}/CPU-s" if cost is not None else ""
    return (
        f"{rate.median:,.0f}/s{ranged}{per_cpu}, anon {_memory(cell, 'peak_anon', store)}, "
        f"PSS {_memory(cell, 'peak_pss')}"
    )


def _memory(cell: dict[str, Any], key: str, notes: list[str] | None = None) -> str:
    """A peak of the memory monitor in MiB: the median over the repeats and, in brackets,
    their range, then ``notes`` (a results file without the spread: its one value)."""
    spread = spread_of(cell, key)
    if spread is None or key not in cell.get("spread", {}):
        median, ranged = cell["memory"][key], []
    else:
        median = spread.median
        ranged = [f"{spread.low / MiB:,.0f}-{spread.high / MiB:,.0f}"] if spread.n > 1 else []
    inside = "; ".join(ranged + (notes or []))
    return f"{median / MiB:,.0f} MiB" + (f" ({inside})" if inside else "")


def _pinned(cell: dict[str, Any]) -> str:
    """The pin memory column: a pinned cell that could not run pinned (no CUDA) says so, so no
    row reads "True" where nothing was pinned."""
    if cell["pin_memory"] and cell["status"] == "n/a":
        return "n/a on CPU"
    return str(cell["pin_memory"])


def what_is_timed(results: dict[str, Any]) -> str:
    """What the timed loop includes on this machine: no device copy and no step are claimed
    where there was none (loader mode has no model; a CPU run copies nothing)."""
    modes = {c["mode"] for c in results["cells"]}
    gpu = bool(results["machine"].get("gpus"))
    copy = "copying it to the GPU" if gpu else "no device copy (CPU: the batch stays in RAM)"
    parts = []
    if "loader" in modes:
        parts.append(f"loader mode: waiting for the batch (reading, tokenizing, collating), {copy}")
    if "train" in modes:
        parts.append(f"train mode: waiting for the batch, {copy}, and the model's step")
    return "; ".join(parts)


def _times_run(results: dict[str, Any]) -> str:
    """How many times each cell ran: as asked, or where the run was interrupted (Ctrl-C),
    how far it got and the repeats the cells have."""
    asked, cut = results["settings"]["repeats"], results.get("interrupted")
    if not cut:
        return f"Each cell ran {times(asked)}"
    ran = sorted({len(c.get("repeats") or [None]) for c in results["cells"]})
    ran_text = times(ran[0]) if len(ran) == 1 else f"{ran[0]}-{ran[-1]} times"
    return (
        f"**Interrupted after {cut['runs']} of {counted(cut['of'], 'run')}**: each cell was to "
        f"run {times(asked)}; the cells here ran {ran_text} (a cell not reached is absent)"
    )


def _count(n: Any, noun: str, plural: str | None = None) -> str:
    """:func:`counted` where ``n`` is a count; what a results file holds instead (``?``, a
    missing figure) as it is, before the plural."""
    if isinstance(n, int) and not isinstance(n, bool):
        return counted(n, noun, plural)
    return f"{n} {plural or noun + 's'}"


def _processes(w: int) -> str:
    return counted(w, "process", "processes")


def measurement_lines(results: dict[str, Any]) -> list[str]:
    """How the figures were taken and how sure they are: window, repeats, load, warning."""
    settings, load = results["settings"], results.get("load")
    if load is None:  # schema 1: one run per cell, a window of steps
        return [
            "",
            f"One run per cell, {_count(settings.get('steps'), 'timed step')} after "
            f"{_count(settings.get('warmup'), 'warm-up step')}: no repeats, no spread; rank "
            "nothing on it.",
        ]
    lines = [
        "",
        "## How the figures were taken",
        "",
        f"{_times_run(results)}, in rounds over the whole grid (so a change "
        "of load hits every strategy alike), each time in fresh processes: "
        f"{_count(settings['warmup'], 'untimed warm-up step')}, then a timed window of "
        f"{settings['seconds']:g} s (at least {_count(settings['steps'], 'step')}). Figures are "
        "the median "
        "of the repeats, in brackets their range (min-max) in this run; runs repeated back to "
        "back drift more than one run's repeats spread (benchmarks/RESULTS.md, 'Bench "
        f"stability'): read a median to the +-{NOISE_FLOOR:.0%} the rankings use. "
        "Load average (1 min) on "
        f"{_count(load['cpus'], 'CPU')}: {load['before']:.2f} before, "
        f"{min(load['cells'] or [0]):.2f}-{max(load['cells'] or [0]):.2f} as cells started, "
        f"{load.get('after', float('nan')):.2f} after; run {results.get('started', '?')} to "
        f"{results.get('finished', '?')}.",
    ]
    if settings["repeats"] < 2:
        lines[-1] += " One run per cell: no spread, so nothing is ranked on it."
    warning = busy_warning(load)
    if warning:
        lines += ["", f"**{warning}**"]
    return lines


def ranking_lines(results: dict[str, Any], cells: list[dict[str, Any]]) -> list[str]:
    """The rankings the repeats support, and the pairs within noise, by figure and scope."""
    found = report_rankings(results, cells)
    if not found:
        return []
    lines = [
        "",
        "## Rankings",
        "",
        "A pair is ranked only where its ranges over the repeats, each at least "
        f"+-{NOISE_FLOOR:.0%} around its median, do not overlap; otherwise it is within "
        f"noise, whatever the medians say. Past a load of {CALM_CONTENTION:g} a CPU the band "
        f"widens in proportion to the load; from {BUSY_CONTENTION:g} a CPU nothing is ranked. "
        "Samples per CPU-second (user + system time of the ranks and their workers) say what "
        "the data path costs and hardly move when other work shares the cores; samples/s say "
        "what it delivered here and now.",
        "",
    ]
    lines += [f"- {r.text()}" for r in found if r.decided]
    lines += [f"- {r.text()}" for r in found if not r.decided]
    return lines


def _includes(strategy: str) -> str:
    """The two table cells saying what a strategy includes."""
    return f"{DOCUMENTS_LIVE_IN.get(strategy, '?')} | {TOKENIZED_IN.get(strategy, '?')}"


def _memory_table(cells: list[dict[str, Any]], sizes: list[int]) -> list[str]:
    """Anonymous memory the ranks gained by opening the store (``store_anon``: taken right
    after it opened, before any batch), against world size."""
    loader = [c for c in cells if c["mode"] == "loader" and c["status"] == "ok"] or [
        c for c in cells if c["status"] == "ok"
    ]
    strategies = list(dict.fromkeys(c["strategy"] for c in loader if "store_anon" in c))
    if not strategies or len(sizes) < 2:
        return []
    lines = [
        "",
        "## Memory gained by opening the store, all ranks together (MiB)",
        "",
        "A copy per rank grows with the processes; a store shared through the page cache does not.",
        "",
        "| strategy | " + " | ".join(_processes(w) for w in sizes) + " |",
        "|---|" + "---:|" * len(sizes),
    ]
    for s in strategies:
        row = []
        for w in sizes:
            match = [c for c in loader if (c["strategy"], c["world_size"]) == (s, w)]
            row.append(f"{match[-1]['store_anon'] / MiB:,.1f}" if match else "-")
        lines.append(f"| {s} | " + " | ".join(row) + " |")
    return lines


def batch_line(results: dict[str, Any]) -> str:
    """The batch each step took and, with train cells, the model and its precision."""
    st = results.get("settings", {})
    line = (
        f"Batches: {_count(st.get('batch_size', '?'), 'group')} x "
        f"{_count(st.get('group_size', '?'), 'document')} per rank, max length "
        f"{st.get('max_length', '?')}."
    )
    if "train" in results.get("options", {}).get("modes", []):
        line += f" Model: {st.get('model', '?')}, {st.get('precision', 'fp32')}."
    return line


def render_markdown(results: dict[str, Any]) -> str:
    """The study's layout: per mode, strategies x world sizes; then the variants."""
    cells = main_cells(results)
    sizes = sorted({c["world_size"] for c in cells})
    strategies = list(dict.fromkeys(c["strategy"] for c in cells))
    corpus = results["corpus"]
    docs = corpus.get("documents")  # counted from the packed store, when the grid built one
    documents = counted(docs, "document") if isinstance(docs, int) else "documents not counted"
    lines = [
        "# lading bench",
        "",
        f"Corpus: {documents} ({corpus.get('name', '?')}), "
        f"text {corpus.get('text_bytes', 0) / MiB:,.0f} MiB. Machine: "
        f"{_count(results['machine']['cpus'], 'CPU')}, "
        f"GPUs: {results['machine']['gpus'] or 'none'}, "
        f"torch {results['machine']['torch']}. {batch_line(results)} Samples/s count the whole "
        f"loop, summed over ranks, after warm-up ({what_is_timed(results)}); memory is the peak "
        "over all ranks and DataLoader workers together (anonymous memory: what each copy "
        "costs; PSS: shared pages divided among their users), median and range over the "
        'repeats; "store +" and the documents\' memory table are the anonymous memory the ranks '
        "gained by opening the store (taken right after it opened, before any batch). "
        '"Documents live in" says where a strategy keeps the documents, "tokenized" whether '
        "the loop tokenizes their text (in the collator) or reads token ids stored at build "
        "time: packed and packed-text read the same store, only packed skips the tokenizer.",
    ]
    if any(c["mode"] == "train" for c in cells):
        lines[-1] += (
            " A train cell's peak anonymous memory and PSS leave out the batches each rank "
            f"kept for its replay (at most {KEEP_AT_MOST} each; memory.replay_kept in "
            "results.json)."
        )
    lines += measurement_lines(results)
    lines += [f"\nSkipped: {s} ({why})" for s, why in corpus.get("skipped", {}).items()]
    lines += _launch_lines(corpus.get("launch"), cells)
    lines += _memory_table(cells, sizes)
    for mode in dict.fromkeys(c["mode"] for c in cells):
        lines += [
            "",
            f"## {mode} mode",
            "",
            "| strategy | documents live in | tokenized | "
            + " | ".join(_processes(w) for w in sizes)
            + " |",
            "|---|---|---|" + "---:|" * len(sizes),
        ]
        for s in strategies:
            row = []
            for w in sizes:
                match = [
                    c for c in cells if (c["strategy"], c["world_size"], c["mode"]) == (s, w, mode)
                ]
                row.append(_value(match[-1] if match else None))
            lines.append(f"| {s} | {_includes(s)} | " + " | ".join(row) + " |")
    variants = [c for c in results["cells"] if c not in cells]
    if variants:
        lines += [
            "",
            f"## Workers, pinned memory, RAM disk ({_variant_processes(variants)}, loader mode)",
            "",
            "| strategy | documents live in | tokenized | workers | pin memory | RAM disk "
            "| result |",
            "|---|---|---|---:|---|---|---|",
        ]
        for c in variants:
            lines.append(
                f"| {c['strategy']} | {_includes(c['strategy'])} | {c['workers']} | "
                f"{_pinned(c)} | "
                f"{c['ramdisk']} | {_value(c)} |"
            )
    lines += ranking_lines(results, cells)
    lines += efficiency_markdown(cells)
    lines += warning_lines(results)
    problems = [c for c in results["cells"] if c["status"] != "ok"]
    if problems:
        lines += ["", "## Cells that did not run to the end", ""]
        for c in problems:
            reason = str(c.get("reason", "")).strip().splitlines()
            lines.append(
                f"- {c['strategy']} x{c['world_size']} {c['mode']}: {c['status']} "
                f"({reason[-1] if reason else 'no reason recorded'})"
            )
    return "\n".join(lines) + "\n"


def warning_lines(results: dict[str, Any]) -> list[str]:
    """The warnings the cells raised (``results["warnings"]``), each once, with how many of
    the grid's cells raised it; none without warnings."""
    found = results.get("warnings") or []
    if not found:
        return []
    lines = ["", "## Warnings the cells raised", ""]
    for w in found:
        raised = f"{len(w['cells'])} of {counted(len(results['cells']), 'cell')}"
        text = "\n".join(f"    {line}" for line in str(w["warning"]).splitlines())
        lines += [f"Raised in {raised}:", "", text, ""]
    return lines[:-1]


def _variant_processes(variants: list[dict[str, Any]]) -> str:
    """The world size the variants ran at (1; a launched bench: all its processes)."""
    sizes = sorted({c["world_size"] for c in variants})
    if len(sizes) == 1:
        return _processes(sizes[0])
    return f"{'/'.join(map(str, sizes))} processes"


def _launch_lines(launch: dict[str, Any] | None, cells: list[dict[str, Any]]) -> list[str]:
    """For a launched bench: how many processes on how many nodes, and memory per node."""
    if not launch:
        return []
    lines = [
        "",
        f"Launched by {launch['launcher']}: "
        f"{_count(launch['world_size'], 'process', 'processes')}, "
        f"{launch['processes_per_node']} per node; memory per node is the sum of its ranks' "
        "peaks (an upper bound of the node's peak).",
        "",
        "| cell | nodes | peak anonymous memory per node, MiB |",
        "|---|---:|---|",
    ]
    for cell in cells:
        nodes = cell.get("memory", {}).get("nodes", {})
        per_node = ", ".join(f"{v['peak_anon'] / MiB:,.1f}" for v in nodes.values()) or "n/a"
        label = f"{cell['strategy']} {cell['mode']}"
        lines.append(f"| {label} | {cell.get('nodes', '?')} | {per_node} |")
    return lines


def render(directory: str | os.PathLike[str]) -> str:
    """Re-render ``report.md`` and the plots from ``results.json``; return the Markdown."""
    out = Path(directory)
    results = load_results(out)
    markdown = render_markdown(results)
    (out / "report.md").write_text(markdown)
    write_plots(results, out)
    return markdown


def efficiency_markdown(cells: list[dict[str, Any]]) -> list[str]:
    """The GPU leg's table: per strategy and world size, the efficiency E (step time on
    batches already on the device / step time with the loader), the share of the loop spent
    waiting for batches, and the bytes each step copied to the device (train mode)."""
    rated = [c for c in cells if c["mode"] == "train" and c["status"] in ("ok", "n/a")]
    if not any("efficiency" in c for c in rated):
        return []
    sizes = sorted({c["world_size"] for c in rated})
    lines = [
        "",
        "## Efficiency E (train mode)",
        "",
        "E = step time on the same batches already on the device / step time with the loader "
        "(1.0: loading and copying are hidden; it cannot truly pass 1, so a range covering 1 "
        "is within noise of 1), median and range over the repeats; wait: share of the loop "
        "waiting for batches; H2D: bytes per step that reach the device (on a CPU nothing is "
        "copied: the bytes the step reads).",
        "",
        "| strategy | " + " | ".join(_processes(w) for w in sizes) + " |",
        "|---|" + "---:|" * len(sizes),
    ]
    for strategy in dict.fromkeys(c["strategy"] for c in rated):
        row = []
        for w in sizes:
            match = [c for c in rated if (c["strategy"], c["world_size"]) == (strategy, w)]
            c = match[-1] if match else None
            if c is None or "efficiency" not in c:
                row.append("n/a" if c is not None else "-")
                continue
            e = spread_of(c, "efficiency")
            assert e is not None
            row.append(
                f"E {efficiency_text(e)}, wait {100 * c['wait_share']:.1f}%, "
                f"H2D {c['h2d_bytes_per_step'] / 2**10:,.1f} KiB"
            )
        lines.append(f"| {strategy} | " + " | ".join(row) + " |")
    return lines
