"""The loader core: one planner, one segment, one loader state, one epoch order, one contract.

Every workload (map-style IR groups, language-model streams and windows, partitioned parquet)
is a position source on top of it (:class:`~lading.loading.source.PositionSource`): it says
which positions an epoch has and how a run of them becomes a batch; the :class:`Segment`
does the sharding arithmetic. Every loader a user gets, in-process or with workers, is a
:class:`Resumable`, and every wrapper composes that protocol only.
"""

from __future__ import annotations

from lading.loading.order import Salt, epoch_order, feistel_permutation, generator, permutation
from lading.loading.plan import EQUALIZE, Plan, batch_count, plan_shares
from lading.loading.resumable import EpochLoader, Resumable
from lading.loading.segment import Segment
from lading.loading.state import Cursor, LoaderStateError

__all__ = [
    "EQUALIZE",
    "Cursor",
    "EpochLoader",
    "LoaderStateError",
    "Plan",
    "Resumable",
    "Salt",
    "Segment",
    "batch_count",
    "epoch_order",
    "feistel_permutation",
    "generator",
    "permutation",
    "plan_shares",
]
