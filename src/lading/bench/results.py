"""The record of a ``lading bench`` run: ``results.json``, its schema, writing and reading it.

``results.json`` holds one record per cell plus the machine, library versions, corpus and every
option, so ``lading bench report DIR`` can re-render the tables and plots from it alone.
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path
from typing import Any

SCHEMA = "lading.bench/2"  # 2: repeats, spreads and load; 1 (one run per cell) still reads
READABLE: tuple[str, ...] = ("lading.bench/1", SCHEMA)
CELL_KEYS: tuple[str, ...] = (
    "strategy",
    "world_size",
    "mode",
    "workers",
    "pin_memory",
    "ramdisk",
    "parallel",
    "status",
    "memory",
)
STATUSES: tuple[str, ...] = ("error", "n/a", "ok", "oom")


def machine() -> dict[str, Any]:
    """Where the numbers were measured (absolute figures only mean something here)."""
    import numpy
    import psutil
    import torch

    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor(),
        "cpus": os.cpu_count(),
        "memory_bytes": psutil.virtual_memory().total,
        "gpus": gpus,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
    }


def new_results(
    options: dict[str, Any], settings: dict[str, Any], corpus: dict[str, Any]
) -> dict[str, Any]:
    from lading import __version__

    return {
        "schema": SCHEMA,
        "lading": __version__,
        "machine": machine(),
        "options": options,
        "settings": settings,
        "corpus": corpus,
        "cells": [],
    }


def keep_earlier(out: Path) -> Path | None:
    """Move an earlier run's ``results.json`` in ``out`` (with its ``report.md`` and plots)
    into ``out/earlier-<its UTC time>/`` before a new run writes there, so that a quick rerun
    into the same folder never replaces hours of measurement (``lading bench report`` renders
    that folder again); the folder it went to, or None where there was none."""
    found = out / "results.json"
    if not found.is_file():
        return None
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(found.stat().st_mtime))
    kept, n = out / f"earlier-{stamp}", 1
    while kept.exists():
        n += 1
        kept = out / f"earlier-{stamp}-{n}"
    kept.mkdir()
    for path in [found, out / "report.md", *sorted(out.glob("*.png"))]:
        if path.is_file():
            path.replace(kept / path.name)
    return kept


def write_results(results: dict[str, Any], out: Path) -> Path:
    """Write ``out/results.json`` atomically."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "results.json"
    tmp = path.with_name(f"results.json.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(results, indent=2, default=str))
    tmp.replace(path)
    return path


def validate(results: Any) -> dict[str, Any]:
    """``results`` if it follows the schema; else ValueError saying what is wrong."""
    if not isinstance(results, dict) or results.get("schema") not in READABLE:
        found = results.get("schema") if isinstance(results, dict) else type(results).__name__
        raise ValueError(f"not a lading bench result (schema {found!r}, expected {SCHEMA!r})")
    for key in ("machine", "options", "settings", "corpus", "cells"):
        if key not in results:
            raise ValueError(f"results lack {key!r}")
    for i, cell in enumerate(results["cells"]):
        missing = [k for k in CELL_KEYS if k not in cell]
        if missing:
            raise ValueError(f"cell {i} lacks {missing}")
        if cell["status"] not in STATUSES:
            raise ValueError(f"cell {i} has status {cell['status']!r}; expected {STATUSES}")
        if cell["status"] == "ok" and not cell.get("samples_per_s", 0) > 0:
            raise ValueError(f"cell {i} is ok but has no positive samples_per_s")
    return results


def load_results(directory: str | os.PathLike[str]) -> dict[str, Any]:
    path = Path(directory) / "results.json"
    if not path.is_file():
        raise FileNotFoundError(f"no results.json in {directory}; run `lading bench --out DIR`")
    try:
        found = json.loads(path.read_text())
    except ValueError as e:
        raise ValueError(
            f"{path} is not valid JSON ({e}): cut short or edited; run the bench again into "
            "another --out, or restore the file"
        ) from None
    return validate(found)
