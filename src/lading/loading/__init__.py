"""The loader core: one loader, one planner, one segment, one loader state, one epoch order.

Every workload (map-style IR groups, language-model streams and windows, partitioned parquet)
hands the core a :class:`~lading.loading.workload.Workload`: which positions an epoch has and how a
run of them becomes a batch (and, where it pays, a bulk read); the :class:`Segment` does the
sharding arithmetic. The one :class:`Loader` iterates every workload, in this process or in
DataLoader workers, counts its batches and saves its position; it is :class:`Resumable`, and
every wrapper composes that protocol only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lading._lazy import lazy_attributes
from lading.loading.order import Salt, epoch_order, feistel_permutation, generator, permutation
from lading.loading.plan import EQUALIZE, Plan, batch_count, plan_shares
from lading.loading.resumable import Resumable
from lading.loading.segment import Segment
from lading.loading.state import Cursor, LoaderStateError
from lading.loading.workload import Workload

if TYPE_CHECKING:
    from lading.loading.loader import Loader, Workers

# the loader imports torch; the planning core does not (``lading repartition`` and ``lading lm
# build`` run without torch), so the loader is imported on first use
__getattr__ = lazy_attributes(
    __name__, {"Loader": "lading.loading.loader", "Workers": "lading.loading.loader"}
)

__all__ = [
    "EQUALIZE",
    "Cursor",
    "Loader",
    "LoaderStateError",
    "Plan",
    "Resumable",
    "Salt",
    "Segment",
    "Workers",
    "Workload",
    "batch_count",
    "epoch_order",
    "feistel_permutation",
    "generator",
    "permutation",
    "plan_shares",
]
