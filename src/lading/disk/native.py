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
little-endian words as they are, so it is not used on a big-endian machine; nor where its build
is stale (its ``SOURCE_SHA256`` stamp is not the digest of the ``_native.c`` beside it). Why it
is not used is logged at DEBUG on ``lading.disk.native``. Objects choose the
route when they are made: code reads :data:`NATIVE` at construction, so setting it (tests) takes
effect for stores opened afterwards.
"""

from __future__ import annotations

import hashlib
import importlib
import logging
import os
import sys
from pathlib import Path
from types import ModuleType

import numpy as np

_LOG = logging.getLogger(__name__)
_SOURCE = Path(__file__).with_name("_native.c")


def source_digest(source: Path = _SOURCE) -> str:
    """The stamp setup.py builds into the helper (``SOURCE_SHA256``): sha256 of ``_native.c``,
    16 hex digits."""
    return hashlib.sha256(source.read_bytes()).hexdigest()[:16]


def load() -> ModuleType | None:
    """The built helper, configured, or None (not built, turned off, big-endian, or built from
    another ``_native.c`` than the one beside it); why it is not used goes to the debug log."""
    why = _unusable()
    module = None
    if why is None:
        try:
            module = importlib.import_module("lading.disk._native")
        except ImportError as e:  # not built, or built for another Python or machine
            why = f"it cannot be imported ({e})"
    # an editable install keeps its in-place .so across a pull that changes _native.c: that
    # build follows other rules (or lacks a function), so it is not used until rebuilt
    if module is not None and _SOURCE.exists():
        built = getattr(module, "SOURCE_SHA256", None)
        if built != source_digest():
            why = (
                f"it was built from another _native.c (stamp {built}, the source is "
                f"{source_digest()}): rebuild it (pip install -e . or python setup.py "
                "build_ext --inplace)"
            )
    if why is not None:
        _LOG.debug("lading.disk._native is not used: %s; lookups take the numpy route", why)
        return None
    assert module is not None
    module.configure(np.integer)  # numpy integers are ids like ints (np.int64(7) is 7)
    return module


def _unusable() -> str | None:
    if os.environ.get("LADING_NATIVE", "1") == "0":
        return "LADING_NATIVE=0"
    if sys.byteorder != "little":
        return "the machine is big-endian (the helper reads little-endian words as they are)"
    return None


NATIVE: ModuleType | None = load()
