"""Tabular workloads: partitioned parquet for session-based recommendation under DDP.

Names are imported on first use, so ``lading repartition`` runs without importing torch; only
the loaders need it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lading.tabular.dataset import ParquetLoader, PartitionedParquet
    from lading.tabular.repartition import RepartitionReport, repartition

_HOMES = {
    "ParquetLoader": "lading.tabular.dataset",
    "PartitionedParquet": "lading.tabular.dataset",
    "RepartitionReport": "lading.tabular.repartition",
    "repartition": "lading.tabular.repartition",
}


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'lading.tabular' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)


__all__ = ["ParquetLoader", "PartitionedParquet", "RepartitionReport", "repartition"]
