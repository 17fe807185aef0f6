"""Process-group plumbing shared by the training loops: join the group, pick the device, reduce.

Launched by ``torchrun`` (``WORLD_SIZE`` > 1) the process joins the default group: NCCL when
CUDA is present, gloo otherwise. Launched by ``srun`` or ``mpirun`` without torchrun, the ranks
come from that launcher's variables (:mod:`lading.world`) and ``MASTER_ADDR``/``MASTER_PORT``
must be exported. Everything here is a no-op in a single process.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch import nn

from lading.train import checkpoint
from lading.train.config import RunConfig
from lading.world import World

R = TypeVar("R")

PARALLEL: tuple[str, ...] = ("ddp", "dp", "none")
_left = False  # joined() left a group it joined (see left_a_group)


def setup(parallel: str = "ddp") -> tuple[World, torch.device]:
    """Join the process group if torchrun started us; return who we are and our device."""
    if parallel not in PARALLEL:
        raise ValueError(f"unknown parallel {parallel!r}; choose from {sorted(PARALLEL)}")
    launched = World.detect()
    if not dist.is_initialized() and launched.world_size > 1 and launched.launcher != "torchrun":
        export_launch_env(launched)
    env_world = int(os.environ.get("WORLD_SIZE", "1"))
    if env_world > 1 and parallel != "ddp":
        raise ValueError(
            f"--parallel {parallel} runs in one process; launch it without "
            "torchrun (or use --parallel ddp)"
        )
    if parallel == "ddp" and env_world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    world = World.detect()
    if torch.cuda.is_available():
        device = torch.device("cuda", world.local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    return world, device


@contextmanager
def joined(parallel: str = "ddp") -> Iterator[tuple[World, torch.device]]:
    """:func:`setup` for the length of a ``with`` block, then leave the group if this call
    joined it; a group the caller started stays up for the caller to close.

    Leaving is needed but not enough when DDP wrapped a model (pytorch#190489): see
    :func:`left_a_group`, which this sets.
    """
    global _left
    ours = not dist.is_initialized()
    world, device = setup(parallel)
    try:
        yield world, device
    finally:
        if ours and dist.is_initialized():
            teardown()
            _left = True


def left_a_group() -> bool:
    """Whether this process joined a process group (:func:`joined`) and left it. Leaving is not
    enough: a group DDP wrapped outlives ``destroy_process_group`` (its gloo threads run on,
    and ``gc.collect()`` does not free it), and a gloo thread that drops its last work object
    while the interpreter finalizes takes the GIL, is ended by the interpreter mid-destructor
    and aborts the process (``terminate called without an active exception``: rank 1 of
    ``lading train sessions`` in CI, ~1 run in 20; a core dump showed the thread in
    ``~AsyncBarrierWork``). The command line exits such a process without finalizing
    (:func:`lading.cli.run`)."""
    return _left


def run(config: RunConfig, body: Callable[[World, torch.device, Path], R]) -> R:
    """How every workload's ``train`` starts: ``body(world, device, out)`` inside the process
    group (joined for the call, see :func:`joined`), ``out`` the run's folder, made."""
    with joined(config.parallel) as (world, device):
        out = Path(config.out)
        if not config.resume:  # before anything is written there (a store, a log)
            checkpoint.refuse_a_fresh_run_over(out / "checkpoint", out)
        out.mkdir(parents=True, exist_ok=True)
        return body(world, device, out)


def export_launch_env(world: World) -> None:
    """Give ``init_process_group``'s ``env://`` the ranks srun/mpirun/LADING_* said."""
    missing = [name for name in ("MASTER_ADDR", "MASTER_PORT") if not os.environ.get(name)]
    if missing:
        raise ValueError(
            f"{world.launcher} started rank {world.rank} of {world.world_size} without torchrun; "
            f"export {' and '.join(missing)} (the first node's hostname and a free port) on "
            "every node, or launch with torchrun"
        )
    os.environ.update(
        RANK=str(world.rank),
        WORLD_SIZE=str(world.world_size),
        LOCAL_RANK=str(world.local_rank),
        LOCAL_WORLD_SIZE=str(world.local_world_size),
    )


def wrap(model: nn.Module, parallel: str, device: torch.device) -> nn.Module:
    """``model`` as the step should call it: under DDP when a group is up and ``parallel`` is
    ``"ddp"``, under DataParallel when it is ``"dp"`` and there are GPUs to spread over, else
    as it is. Keep the bare model for ``state_dict`` and saving."""
    if parallel == "ddp" and dist.is_initialized():
        ids = [device.index] if device.type == "cuda" else None
        return nn.parallel.DistributedDataParallel(model, device_ids=ids)
    if parallel == "dp" and torch.cuda.device_count() > 1:
        return nn.DataParallel(model)
    return model


def teardown() -> None:
    """Leave the process group, if this process joined one."""
    if dist.is_initialized():
        dist.destroy_process_group()


def world_size() -> int:
    """Processes in the group (1 without one)."""
    return dist.get_world_size() if dist.is_initialized() else 1


def barrier() -> None:
    """Wait for every rank (nothing to wait for in one process)."""
    if dist.is_initialized():
        dist.barrier()


def sum_over_ranks(values: list[float], device: torch.device) -> list[float]:
    """Element-wise sums of ``values`` over all ranks."""
    if not dist.is_initialized():
        return list(values)
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return [float(v) for v in t.tolist()]


def mean_over_ranks(value: float, device: torch.device) -> float:
    """Mean of ``value`` over all ranks."""
    if not dist.is_initialized():
        return value
    return sum_over_ranks([value], device)[0] / dist.get_world_size()


def gather_objects(obj: Any) -> list[Any]:
    """``obj`` of every rank, in rank order (JSON-able objects or tensors)."""
    if not dist.is_initialized():
        return [obj]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out
