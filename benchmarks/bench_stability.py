"""Do `lading bench`'s printed conclusions hold? The quick grid N times back to back, checked.

Issue 25's proof: run the quick grid (``lading bench``) ``--runs`` times (default 5) one after
another on one machine, then check that

1. every ranking a run's report prints as decided (ranges apart) holds in every run: the same
   order of medians, decided there or not; and
2. every median a run prints lies inside the range (min-max over repeats) that every other run
   reports for the same cell ("strict"), or at least inside the hull of the other runs' ranges.

Prints each check's failures and a verdict. Results go to ``--out`` (default
bench-out/stability, ignored by git); nothing tracked is written unless ``--write`` (a section
in benchmarks/RESULTS.md). Extra arguments after ``--`` go to every ``lading bench`` run.

``--busy N`` (issue 33's proof) runs the grids beside N busy processes this script starts
(each spins a core, at this script's niceness) and stops at the end: the load the report's
band widens with. Its verdict is check 1 alone, every decided ranking held, and that no ranking
was decided both ways; the medians move with the load, and their drift is reported.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import HERE, add_write_flag, write_section
from lading.bench.stats import NOISE_FLOOR, Ranking, Spread, rankings, report_rankings, spread_of

Key = tuple[str, int, str]


def cells_of(results: dict[str, Any]) -> dict[Key, dict[str, Any]]:
    """The ok cells of the main grid, by (strategy, world size, mode)."""
    return {
        (c["strategy"], c["world_size"], c["mode"]): c
        for c in results["cells"]
        if c["status"] == "ok" and not c["pin_memory"] and not c["ramdisk"]
    }


def named_medians(results: dict[str, Any]) -> dict[tuple[str, str, str], float]:
    """(key, scope, name) -> median samples/s, named as the rankings name them."""
    out = {}
    for r in report_rankings(results, list(cells_of(results).values())):
        out[(r.key, r.scope, r.first)] = r.first_spread.median
        out[(r.key, r.scope, r.second)] = r.second_spread.median
    return out


Ranker = Callable[[dict[str, Any], list[dict[str, Any]]], list[Ranking]]


def fixed_band_rankings(results: dict[str, Any], cells: list[dict[str, Any]]) -> list[Ranking]:
    """The rankings as the report printed them before issue 33: +-25% at any load."""
    load = results.get("load")
    free = (load["cpus"] - load["before"]) if load else None
    ok = [c for c in cells if c.get("status") == "ok"]
    return rankings(ok, "samples_per_s", free) + rankings(ok, "samples_per_cpu_s")


def check_rankings(
    runs: list[dict[str, Any]], ranked: Ranker = report_rankings
) -> tuple[int, list[str]]:
    """(decided rankings printed, those contradicted by another run's medians)."""
    medians = [named_medians(x) for x in runs]
    printed, failures = 0, []
    for i, run in enumerate(runs):
        for r in ranked(run, list(cells_of(run).values())):
            if not r.decided:
                continue
            printed += 1
            for j, other in enumerate(medians):
                a = other.get((r.key, r.scope, r.first))
                b = other.get((r.key, r.scope, r.second))
                if a is None or b is None:
                    failures.append(f"run {j + 1} lacks {r.scope}: {r.first} or {r.second}")
                elif not a > b:
                    failures.append(
                        f"run {i + 1} prints {r.key} {r.scope}: {r.first} > {r.second}; "
                        f"run {j + 1} has medians {a:,.0f} vs {b:,.0f}"
                    )
    return printed, failures


def check_medians(
    runs: list[dict[str, Any]], figure: str = "samples_per_s"
) -> tuple[int, list[str], list[str], list[str]]:
    """(medians of ``figure`` checked, outside another run's repeat range, outside the hull of
    the other runs' ranges, outside another run's range widened to the report's resolution
    :data:`~lading.bench.stats.NOISE_FLOOR`, the band its rankings are decided at)."""
    cells = [cells_of(r) for r in runs]
    checked: int = 0
    strict: list[str] = []
    hull: list[str] = []
    banded: list[str] = []
    for i, mine in enumerate(cells):
        for key, cell in mine.items():
            median = spread_of(cell, figure)
            others = [spread_of(c[key], figure) for j, c in enumerate(cells) if j != i and key in c]
            spreads = [s for s in others if s is not None]
            if median is None or not spreads:
                continue
            checked += 1
            label = f"run {i + 1} {key[0]} x{key[1]} {key[2]}: {figure} {median.median:,.0f}"
            outside = [s for s in spreads if not s.covers(median.median)]
            if outside:
                strict.append(f"{label} outside {len(outside)} other run(s)' ranges")
            joined = Spread(0, min(s.low for s in spreads), max(s.high for s in spreads), 0)
            if not joined.covers(median.median):
                hull.append(f"{label} outside all others ({joined.low:,.0f}-{joined.high:,.0f})")
            wide = [s for s in spreads if not s.widened().covers(median.median)]
            if wide:
                banded.append(f"{label} outside {len(wide)} other run(s)' +-{NOISE_FLOOR:.0%}")
    return checked, strict, hull, banded


def drift(runs: list[dict[str, Any]], figure: str = "samples_per_s") -> list[float]:
    """Per cell, how far apart the runs' medians lie: (highest - lowest) / lowest."""
    cells = [cells_of(r) for r in runs]
    out = []
    for key in set.intersection(*(set(c) for c in cells)):
        medians = [s.median for c in cells if (s := spread_of(c[key], figure)) is not None]
        if len(medians) > 1 and min(medians) > 0:
            out.append(max(medians) / min(medians) - 1)
    return sorted(out)


def _seconds(results: dict[str, Any]) -> float:
    """A finished grid's wall time from its timestamps (its preparation not included)."""
    from datetime import datetime

    started, finished = (datetime.fromisoformat(results[k]) for k in ("started", "finished"))
    return (finished - started).total_seconds()


def reversed_rankings(runs: list[dict[str, Any]]) -> tuple[list[int], int, list[str]]:
    """(decided rankings per run, decided in every run, pairs decided one way in one run and
    the other way in another)."""
    decided: list[set[tuple[str, str, str, str]]] = []
    for run in runs:
        found = report_rankings(run, list(cells_of(run).values()))
        decided.append({(r.key, r.scope, r.first, r.second) for r in found if r.decided})
    union = set().union(*decided) if decided else set()
    flips = sorted(f"{k} {scope}: {a} > {b} and {b} > {a}" for k, scope, a, b in union
                   if (k, scope, b, a) in union and a < b)  # fmt: skip
    common = len(set.intersection(*decided)) if decided else 0
    return [len(d) for d in decided], common, flips


def run_grid(command: list[str], env: dict[str, str]) -> None:
    """One ``lading bench`` in a session of its own: stopped with all its rank processes if
    this script is."""
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, start_new_session=True)
    try:
        if proc.wait() != 0:
            raise subprocess.CalledProcessError(proc.returncode, command)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)  # its session: the bench and its ranks
            proc.wait()


def start_busy(n: int) -> list[subprocess.Popen[bytes]]:
    """``n`` processes that each spin a core until stopped: an artificial load."""
    spin = [sys.executable, "-c", "while True: pass"]
    return [subprocess.Popen(spin) for _ in range(n)]


def stop_busy(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:  # ours, by pid
        proc.terminate()
    for proc in procs:
        proc.wait(timeout=30)


def load_line(results: dict[str, Any]) -> str:
    load = results["load"]
    cells = load.get("cells") or [0.0]
    return (
        f"{load['before']:.1f} before, {min(cells):.1f}-{max(cells):.1f} as cells started, "
        f"{load.get('after', float('nan')):.1f} after"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--busy", type=int, default=0, help="busy processes started beside the grids (0: none)"
    )
    parser.add_argument("--out", type=Path, default=HERE.parent / "bench-out" / "stability")
    parser.add_argument(
        "--check", action="store_true", help="only check the runs already in --out (run-*/)"
    )
    add_write_flag(parser)
    parser.add_argument("bench_args", nargs="*", help="after --: passed to lading bench")
    args = parser.parse_args()
    if args.busy and args.out == HERE.parent / "bench-out" / "stability":
        args.out = args.out.with_name("stability-busy")  # apart from the unloaded runs
    env = {**os.environ, "PYTHONPATH": str(HERE.parent / "src")}
    runs, seconds = [], []
    if args.check:
        found = sorted(args.out.glob("run-*/results.json"), key=lambda p: int(p.parent.name[4:]))
        runs = [json.loads(p.read_text()) for p in found]
        seconds = [_seconds(r) for r in runs]
        args.runs = len(runs)
    # `kill PID` (and Ctrl-C, which a background job may ignore) stops the busy processes too
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    busy = start_busy(args.busy) if args.busy and not args.check else []
    try:
        for i in range(0 if args.check else args.runs):
            out = args.out / f"run-{i + 1}"
            started = time.monotonic()
            command = [sys.executable, "-m", "lading", "bench", "--out", str(out)]
            run_grid([*command, *args.bench_args], env)
            seconds.append(time.monotonic() - started)
            runs.append(json.loads((out / "results.json").read_text()))
            print(f"run {i + 1}: {seconds[-1]:.0f} s, load {load_line(runs[-1])}", flush=True)
    finally:
        stop_busy(busy)
    if args.busy:
        report_busy(args, runs, seconds)
        return
    printed, contradicted = check_rankings(runs)
    lines = [
        f"{args.runs} runs of `lading bench {' '.join(args.bench_args)}`, "
        f"{min(seconds):.0f}-{max(seconds):.0f} s each, started {runs[0].get('started')}, "
        "load average before each: " + ", ".join(f"{r['load']['before']:.2f}" for r in runs),
        f"- rankings printed as decided: {printed}; contradicted by another run's medians: "
        f"{len(contradicted)}",
    ]
    banded: list[str] = []
    for figure in ("samples_per_s", "samples_per_cpu_s"):
        checked, outside, hull, wide = check_medians(runs, figure)
        banded += wide
        moved = drift(runs, figure)
        lines.append(
            f"- {figure} medians inside every other run's +-{NOISE_FLOOR:.0%} band (the "
            f"resolution the report ranks at): {checked - len(wide)} of {checked}; inside every "
            f"other run's repeat range: {checked - len(outside)} of {checked}; inside the hull "
            f"of the other runs' repeat ranges: {checked - len(hull)} of {checked}; the runs' "
            f"medians of one cell lie {statistics.median(moved):.1%} apart at the median, "
            f"{max(moved):.1%} at most (a run's repeats spread less than runs drift)"
        )
    lines += [f"  - {line}" for line in contradicted + banded]
    ok = not contradicted and not banded
    lines.append(
        "Verdict: "
        + (
            "PASS: every printed ranking held, and every median within the report's resolution"
            if ok
            else "FAIL: see above"
        )
    )
    text = "\n".join(lines)
    print(text)
    again = f"python benchmarks/bench_stability.py --runs {args.runs}"
    write_section(HERE / "RESULTS.md", "Bench stability", text, again, write=args.write)
    sys.exit(0 if ok else 1)


def report_busy(args: argparse.Namespace, runs: list[dict[str, Any]], seconds: list[float]) -> None:
    """Issue 33's verdict: no decided ranking contradicted or reversed at the load measured."""
    printed, contradicted = check_rankings(runs)
    per_run, common, flips = reversed_rankings(runs)
    cpus, settings = runs[0]["load"]["cpus"], runs[0]["settings"]
    found = [r for run in runs for r in report_rankings(run, list(cells_of(run).values()))]
    bands = [r.band for r in found if r.load is not None and "busy" not in r.why]
    busy_pairs = sum("the machine was busy" in r.why for r in found)
    lines = [
        f"{len(runs)} runs of `{' '.join(['lading bench', *args.bench_args])}` beside {args.busy} "
        "busy processes the script started (each spinning a core; on "
        f"{runs[0]['corpus'].get('documents', 0):,} passages, every cell "
        f"{settings['repeats']} repeats of a {settings['seconds']:g} s window after "
        f"{settings['warmup']} warm-up steps), {min(seconds):.0f}-"
        f"{max(seconds):.0f} s each, started {runs[0].get('started')}, on {cpus} CPUs shared "
        "with other work; load average (1 min) per run:",
        *[f"  - run {i + 1}: {load_line(r)}" for i, r in enumerate(runs)],
        f"- rankings printed as decided per run: {', '.join(map(str, per_run))}; decided in "
        f"every run: {common}; decided one way in a run and the other way in another: "
        f"{len(flips)}; contradicted by another run's medians: {len(contradicted)} (of "
        f"{printed} printed); bands the pairs were read at: +-{min(bands):.0%} to "
        f"+-{max(bands):.0%}; pairs not decided because the machine was busy: {busy_pairs}",
    ]
    for figure in ("samples_per_s", "samples_per_cpu_s"):
        moved = drift(runs, figure)
        lines.append(
            f"- {figure}: the runs' medians of one cell lie {statistics.median(moved):.0%} "
            f"apart at the median, {max(moved):.0%} at most"
        )
    lines += [f"  - {line}" for line in flips + contradicted]
    before, wrong = check_rankings(runs, fixed_band_rankings)
    lines.append(
        f"- the same runs read at the fixed +-{NOISE_FLOOR:.0%} band (the rule before issue 33): "
        f"{before} rankings printed as decided, {len(wrong)} contradicted by another run"
    )
    lines += [f"  - {line}" for line in wrong]
    ok = not flips and not contradicted
    verdict = "PASS: no decided ranking reversed or contradicted" if ok else "FAIL: see above"
    lines.append(f"Verdict: {verdict}")
    text = "\n".join(lines)
    print(text)
    again = f"nice -n 19 python benchmarks/bench_stability.py --runs {len(runs)} --busy {args.busy}"
    write_section(HERE / "RESULTS.md", "Bench stability under load", text, again, write=args.write)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
