"""The loader core: one planner, one loader state, one epoch order, one resumable loader.

Every workload (map-style IR groups, language-model streams and windows, partitioned parquet)
is a position source on top of it (:class:`~lading.loading.source.PositionSource`).
"""

from __future__ import annotations

from lading.loading.order import Salt, epoch_order, feistel_permutation, generator, permutation
from lading.loading.plan import EQUALIZE, Plan, batch_count, plan_shares
from lading.loading.state import Cursor, LoaderStateError

__all__ = [
    "EQUALIZE",
    "Cursor",
    "LoaderStateError",
    "Plan",
    "Salt",
    "batch_count",
    "epoch_order",
    "feistel_permutation",
    "generator",
    "permutation",
    "plan_shares",
]
