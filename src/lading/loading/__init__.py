"""The loader core: one loader, one planner, one segment, one loader state, one epoch order.

Every workload (map-style IR groups, language-model streams and windows, partitioned parquet)
hands the core a :class:`~lading.loading.workload.Workload` (a :class:`SegmentWorkload` holding
the one settings record, :class:`Reading`): which positions an epoch has and how a run of them
becomes a batch (and, where it pays, a bulk read); the :class:`Segment` does the sharding
arithmetic. What a map-style dataset may add for its loader is one list of hooks
(:class:`Hooks`, :mod:`lading.loading.hooks`). The one :class:`Loader` iterates every
workload, in this process or in DataLoader workers, counts its batches and saves its position;
it is :class:`Resumable`, and every wrapper composes that protocol only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lading._lazy import lazy_attributes
from lading.loading.hooks import EpochIndex, Hooks, MapDataset
from lading.loading.order import Salt, epoch_order, feistel_permutation, generator, permutation
from lading.loading.plan import EQUALIZE, Plan, batch_count, plan_shares
from lading.loading.reading import Reading
from lading.loading.resumable import Resumable
from lading.loading.segment import Segment
from lading.loading.state import Cursor, LoaderStateError
from lading.loading.workload import SegmentWorkload, Workload

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
    "EpochIndex",
    "Hooks",
    "Loader",
    "LoaderStateError",
    "MapDataset",
    "Plan",
    "Reading",
    "Resumable",
    "Salt",
    "Segment",
    "SegmentWorkload",
    "Workers",
    "Workload",
    "batch_count",
    "epoch_order",
    "feistel_permutation",
    "generator",
    "permutation",
    "plan_shares",
]
