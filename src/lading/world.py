"""Who am I: global rank, world size, local rank, node and DataLoader worker of this process.

:meth:`World.detect` reads the launcher's environment variables. Precedence, first match wins:

1. ``LADING_RANK`` / ``LADING_WORLD_SIZE`` (+ ``LADING_LOCAL_RANK``, ``LADING_LOCAL_WORLD_SIZE``,
   ``LADING_NODE_RANK``): an explicit override (or pass a :class:`World` to the loaders).
2. torchrun: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK`` (node).
   It wins over Slurm because ``srun torchrun ...`` leaves Slurm's per-node task ids in the
   environment of every worker torchrun starts.
3. Open MPI: ``OMPI_COMM_WORLD_RANK``/``_SIZE``/``_LOCAL_RANK``/``_LOCAL_SIZE``.
4. MVAPICH2: ``MV2_COMM_WORLD_RANK``/``_SIZE``/``_LOCAL_RANK``/``_LOCAL_SIZE``.
5. PMI (MPICH, Intel MPI): ``PMI_RANK``/``PMI_SIZE``, ``MPI_LOCALRANKID``/``MPI_LOCALNRANKS``.
   The MPI launchers win over Slurm because ``mpirun`` inside an ``sbatch`` script inherits the
   batch step's ``SLURM_PROCID=0`` in every process.
6. Slurm ``srun``: ``SLURM_PROCID``, ``SLURM_STEP_NUM_TASKS`` (or ``SLURM_NTASKS``),
   ``SLURM_LOCALID``, ``SLURM_NODEID``, and tasks per node from ``SLURM_STEP_TASKS_PER_NODE`` /
   ``SLURM_TASKS_PER_NODE`` (``"4(x2),3"``) or ``SLURM_NTASKS_PER_NODE``. Only inside a job
   step (``SLURM_STEP_ID`` set): a bare ``sbatch`` script is one process, not rank 0 of N.

When torch.distributed is initialised its rank and size are authoritative; the launcher still
supplies local rank and node. A launcher that does not say how many processes share this node
(a bare ``RANK``/``WORLD_SIZE``) is taken as a single node.
"""

from __future__ import annotations

import numbers
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

SHARED_FS_ENV = "LADING_SHARED_FS"
# a World's integer fields, checked and stored as Python ints when one is made
_PLACES = (
    "rank",
    "world_size",
    "local_rank",
    "local_world_size",
    "worker_id",
    "num_workers",
    "node_rank",
)


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
        node_rank: index of this node, when the launcher says it (torchrun, Slurm, override);
            None otherwise (MPI launchers do not).
        launcher: which environment the values came from (``"torchrun"``, ``"slurm"``, ...).
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    worker_id: int = 0
    num_workers: int = 1
    node_rank: int | None = None
    launcher: str = "none"

    def __post_init__(self) -> None:
        for name in _PLACES:
            value = getattr(self, name)
            if value is None and name == "node_rank":
                continue
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                either = " or None" if name == "node_rank" else ""
                raise TypeError(
                    f"World({name}={value!r}): {name} must be an int{either} (numpy's are "
                    "taken), not a float, str or bool"
                )
            object.__setattr__(self, name, int(value))  # Python's: states are saved as JSON
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

    def is_builder(self, shared_fs: bool | None = None) -> bool:
        """Whether this process is the one that builds (or stages) a directory for the job.

        On a shared filesystem (``shared_fs`` True; default from ``LADING_SHARED_FS``) that is
        global rank 0; on node-local disks it is local rank 0 of every node.
        """
        return self.rank == 0 if resolve_shared_fs(shared_fs) else self.local_rank == 0

    @classmethod
    def detect(cls, env: Mapping[str, str] | None = None) -> World:
        """This process's place, from torch.distributed (when initialised) and the launcher's
        environment variables (``env``, default ``os.environ``; precedence in the module doc).

        The DataLoader worker comes from ``torch.utils.data.get_worker_info()``, so calling this
        inside a worker gives that worker's id.
        """
        found = from_environment(os.environ if env is None else env)
        dist_rank = _distributed_rank_and_size()
        if dist_rank is not None and dist_rank != (found.rank, found.world_size):
            found = _from_process_group(found, *dist_rank)
        worker_id, num_workers = _worker_id_and_count()
        return replace(found, worker_id=worker_id, num_workers=num_workers)

    def with_worker(self, worker_id: int, num_workers: int) -> World:
        """The same rank seen from DataLoader worker ``worker_id`` of ``num_workers``."""
        return replace(self, worker_id=worker_id, num_workers=num_workers)


def _from_process_group(found: World, rank: int, size: int) -> World:
    """``found`` (the launcher's view) corrected by an initialised process group's rank and size.

    A group started without launcher variables (``mp.spawn`` + ``init_process_group(rank=r,
    world_size=n)``, PyTorch's DDP tutorial) has no local rank or node: it is taken as one node
    of ``size`` processes. Every field is replaced in one step, so no half-updated World is ever
    validated (a rank 1 with the launcher's ``local_world_size`` of 1 is not an error).
    """
    if found.world_size == size:  # the launcher agrees on the size: keep its local layout
        local, local_size, node = found.local_rank, found.local_world_size, found.node_rank
    else:  # no (or another) launcher: one node holding the whole group
        local, local_size, node = rank, size, 0
    return replace(
        found,
        rank=rank,
        world_size=size,
        local_rank=local,
        local_world_size=max(local_size, local + 1),
        node_rank=node,
        launcher=found.launcher if found.world_size == size else "torch.distributed",
    )


def resolve_shared_fs(shared_fs: bool | None = None) -> bool:
    """``shared_fs`` if given, else ``LADING_SHARED_FS`` (``1``/``0``), else False (each node's
    local rank 0 builds; on a shared filesystem the build lock makes the second one reuse)."""
    if shared_fs is not None:
        return bool(shared_fs)
    value = os.environ.get(SHARED_FS_ENV, "").strip().lower()
    if value in ("", "0", "false", "no"):
        return False
    if value in ("1", "true", "yes"):
        return True
    raise ValueError(f"{SHARED_FS_ENV}={value!r}: use 1 (shared filesystem) or 0 (node-local)")


# (launcher, rank, size, local rank, local size, node rank): the variables of each, the first
# set one read; () where the launcher does not say
_LAUNCHERS: tuple[tuple[str, str, str, tuple[str, ...], tuple[str, ...], tuple[str, ...]], ...] = (
    (
        "lading",
        "LADING_RANK",
        "LADING_WORLD_SIZE",
        ("LADING_LOCAL_RANK",),
        ("LADING_LOCAL_WORLD_SIZE",),
        ("LADING_NODE_RANK",),
    ),
    ("torchrun", "RANK", "WORLD_SIZE", ("LOCAL_RANK",), ("LOCAL_WORLD_SIZE",), ("GROUP_RANK",)),
    (
        "openmpi",
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE",
        ("OMPI_COMM_WORLD_LOCAL_RANK",),
        ("OMPI_COMM_WORLD_LOCAL_SIZE",),
        (),
    ),
    (
        "mvapich",
        "MV2_COMM_WORLD_RANK",
        "MV2_COMM_WORLD_SIZE",
        ("MV2_COMM_WORLD_LOCAL_RANK",),
        ("MV2_COMM_WORLD_LOCAL_SIZE",),
        (),
    ),
    (  # Hydra (MPICH, Intel MPI), then PMI's own and HPE PALS' (mpiexec on Cray EX)
        "pmi",
        "PMI_RANK",
        "PMI_SIZE",
        ("MPI_LOCALRANKID", "PMI_LOCAL_RANK", "PALS_LOCAL_RANKID"),
        ("MPI_LOCALNRANKS", "PMI_LOCAL_SIZE", "PALS_LOCAL_SIZE"),
        (),
    ),
)


def from_environment(env: Mapping[str, str]) -> World:
    """The :class:`World` that ``env``'s launcher variables describe (worker 0 of 1).

    A launcher that gives no local rank (``srun --mpi=pmi2`` sets ``PMI_RANK``/``PMI_SIZE``
    alone; ``RANK``/``WORLD_SIZE`` exported from Slurm's) takes the node from the Slurm step
    it runs in, where its rank is Slurm's; with neither, the processes are taken to share one
    node.

    Raises:
        ValueError: a variable that is no integer, values that disagree, or a ``WORLD_SIZE``
            above 1 without ``RANK`` (Lightning's launcher before its process group starts).
    """
    for name, rank_var, size_var, local_vars, local_size_vars, node_vars in _LAUNCHERS:
        if _get(env, rank_var) is None and _get(env, size_var) is None:
            continue
        size = _int(env, size_var, 1)
        if _get(env, rank_var) is None and size > 1:
            raise ValueError(
                f"{size_var}={size} without {rank_var}: this process's rank is not known (every "
                "process would read rank 0's share). Lightning's launcher sets it when its "
                "process group starts: make the loader in a LadingDataModule (it is given the "
                "Trainer's ranks) or after the group is up, or pass world=World(rank, size)"
            )
        rank = _int(env, rank_var, 0)
        local_var, local_size_var = _first(env, local_vars), _first(env, local_size_vars)
        node_var = _first(env, node_vars)
        slurm = _slurm(env) if local_var is None and _in_slurm_step(env) else None
        if slurm is not None and slurm.rank == rank:
            local, local_size = slurm.local_rank, slurm.local_world_size
            node = -1 if slurm.node_rank is None else slurm.node_rank
        else:
            local = _int(env, local_var, rank) if local_var else rank
            local_size = _int(env, local_size_var, size) if local_size_var else size
            node = _int(env, node_var, -1) if node_var else -1
            if local_var and local_size_var and not 0 <= local < local_size:
                raise ValueError(
                    f"{local_var}={local} and {local_size_var}={local_size}: a local rank is "
                    f"in [0, {local_size}) on a node of {local_size} processes; set both "
                    "as the launcher gives them (or leave both out: the job is then taken "
                    "as one node)"
                )
        if node < 0:
            node = 0 if local_size >= size else -1  # one node: node 0; else unknown
        return _world(name, rank, size, local, local_size, node)
    if _in_slurm_step(env):
        return _slurm(env)
    return World()


def _in_slurm_step(env: Mapping[str, str]) -> bool:
    """Whether ``env`` is a Slurm job step's (``srun``): a batch script has no step id."""
    return _get(env, "SLURM_PROCID") is not None and bool(
        _get(env, "SLURM_STEP_ID", "SLURM_STEPID")
    )


def _first(env: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    """The first of ``names`` set in ``env``, or None."""
    return next((name for name in names if _get(env, name) is not None), None)


def _slurm(env: Mapping[str, str]) -> World:
    rank = _int(env, "SLURM_PROCID", 0)
    size = int(_get(env, "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS") or 1)
    node = _int(env, "SLURM_NODEID", 0)
    local = _int(env, "SLURM_LOCALID", rank)
    per_node = _get(env, "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE")
    if per_node is not None:
        counts = tasks_per_node(per_node)
        local_size = counts[node] if node < len(counts) else max(counts)
    elif (fixed := _get(env, "SLURM_NTASKS_PER_NODE")) is not None:
        local_size = int(fixed)
    else:
        local_size = size
    return _world("slurm", rank, size, local, local_size, node)


def tasks_per_node(value: str) -> list[int]:
    """Slurm's compressed task counts per node, expanded: ``"4(x2),3"`` -> ``[4, 4, 3]``."""
    counts: list[int] = []
    for part in value.split(","):
        match = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if match is None:
            raise ValueError(
                f"cannot read Slurm tasks per node {value!r}: expected counts like '4(x2),3'"
            )
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts


def _world(name: str, rank: int, size: int, local: int, local_size: int, node: int) -> World:
    try:
        return World(
            rank,
            size,
            local,
            max(local_size, local + 1),
            node_rank=node if node >= 0 else None,
            launcher=name,
        )
    except ValueError as e:
        raise ValueError(f"{name} environment variables are inconsistent: {e}") from None


def _get(env: Mapping[str, str], *names: str) -> str | None:
    for name in names:
        value = env.get(name)
        if value is not None and value.strip() != "":
            return value.strip()
    return None


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    value = _get(env, name)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"environment variable {name}={value!r} is not an integer") from None


def process_group(min_size: int = 1) -> Any:
    """``torch.distributed`` when a process group of at least ``min_size`` ranks is
    initialised, else None: the one "is a process group up?" of lading.

    Never imports torch to ask (importing it costs ~1 s): a process group can only exist once
    ``torch.distributed`` was imported by someone.
    """
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist if dist.get_world_size() >= min_size else None


def _distributed_rank_and_size() -> tuple[int, int] | None:
    dist = process_group()
    return None if dist is None else (dist.get_rank(), dist.get_world_size())


def _worker_id_and_count() -> tuple[int, int]:
    try:
        from torch.utils.data import get_worker_info
    except ImportError:  # pragma: no cover
        return 0, 1
    info = get_worker_info()
    if info is None:
        return 0, 1
    return int(info.id), int(info.num_workers)
