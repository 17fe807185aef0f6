"""The node cache's counters for the whole node: each process publishes its own, a reader sums.

Every process that reads through a node cache (ranks, DataLoader workers) counts its own GETs,
bytes and hits; :func:`publish` writes them to ``stats/<pid>-<cache id>.json`` in the cache
directory (a few hundred bytes, replaced atomically), and :func:`node_totals` sums every such
file: the node's figures, whichever process asks. A process publishes when asked for figures,
when it closes, and from its fill thread at most once a second, so a busy rank that never asks
is still counted (up to a second late). Figures of processes gone stay in the sums: they are
the node's since the cache directory was made.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

SUMMED = ("gets", "bytes_fetched", "bytes_used", "hits", "misses", "unplanned", "wait_s",
          "bytes_bypassed", "retried")  # fmt: skip


def publish(directory: Path, name: str, counters: dict[str, Any]) -> None:
    """Write this process's ``counters`` as ``directory/stats/name.json`` (atomic replace)."""
    folder = directory / "stats"
    with contextlib.suppress(OSError):  # figures are a report, never a reason to fail a read
        folder.mkdir(exist_ok=True)
        part = folder / f".{name}.{os.getpid()}.part"
        part.write_text(json.dumps({k: counters[k] for k in SUMMED}))
        os.replace(part, folder / f"{name}.json")


def node_totals(directory: Path) -> dict[str, float]:
    """The sums of every process's published counters (a file unreadable or damaged is
    skipped: it is a report)."""
    totals: dict[str, float] = dict.fromkeys(SUMMED, 0)
    for path in (directory / "stats").glob("*.json"):
        try:
            found = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        for key in SUMMED:
            value = found.get(key, 0) if isinstance(found, dict) else 0
            if isinstance(value, (int, float)):
                totals[key] += value
    return totals
