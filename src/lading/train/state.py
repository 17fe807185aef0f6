"""Checkpoints of a training run: written by rank 0 from every rank's parts, read by all.

On disk (through :mod:`lading.train.checkpoint`, no pickle) a checkpoint holds ``step``, ``model``,
``optimizer``, ``scheduler`` (when the run has one), ``loaders`` and ``rng`` (one entry per
rank, in rank order) and any per-rank lists the task adds (the LM's ``hidden``). Every rank
saves the same account of what is left of the epoch, so any rank's loader state serves a run on
another number of processes: an elastic resume, which reseeds the RNG instead of restoring it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import torch

from lading.loading.order import Salt, generator
from lading.loading.resumable import Resumable
from lading.train import checkpoint, ddp
from lading.train.task import LoopConfig, TrainingTask
from lading.world import World


class Checkpointed(Protocol):
    """What a checkpoint is taken of and restored into (:class:`lading.train.Trainer` is one)."""

    task: TrainingTask
    loader: Resumable
    config: LoopConfig
    world: World
    model: torch.nn.Module | None
    optimizer: Any
    scheduler: Any


RESERVED: frozenset[str] = frozenset({"step", "model", "optimizer", "scheduler", "loaders", "rng"})


def save(trainer: Checkpointed, step: int) -> None:
    """Gather every rank's loader, RNG and task state into ``out/checkpoint`` at ``step``:
    rank 0 writes it; every rank waits until it has."""
    loaders = ddp.gather_objects(trainer.loader.state_dict())
    rngs = ddp.gather_objects(torch.get_rng_state())
    extra = trainer.task.state()
    clash = RESERVED & set(extra)
    if clash:
        name = type(trainer.task).__name__
        raise ValueError(f"{name}.state() uses the reserved keys {sorted(clash)}; rename them")
    gathered = {key: ddp.gather_objects(value) for key, value in sorted(extra.items())}
    if trainer.world.rank == 0:
        assert trainer.model is not None, "a checkpoint needs a model"
        saved: dict[str, Any] = {"step": step, "model": trainer.model.state_dict()}
        for name, part in (("optimizer", trainer.optimizer), ("scheduler", trainer.scheduler)):
            if part is not None:
                saved[name] = part.state_dict()
        saved.update(loaders=loaders, rng=rngs, **gathered)
        checkpoint.save(saved, directory(trainer))
    ddp.barrier()


def present(trainer: Checkpointed) -> bool:
    """Whether ``out/checkpoint`` holds a checkpoint to resume from (every rank calls it).

    Rank 0 first puts back one that a save killed mid-publish left beside it
    (:func:`lading.train.checkpoint.recover`, which refuses where it cannot); the other ranks
    wait for it, so every rank sees the same answer.
    """
    where = directory(trainer)
    if trainer.world.rank == 0:
        checkpoint.recover(where)
    ddp.barrier()
    return (where / "meta.json").is_file()


def restore(trainer: Checkpointed) -> int:
    """Load ``out/checkpoint`` into the trainer's parts; the step it was taken at.

    With the saved data layout the RNG continues bit for bit; otherwise (an elastic resume)
    each rank gets a fresh stream seeded from ``(seed, rank, step)``.
    """
    where, world = directory(trainer), trainer.world
    saved = checkpoint.load(where)
    if trainer.model is None:
        raise ValueError(f"{where}: resuming needs the model the checkpoint was taken of")
    trainer.model.load_state_dict(saved["model"])
    for name, part in (("optimizer", trainer.optimizer), ("scheduler", trainer.scheduler)):
        if part is None:
            continue
        if name not in saved:
            raise ValueError(
                f"{where} holds no {name} state; it was written by another kind of run "
                "(delete it or train into another --out)"
            )
        part.load_state_dict(saved[name])
    saved_world = len(saved["loaders"])
    loader_state = saved["loaders"][world.rank % saved_world]
    trainer.loader.load_state_dict(loader_state)
    step = int(saved["step"])
    # bit for bit only with the saved data layout (world size, batch size, …; loading.state):
    # another layout gives rows (LM streams) and ranks no saved counterpart
    exact = saved_world == world.world_size and (
        loader_state["layout"] == trainer.loader.state_dict()["layout"]
    )
    if exact:
        torch.set_rng_state(saved["rng"][world.rank])
    else:  # no saved stream for this rank: a fresh one, still reproducible
        torch.manual_seed(elastic_seed(trainer.config.seed, world.rank, step))
    trainer.task.load_state(saved, exact)
    return step


def directory(trainer: Checkpointed) -> Path:
    """Where the trainer's checkpoint lives: ``out/checkpoint``."""
    if trainer.config.out is None:
        raise ValueError("checkpoints need LoopConfig.out, the run's folder")
    return trainer.config.out / "checkpoint"


def elastic_seed(seed: int, rank: int, step: int) -> int:
    """The torch seed of ``rank`` resuming at ``step`` on another world size."""
    return int(generator(seed, Salt.RESEED, rank, step).integers(2**63))
