"""How sure the bench is: repeats merged into median and range, rankings only beyond the noise.

Every cell of a grid runs ``repeats`` times, interleaved round by round over the cells so that
drift on a shared machine (another job starting, a cache going cold) hits every strategy alike.
A cell's figure is the median of its repeats and its range the min and max (with 3-5 repeats an
IQR would be the range itself). Two cells are ranked only when their ranges do not overlap,
each range at least +-25% around its median (:data:`NOISE_FLOOR`); otherwise the report says
"within noise". That band holds at the loads it was measured at; past them it widens with the
load per CPU the cells ran under (:func:`noise_floor`), and on a machine that busy
(:data:`BUSY_CONTENTION`) nothing is ranked: "not decided: the machine was busy". The same rule
reads E: a range that covers 1.0 is "within noise of 1", never a gain above the ideal.
"""

from __future__ import annotations

import os
import statistics
from itertools import combinations
from typing import Any, NamedTuple

from lading.bench.words import counted

# the resolution of a ranking: every range is widened to at least this share of its median
# on either side before two are compared. With 3 repeats, two cells drawn from one distribution
# have disjoint min-max ranges 1 time in 10 (2 of the 20 orders of 6 draws), so the ranges
# alone print a false ranking or two per grid. Measured: in 10 quick grids back to back on a
# shared 2-core machine (load 1.9-7.1 from other work), rankings from ranges apart by less
# than this flipped between grids (memory, offsets, packed-text: 1.06-1.5x), none above it.
NOISE_FLOOR = 0.25
# the load per CPU (1-minute load average / CPUs, the highest of a pair's repeats) up to which
# NOISE_FLOOR was measured to hold: 7.1 on 2 CPUs above. Past it the band widens in proportion
# (twice the load per CPU, twice the band), and from BUSY_CONTENTION on nothing is ranked: at
# load 16-49 on 2 CPUs three quick grids decided 12, 5 and 10 rankings, 3 in common, one
# reversed by the next grid, with medians moving 1.2-3.8x between grids (issue 33).
CALM_CONTENTION = 3.5
BUSY_CONTENTION = 8.0
# per-repeat numbers kept in a merged record, and merged into median and range
REPEATED: tuple[str, ...] = (
    "samples_per_s",
    "samples_per_cpu_s",
    "efficiency",
    "wait_share",
    "store_anon",
)
# the memory monitor's peaks (``record["memory"]``) merged the same way, into ``spread``
MEMORY: tuple[str, ...] = ("peak_anon", "peak_pss")


class Spread(NamedTuple):
    """Median and range of one figure over a cell's repeats."""

    median: float
    low: float
    high: float
    n: int

    @classmethod
    def of(cls, values: list[float]) -> Spread:
        if not values:
            raise ValueError("a spread needs at least one value")
        return cls(statistics.median(values), min(values), max(values), len(values))

    def overlaps(self, other: Spread) -> bool:
        """Whether the two ranges share any value (then no order between them is claimed)."""
        return self.low <= other.high and other.low <= self.high

    def covers(self, value: float) -> bool:
        return self.low <= value <= self.high

    def widened(self, floor: float = NOISE_FLOOR) -> Spread:
        """The range, widened where narrower to ``floor`` x median on either side."""
        m = self.median
        return Spread(m, min(self.low, m * (1 - floor)), max(self.high, m * (1 + floor)), self.n)


def noise_floor(contention: float | None) -> float | None:
    """The band a ranking is decided at, for cells that ran at ``contention`` (load average per
    CPU; None: not known): :data:`NOISE_FLOOR` up to :data:`CALM_CONTENTION`, wider in
    proportion past it, None (rank nothing) from :data:`BUSY_CONTENTION` on."""
    if contention is None or contention <= CALM_CONTENTION:
        return NOISE_FLOOR
    if contention >= BUSY_CONTENTION:
        return None
    return NOISE_FLOOR * contention / CALM_CONTENTION


def cell_load(cell: dict[str, Any]) -> float | None:
    """The highest 1-minute load average any repeat of ``cell`` started at (None: unknown)."""
    loads = [float(r["load1"]) for r in cell.get("repeats", []) if "load1" in r]
    if not loads and "load1" in cell:
        loads = [float(cell["load1"])]
    return max(loads) if loads else None


class Ranking(NamedTuple):
    """Two cells of one scope compared on one figure: ``first`` has the higher median;
    ``decided`` only when the ranges, widened to ``band`` around their medians, do not overlap
    (``why`` says otherwise, if not noise). ``load`` and ``cpus``: what the band was set for."""

    scope: str
    first: str
    second: str
    decided: bool
    first_spread: Spread
    second_spread: Spread
    key: str = "samples_per_s"
    why: str = ""
    band: float = NOISE_FLOOR
    load: float | None = None
    cpus: int | None = None

    def text(self) -> str:
        a, b = self.first_spread, self.second_spread
        unit = UNITS.get(self.key, self.key)
        ranges = f"{_range(a)} vs {_range(b)} {unit}"
        at = f"load {self.load:.1f} on {_cpus(self.cpus)}" if self.load is not None else ""
        if not self.decided:
            wide = f" at {at} (band +-{self.band:.0%})" if self.band > NOISE_FLOOR else ""
            verdict = self.why or f"within noise{wide}"
            return f"{self.scope}: {self.first} vs {self.second}: {verdict} ({ranges})"
        verb = "cheaper than" if self.key == "samples_per_cpu_s" else "faster than"
        wide = f"; band +-{self.band:.0%} at {at}" if self.band > NOISE_FLOOR else ""
        return (
            f"{self.scope}: {self.first} {verb} {self.second}, "
            f"{a.median / b.median:,.2f}x by median ({ranges}{wide})"
        )


UNITS = {"samples_per_s": "samples/s", "samples_per_cpu_s": "samples per CPU-second"}


def _cpus(n: Any) -> str:
    """``1 CPU``, ``4 CPUs`` (``None CPUs`` where a file lacks the count)."""
    return counted(n, "CPU") if isinstance(n, int) else f"{n} CPUs"


def _range(s: Spread) -> str:
    return f"{s.low:,.0f}-{s.high:,.0f}"


def merge_repeats(records: list[dict[str, Any]]) -> dict[str, Any]:
    """One record from a cell's repeats: the median repeat's record, with :data:`REPEATED` as
    medians, ``spread`` (figure -> [median, min, max]) and ``repeats`` (each repeat's figures).

    A cell with any repeat not ``ok`` (OOM, error, n/a) is that repeat's record: a cell that
    failed once did not measure what the others did.
    """
    if not records:
        raise ValueError("no repeats to merge")
    failed = [r for r in records if r["status"] != "ok"]
    if failed:
        return {**failed[0], "repeats": [_figures(r) for r in records]}
    ordered = sorted(records, key=lambda r: r["samples_per_s"])
    merged = dict(ordered[(len(ordered) - 1) // 2])  # the lower median: a real repeat
    merged["repeats"] = [_figures(r) for r in records]
    merged["spread"] = {}
    for key in REPEATED:
        values = [float(r[key]) for r in records if key in r]
        if len(values) == len(records):
            spread = Spread.of(values)
            merged[key] = spread.median
            merged["spread"][key] = [spread.median, spread.low, spread.high]
    # the memory figures as medians too: ``merged["memory"]`` is the median-rate repeat's own
    for key in MEMORY:
        if all(key in r["memory"] for r in records):
            spread = Spread.of([float(r["memory"][key]) for r in records])
            merged["spread"][key] = [spread.median, spread.low, spread.high]
    above = [float(r["memory"]["peak_anon"] - r.get("baseline_anon", 0)) for r in records]
    spread = Spread.of(above)
    merged["spread"]["above_baseline"] = [spread.median, spread.low, spread.high]
    return merged


def _figures(record: dict[str, Any]) -> dict[str, Any]:
    keep = (*REPEATED, "status", "window_s", "steps", "load1")
    figures = {k: record[k] for k in keep if k in record}
    if record.get("memory", {}).get("samples"):
        figures.update({k: record["memory"][k] for k in MEMORY if k in record["memory"]})
    return figures


def spread_of(cell: dict[str, Any], key: str) -> Spread | None:
    """The spread of ``key`` over a merged cell's repeats (one repeat: a zero-width range)."""
    if cell.get("status") != "ok":
        return None
    if key in cell.get("spread", {}):
        median, low, high = cell["spread"][key]
        return Spread(median, low, high, len(cell.get("repeats", [])) or 1)
    if key in cell:
        return Spread(float(cell[key]), float(cell[key]), float(cell[key]), 1)
    return None


def rankings(
    cells: list[dict[str, Any]],
    key: str = "samples_per_s",
    free_cpus: float | None = None,
    cpus: int | None = None,
) -> list[Ranking]:
    """Every pair of strategies at one (mode, world size), and every pair of world sizes of one
    (mode, strategy), on ``key``: higher median first, decided only where the ranges, each
    widened to at least :data:`NOISE_FLOOR` around its median, do not overlap, and never where
    a cell ran once (one run has no spread to rank on).

    With ``cpus``, the band is the one for the load per CPU the pair ran at
    (:func:`noise_floor`, from each cell's repeats' load averages): wider on a loaded machine,
    and nothing decided on a busy one. With ``free_cpus`` (CPUs less the load before the
    grid), world sizes are not ranked by samples/s where the larger has more processes than
    free CPUs: what 2 processes deliver on 2 cores that run 3 others' processes measures the
    others' work, not scaling.
    """
    out: list[Ranking] = []
    groups: dict[tuple[str, str], list[tuple[str, int, Spread, float | None]]] = {}
    for c in cells:
        s = spread_of(c, key)
        if s is None:
            continue
        w, load = c["world_size"], cell_load(c)
        processes = counted(w, "process", "processes")
        groups.setdefault((f"{c['mode']}, {processes}", "strategy"), []).append(
            (c["strategy"], w, s, load)
        )
        groups.setdefault((f"{c['mode']}, {c['strategy']}", "size"), []).append(
            (f"{w}p", w, s, load)
        )
    for (scope, kind), members in groups.items():
        for first, second in combinations(members, 2):
            if second[2].median > first[2].median:
                first, second = second, first
            out.append(_ranked(scope, kind, first, second, key, free_cpus, cpus))
    return out


def _ranked(
    scope: str,
    kind: str,
    first: tuple[str, int, Spread, float | None],
    second: tuple[str, int, Spread, float | None],
    key: str,
    free_cpus: float | None,
    cpus: int | None,
) -> Ranking:
    """One pair's ranking: the band for its load, or why it is not decided."""
    (a, wa, sa, la), (b, wb, sb, lb) = first, second
    if min(sa.n, sb.n) < 2:  # one draw: widened to the band, a zero-width range ranked 2x apart
        why = "not ranked: a cell ran once (--repeats 1), no spread"
        return Ranking(scope, a, b, False, sa, sb, key, why)
    loads = [x for x in (la, lb) if x is not None]
    load = max(loads) if loads and cpus else None
    band = noise_floor(load / cpus if load is not None and cpus else None)
    if band is None:
        why = (
            f"not decided: the machine was busy (load {load:.1f} on {_cpus(cpus)}, "
            f"{BUSY_CONTENTION:g} a CPU or more)"
        )
        return Ranking(scope, a, b, False, sa, sb, key, why, NOISE_FLOOR, load, cpus)
    decided, why = not sa.widened(band).overlaps(sb.widened(band)), ""
    free = max(free_cpus, 0.0) if free_cpus is not None else None
    if kind == "size" and key == "samples_per_s" and free is not None and max(wa, wb) > free:
        decided = False
        why = f"not ranked: {counted(max(wa, wb), 'process', 'processes')}, {free:.1f} CPUs free"
    return Ranking(scope, a, b, decided, sa, sb, key, why, band, load, cpus)


def report_rankings(results: dict[str, Any], cells: list[dict[str, Any]]) -> list[Ranking]:
    """The rankings a report prints: by samples/s (world sizes only where the CPUs were free
    before the grid) and by samples per CPU-second, each at the band of the load it ran at."""
    load = results.get("load")
    free = (load["cpus"] - load["before"]) if load else None
    cpus = load.get("cpus") if load else None
    ok = [c for c in cells if c.get("status") == "ok"]
    return rankings(ok, "samples_per_s", free, cpus) + rankings(ok, "samples_per_cpu_s", None, cpus)


def efficiency_text(spread: Spread) -> str:
    """E for the report: median and range, and never a figure above 1 read as a gain."""
    if spread.covers(1.0):
        return f"within noise of 1 ({spread.low:.2f}-{spread.high:.2f})"
    if spread.low > 1.0:
        return f"above 1 in every repeat ({spread.low:.2f}-{spread.high:.2f}): noise, read as 1"
    return f"{spread.median:.2f} ({spread.low:.2f}-{spread.high:.2f})"


def load_average() -> float:
    """The 1-minute load average (0.0 where the platform has none)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return 0.0


def busy_warning(load: dict[str, Any]) -> str | None:
    """A warning when other work shared the machine, from the load averages the grid recorded:
    before the first cell (others' work alone) at half the CPUs or more, or at any cell's
    start above the CPUs (the cell's own processes then waited for a core)."""
    cpus = load.get("cpus") or 1
    before, highest = load.get("before", 0.0), max(load.get("cells", [0.0]) or [0.0])
    reasons = []
    if before >= 0.5 * cpus:
        reasons.append(f"load average {before:.2f} before the first cell on {_cpus(cpus)}")
    if highest > cpus:
        reasons.append(f"up to {highest:.2f} while cells ran")
    if not reasons:
        return None
    return (
        "Warning: the machine was busy (" + "; ".join(reasons) + "). Samples/s are lower and "
        "noisier than on an idle machine; trust only the rankings printed as decided."
    )
