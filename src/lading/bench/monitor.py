"""Samples the memory of every process of a cell (ranks and their DataLoader workers) over time.

A background thread reads /proc for each rank and all its descendants every ``interval``
seconds, keeps per-process peaks and the per-sample totals, and can stop the cell when the
total anonymous memory passes a budget: an out-of-memory run is recorded, not suffered.

The budget is judged on summed ``Pss_Anon`` (``pss_anon``): a process forked from a rank (a
DataLoader worker under the fork start method) maps the rank's heap until it writes to it, and
``RssAnon`` (``anon``, still reported) counts such a page once in every process that maps it,
so its sum can pass a budget the memory fits. ``Pss_Anon`` divides each shared page among the
processes that map it, so the sum counts every physical page once. The bench spawns its ranks
and their workers share nothing: there the two sums agree.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psutil

from lading.train.procmem import Memory, process_memory

FIELDS: tuple[str, ...] = ("rss", "pss", "uss", "anon", "pss_anon")


@dataclass
class Sample:
    """Totals over all processes at one moment, in bytes."""

    t: float
    processes: int
    rss: int
    pss: int
    uss: int
    anon: int
    pss_anon: int


@dataclass
class MemoryMonitor:
    """Watches ``roots`` and their descendants until :meth:`stop`.

    Args:
        roots: pids of the cell's rank processes.
        budget: stop the cell when the anonymous memory of all its processes, each shared page
            counted once (summed ``pss_anon``), exceeds this many bytes.
        on_budget: called once, from the monitor thread, when that happens.
        interval: seconds between samples.
    """

    roots: list[int]
    budget: int | None = None
    on_budget: Callable[[], None] | None = None
    interval: float = 0.2
    samples: list[Sample] = field(default_factory=list)
    peaks: dict[int, dict[str, int]] = field(default_factory=dict)
    roles: dict[int, str] = field(default_factory=dict)
    over_budget: bool = False

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lading-memory", daemon=True)
        self._started = time.perf_counter()

    def start(self) -> MemoryMonitor:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _processes(self) -> list[tuple[int, str]]:
        found = []
        for rank, pid in enumerate(self.roots):
            found.append((pid, f"rank{rank}"))
            try:
                children = psutil.Process(pid).children(recursive=True)
            except psutil.Error:
                continue
            found += [(child.pid, f"rank{rank}-worker{i}") for i, child in enumerate(children)]
        return found

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def sample(self) -> Sample:
        """Read every process now (also called by tests)."""
        readings: list[Memory] = []
        for pid, role in self._processes():
            memory = process_memory(pid)
            if memory.rss == 0:
                continue  # exited between listing and reading
            readings.append(memory)
            self.roles.setdefault(pid, role)
            peak = self.peaks.setdefault(pid, dict.fromkeys(FIELDS, 0))
            for key in FIELDS:
                peak[key] = max(peak[key], getattr(memory, key))
        sample = Sample(
            time.perf_counter() - self._started,
            len(readings),
            *(sum(getattr(m, key) for m in readings) for key in FIELDS),
        )
        self.samples.append(sample)
        if self.budget is not None and sample.pss_anon > self.budget and not self.over_budget:
            self.over_budget = True
            if self.on_budget is not None:
                self.on_budget()
        return sample

    def summary(self) -> dict[str, Any]:
        """Peak and steady (mean of the second half of the samples) totals, and per process."""
        if not self.samples:
            return {"samples": 0}
        half = self.samples[len(self.samples) // 2 :]
        out: dict[str, Any] = {
            "samples": len(self.samples),
            "processes": max(s.processes for s in self.samples),
        }
        for key in FIELDS:
            out[f"peak_{key}"] = max(getattr(s, key) for s in self.samples)
            out[f"steady_{key}"] = int(sum(getattr(s, key) for s in half) / len(half))
        out["per_process"] = [
            {"pid": pid, "role": self.roles.get(pid, "?"), **peak}
            for pid, peak in sorted(self.peaks.items())
        ]
        return out
