"""The optional C helper for lookups by id (``lading.disk._native``), or None without it.

What it does: a batch of ids -> rows (the three id indexes: dense, sorted-int, hash) and rows
-> ``str`` of a ragged UTF-8 column, each in one call that walks the batch in phases and
prefetches, so the batch's cache misses overlap (source: ``_native.c``). The numpy route in
:mod:`lading.stores.index`, :mod:`lading.stores.hashindex` and :mod:`lading.disk.ragged` gives
the same answers; at 64 ids a batch it pays numpy's fixed cost per call a dozen times, and the
helper is what brings ``get_many`` to the speed of a Python dict (benchmarks/bench_index.py).

It is built by ``setup.py`` when lading is installed (``pip install -e .`` or a wheel) where a C
compiler is found, and skipped without one (``optional=True``): lading then runs the numpy
route. ``LADING_NATIVE=0`` turns it off (the tests run both routes). It reads the files'
little-endian words as they are, so it is not used on a big-endian machine. Objects choose the
route when they are made: code reads :data:`NATIVE` at construction, so setting it (tests) takes
effect for stores opened afterwards.
"""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType

import numpy as np


def load() -> ModuleType | None:
    """The built helper, configured, or None (not built, turned off, or big-endian)."""
    if os.environ.get("LADING_NATIVE", "1") == "0" or sys.byteorder != "little":
        return None
    try:
        module = importlib.import_module("lading.disk._native")
    except ImportError:
        return None
    module.configure(np.integer)  # numpy integers are ids like ints (np.int64(7) is 7)
    return module


NATIVE: ModuleType | None = load()
