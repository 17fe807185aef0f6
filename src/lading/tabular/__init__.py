"""Tabular workloads: partitioned parquet for session-based recommendation under DDP.

The loaders are imported on first use, so ``lading repartition`` runs without importing torch.
:func:`repartition` (no torch either) is imported at once: it shares its module's name, and
once the module is imported Python binds that name on the package to the module, so a lazy
lookup would never be asked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lading._lazy import lazy_attributes
from lading.tabular.repartition import RepartitionReport, repartition

if TYPE_CHECKING:
    from lading.tabular.dataset import PartitionedParquet

__getattr__ = lazy_attributes(
    __name__,
    {"PartitionedParquet": "lading.tabular.dataset"},
)


__all__ = ["PartitionedParquet", "RepartitionReport", "repartition"]
