"""The bench's memory monitor counts each physical page once across a rank and its workers.

DataLoader workers are forked from their rank: until written, the rank's heap is mapped by
every worker too. ``RssAnon`` counts such a page once per process that maps it; ``Pss_Anon``
divides it among them. A budget judged on summed ``RssAnon`` stops a cell that fits.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from lading.bench.cell import Cell
from lading.bench.grid import predict_oom
from lading.bench.monitor import MemoryMonitor
from lading.train.procmem import process_memory

MiB = 2**20

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not os.path.exists("/proc/self/smaps_rollup"),
    reason="reads /proc/<pid>/smaps_rollup (Linux only)",
)


# a fresh interpreter (not a fork of pytest, whose pages it would share with pytest): 64 MiB of
# heap written, then 3 forked children that keep it, or each write 64 MiB of their own ("own");
# "ready" once every child has written, then it waits for a line on stdin
HOLDER = """
import os, sys
size, own = 64 * 2**20, sys.argv[1] == "own"
heap = bytearray(os.urandom(1)) * size
said, told = os.pipe()
pids = []
for _ in range(3):
    pid = os.fork()
    if pid == 0:
        mine = bytearray(b"x") * size if own else None
        os.write(told, b".")
        sys.stdin.readline()
        os._exit(0)
    pids.append(pid)
heard = b""
while len(heard) < 3:
    heard += os.read(said, 3 - len(heard))
print("ready", flush=True)
sys.stdin.readline()
for pid in pids:
    os.waitpid(pid, 0)
"""


def _watch(own: bool) -> tuple[MemoryMonitor, int]:
    """The holder and its three children, sampled once under a budget of the holder's heap
    + 96 MiB. Returns the monitor and the holder's own ``RssAnon`` (interpreter and 64 MiB)."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, "own" if own else "shared"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        rank = process_memory(holder.pid).anon
        monitor = MemoryMonitor([holder.pid], budget=rank + 96 * MiB)
        sample = monitor.sample()
        assert sample.processes == 4, sample
        return monitor, rank
    finally:
        holder.communicate("\n" * 4, timeout=60)


def test_a_heap_the_workers_share_is_counted_once_against_the_budget() -> None:
    # three forked children that only read the rank's 64 MiB: it is there once, not four times
    monitor, rank = _watch(own=False)
    assert not monitor.over_budget
    summary = monitor.summary()
    assert summary["peak_anon"] > 3.5 * rank  # RssAnon counts it in each process
    assert summary["peak_pss_anon"] < 1.25 * rank


def test_workers_with_their_own_heaps_pass_the_same_budget() -> None:
    # the same budget, but each child writes 64 MiB of its own: the cell really holds 4x
    monitor, rank = _watch(own=True)
    assert monitor.summary()["peak_pss_anon"] > rank + 2.5 * 64 * MiB
    assert monitor.over_budget


def test_a_larger_world_is_predicted_from_the_memory_counted_once() -> None:
    # 2 ranks held 1 GiB summed over their workers' RssAnon, 300 MiB counted once
    done = [
        {
            "strategy": "memory",
            "mode": "loader",
            "workers": 2,
            "pin_memory": False,
            "ramdisk": False,
            "world_size": 2,
            "status": "ok",
            "memory": {"samples": 3, "peak_anon": 1024 * MiB, "peak_pss_anon": 300 * MiB},
        }
    ]
    cell = Cell("memory", 4, "loader", 2)
    assert predict_oom(cell, done, 800 * MiB) is None  # 600 MiB counted once fits
    reason = predict_oom(cell, done, 500 * MiB)
    assert reason is not None and "600 MiB" in reason
