"""Who am I: global rank, world size, local rank and DataLoader worker of the calling process."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class World:
    """Position of this process in a (possibly distributed, possibly multi-worker) job.

    ``rank`` is always the *global* rank: passing the local rank where the global one belongs
    makes every node read the same data (the Transformers4Rec multi-node bug).

    Attributes:
        rank: global rank in ``[0, world_size)``.
        world_size: number of training processes over all nodes.
        local_rank: rank within this node.
        local_world_size: processes on this node.
        worker_id: DataLoader worker id in ``[0, num_workers)``; 0 in the main process.
        num_workers: DataLoader workers of this rank; 1 when loading in the main process.
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    worker_id: int = 0
    num_workers: int = 1

    def __post_init__(self) -> None:
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank {self.rank} outside [0, {self.world_size})")
        if not 0 <= self.worker_id < self.num_workers:
            raise ValueError(f"worker_id {self.worker_id} outside [0, {self.num_workers})")
        if not 0 <= self.local_rank < self.local_world_size:
            raise ValueError(f"local_rank {self.local_rank} outside [0, {self.local_world_size})")

    @property
    def global_worker(self) -> int:
        """Index of this (rank, worker) pair among all ``world_size * num_workers`` readers."""
        return self.rank * self.num_workers + self.worker_id

    @property
    def total_workers(self) -> int:
        """Number of (rank, worker) readers in the whole job."""
        return self.world_size * self.num_workers

    @classmethod
    def detect(cls) -> World:
        """Read rank and world from torch.distributed (when initialised) or torchrun's env vars.

        The DataLoader worker comes from ``torch.utils.data.get_worker_info()``, so calling this
        inside a worker gives that worker's id.
        """
        rank, world_size = _distributed_rank_and_size()
        # torchrun sets LOCAL_RANK and LOCAL_WORLD_SIZE; without them assume a single node.
        local_rank = _env_int("LOCAL_RANK", rank)
        local_world_size = max(_env_int("LOCAL_WORLD_SIZE", world_size), local_rank + 1)
        worker_id, num_workers = _worker_id_and_count()
        return cls(rank, world_size, local_rank, local_world_size, worker_id, num_workers)

    def with_worker(self, worker_id: int, num_workers: int) -> World:
        """The same rank seen from DataLoader worker ``worker_id`` of ``num_workers``."""
        return World(
            self.rank,
            self.world_size,
            self.local_rank,
            self.local_world_size,
            worker_id,
            num_workers,
        )


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"environment variable {name}={value!r} is not an integer") from None


def _distributed_rank_and_size() -> tuple[int, int]:
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover - torch is a core dependency
        dist = None  # type: ignore[assignment]
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return _env_int("RANK", 0), _env_int("WORLD_SIZE", 1)


def _worker_id_and_count() -> tuple[int, int]:
    try:
        from torch.utils.data import get_worker_info
    except ImportError:  # pragma: no cover
        return 0, 1
    info = get_worker_info()
    if info is None:
        return 0, 1
    return int(info.id), int(info.num_workers)
