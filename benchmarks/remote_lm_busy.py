"""Issue 48 item 4 in bench_remote_lm.py: remote = local under a stand-in step on a busy
machine, and every system's time to first batch.

- :class:`Neighbours`: ``--neighbour N`` CPU-bound processes (a Python busy loop each) beside
  the measurements, started after every corpus and peer layout is written and ended (by their
  own ids) after the last measurement, so the 1-minute load average is at its steady state
  while systems are measured; their CPU is nobody's client CPU.
- :class:`Runnable`: the runnable tasks of the machine (``/proc/loadavg``'s fourth field),
  sampled through an epoch: the load during the measurement itself, where the 1-minute
  average lags.
- :func:`render_busy`: the section's table and verdicts (``--busy-report``).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
from types import TracebackType
from typing import Any

from remote_lm_report import _paired, spread

TITLE = "Remote token corpora under a step on a busy machine (issue 48 item 4)"
LOCAL = "lading-local@stored+step"
REMOTE = ("lading@stored+step", "lading@blocks+step")
PEER_NAMES = ("mosaic", "litdata")


class Neighbours:
    """``n`` CPU-bound processes, each ``while True: pass``, for the ``with`` block's time."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.procs: list[subprocess.Popen[bytes]] = []

    @property
    def pids(self) -> tuple[int, ...]:
        return tuple(p.pid for p in self.procs)

    def __enter__(self) -> Neighbours:
        for _ in range(self.n):
            self.procs.append(subprocess.Popen([sys.executable, "-c", "while True: pass"]))
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)
        self.procs.clear()


class Runnable:
    """Mean runnable tasks over samples (``/proc/loadavg``'s ``R/T``; NaN where absent)."""

    def __init__(self) -> None:
        self.samples: list[int] = []

    def sample(self) -> None:
        try:
            with open("/proc/loadavg") as f:
                self.samples.append(int(f.read().split()[3].split("/")[0]))
        except (OSError, IndexError, ValueError):
            pass

    def mean(self) -> float:
        return statistics.fmean(self.samples) if self.samples else float("nan")


def _cell(rows: list[dict[str, Any]], key: str, fmt: str) -> str:
    return spread([r[key] for r in rows if key in r], fmt)


def _table(lm: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| system | tokens/s (epoch) | tokens/s (warm) | first batch s | client CPU s / M "
        "tokens | GETs | load (1 min, start-end) | runnable tasks |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for system in dict.fromkeys(r["system"] for r in lm):
        mine = [r for r in lm if r["system"] == system and "error" not in r]
        if not mine:
            why = next(r["error"] for r in lm if r["system"] == system)
            lines.append(f"| {system} | failed: {why} | | | | | | |")
            continue
        load = f"{_cell(mine, 'load', '{:.1f}')} - {_cell(mine, 'load_end', '{:.1f}')}"
        lines.append(
            f"| {system} | {_cell(mine, 'tokens_s', '{:,.0f}')} | "
            f"{_cell(mine, 'warm_tokens_s', '{:,.0f}')} | {_cell(mine, 'first_batch_s', '{:.2f}')}"
            f" | {_cell(mine, 'cpu_s_per_mtok', '{:.2f}')} | {_cell(mine, 'gets', '{:,.0f}')} | "
            f"{load} | {_cell(mine, 'runnable', '{:.1f}')} |"
        )
    return lines


def _verdicts(lm: list[dict[str, Any]], consume: float) -> list[str]:
    lines = ["", "Within each repeat (median [min-max] over repeats):", ""]
    for remote in REMOTE:
        for key, what in (("tokens_s", "the epoch"), ("warm_tokens_s", "once warm")):
            got = _paired(lm, remote, LOCAL, key)
            if not got:
                continue
            met = "met" if min(got) >= 0.9 else ("not met" if max(got) < 0.9 else "not always")
            lines.append(
                f"- {remote} / {LOCAL}, tokens/s over {what} under the {consume:,.0f} tokens/s "
                f"step: {spread(got, '{:.2f}')} (goal >= 0.9: {met})"
            )
    firsts = {
        s: [r["first_batch_s"] for r in lm if r["system"] == s and "first_batch_s" in r]
        for s in dict.fromkeys(r["system"] for r in lm)
    }
    peers = [v for s, v in firsts.items() if s.split("+")[0] in PEER_NAMES and v]
    if peers:
        best = min(statistics.median(v) for v in peers)
        for system in REMOTE:
            if firsts.get(system):
                mine = statistics.median(firsts[system])
                met = "met" if mine <= 2 * best else "not met"
                lines.append(
                    f"- {system}, time to first batch (median) / the faster peer's: "
                    f"{mine:.2f} / {best:.2f} s = {mine / best:.2f} (goal <= 2: {met})"
                )
    return lines


def render_busy(results: dict[str, Any]) -> tuple[str, str]:
    """(title, body) of the item-4 section from bench_remote_lm.py's results."""
    corpus, args, rows = results["corpus"], results["args"], results["rows"]
    lm = [r for r in rows if not r["system"].startswith("parquet")]
    consume = float(args.get("consume", 1e6))
    latency = 1e3 * float(args.get("latency", 0.03))
    head = (
        f"Corpus: {corpus['origin']}: {corpus['documents']:,} documents, "
        f"{corpus['n_tokens']:,} tokens, on the local S3 ({latency:.0f} ms ± {latency / 3:.0f} "
        f"a request); node cache {float(args['share']):.0%} of the corpus "
        f"({corpus['cap'] / 2**20:.2f} MiB). One shuffled epoch of windows of "
        f"{corpus['seq_len']:,} tokens in batches of {corpus['batch']}, a cold cache each time. "
        f"`+step`: a stand-in step of batch tokens / {consume:,.0f} s a batch (a sleep: the "
        f"GIL free, as under a GPU step; the loaders' read-ahead must hide the fetch). "
        f"{args.get('neighbour', '0')} CPU-bound neighbour processes ran beside every "
        f"measurement (started after the layouts were written, ended after the last run) on "
        f"{results['cores']} cores shared with other sessions. First batch: from the reader's "
        f"construction to its first batch (the corpus's open, first GETs, the first build). "
        f"'warm': after the first {float(args['warm']):.0%} of the epoch. {args['repeats']} "
        f"repeats, systems rotated; median [min-max]; {results['seconds']:.0f} s in all."
    )
    return TITLE, "\n".join([head, "", *_table(lm), *_verdicts(lm, consume)])
