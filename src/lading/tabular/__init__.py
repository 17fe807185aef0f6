"""Tabular workloads: partitioned parquet for session-based recommendation under DDP."""

from __future__ import annotations

from lading.tabular.dataset import ParquetLoader, PartitionedParquet
from lading.tabular.repartition import RepartitionReport, repartition

__all__ = ["ParquetLoader", "PartitionedParquet", "RepartitionReport", "repartition"]
