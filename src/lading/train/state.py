"""Checkpoints of a training run: written by rank 0 from every rank's parts, read by all.

On disk (through :mod:`lading.train.checkpoint`, no pickle) a checkpoint holds ``step``, ``model``,
``optimizer``, ``scheduler`` (when the run has one), ``scaler`` (an enabled GradScaler's scale
and growth counter), ``loaders``, ``rng`` and, on CUDA, ``cuda_rng`` (one entry per rank, in
rank order: the CPU generator's state and the rank's CUDA device's) and any per-rank lists the
task adds (the LM's ``hidden``). Every rank saves the same account of what is left of the
epoch, so any rank's loader state serves a run on another number of processes: an elastic
resume, which reseeds the RNGs instead of restoring them. A checkpoint without ``scaler`` or
``cuda_rng`` (written before they were saved) leaves those as the run's start made them.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import torch

from lading.errors import LoaderStateError
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
    device: torch.device
    model: torch.nn.Module | None
    optimizer: Any
    scheduler: Any
    scaler: Any


RESERVED: frozenset[str] = frozenset(
    {
        "step",
        "written_by",
        "model",
        "model_settings",
        "data_settings",
        "optimizer",
        "scheduler",
        "scaler",
        "loaders",
        "rng",
        "cuda_rng",
        "last_loss",
    }
)


def save(trainer: Checkpointed, step: int, last_loss: float | None = None) -> None:
    """Gather every rank's loader, RNG and task state into ``out/checkpoint`` at ``step``
    (``last_loss``: that step's, rank 0's, for a resume with no step left to report):
    rank 0 writes it; every rank waits until it has."""
    loaders = ddp.gather_objects(trainer.loader.state_dict())
    rngs = ddp.gather_objects(torch.get_rng_state())
    cuda_rngs = ddp.gather_objects(cuda_rng_state(trainer.device))
    extra = trainer.task.state()
    clash = RESERVED & set(extra)
    if clash:
        name = type(trainer.task).__name__
        raise ValueError(f"{name}.state() uses the reserved keys {sorted(clash)}; rename them")
    gathered = {key: ddp.gather_objects(value) for key, value in sorted(extra.items())}
    if trainer.world.rank == 0:
        assert trainer.model is not None, "a checkpoint needs a model"
        saved: dict[str, Any] = {"step": step, "written_by": trainer.config.desc}
        if last_loss is not None and math.isfinite(last_loss):
            saved["last_loss"] = last_loss
        saved["model"] = trainer.model.state_dict()
        saved["model_settings"] = dict(trainer.config.model_settings)
        saved["data_settings"] = dict(trainer.config.data_settings)
        for name, part in (("optimizer", trainer.optimizer), ("scheduler", trainer.scheduler)):
            if part is not None:
                saved[name] = part.state_dict()
        if scaling(trainer.scaler):  # the same on every rank: DDP's gradients are the same
            saved["scaler"] = trainer.scaler.state_dict()
        saved.update(loaders=loaders, rng=rngs, **gathered)
        if all(rng is not None for rng in cuda_rngs):
            saved["cuda_rng"] = cuda_rngs
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


def refuse_another_model(where: Path, saved: Any, now: dict[str, Any]) -> None:
    """Refuse a resume whose model settings differ from those ``saved`` in the checkpoint at
    ``where`` (one written before they were saved has none: nothing to compare).

    Raises:
        ValueError: naming each setting, both values and the fix.
    """
    said = _differences(saved, now)
    if said:
        raise ValueError(
            f"{where} holds a model of other settings ({said}): resume with the checkpoint's "
            "settings, or train this model into another --out"
        )


def another_model(where: Path, error: RuntimeError, written_by: Any, now: str) -> str:
    """Why the weights at ``where`` do not load into this run's model, in one line: torch's
    first detail (its first line only names the model class) and, where the checkpoint
    records another run (``lading train sessions`` into a cross-encoder's ``--out``), both;
    else another model or other sizes (a checkpoint of before its settings were recorded).
    torch's own error came as a traceback."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    detail = (lines[1] if len(lines) > 1 else lines[0] if lines else type(error).__name__)[:200]
    if isinstance(written_by, str) and written_by != now:
        whose = f"it was written by `lading {written_by}`, this is `lading {now}`"
    else:
        whose = "it holds another model, or one of other sizes"
    return (
        f"{where}: its weights do not fit this run's model ({detail}): {whose}; resume with "
        "the checkpoint's settings, or train into another --out"
    )


def _differences(saved: Any, now: dict[str, Any]) -> str:
    """The settings of ``now`` that differ from those ``saved`` in a checkpoint, in words
    (``name: 8 there, 4 now``); "" where none does, or none were saved (an older one's)."""
    if not isinstance(saved, dict):
        return ""
    differ = {k: (saved[k], v) for k, v in now.items() if k in saved and saved[k] != v}
    return ", ".join(f"{k}: {a!r} there, {b!r} now" for k, (a, b) in sorted(differ.items()))


class Resumed(NamedTuple):
    """Where a run resumed, the optimizer settings it changed (``{"lr": {"from": the
    checkpoint's, "to": this run's}}``) and the loss of its last step."""

    step: int
    changed: dict[str, dict[str, float]]
    last_loss: float | None = None  # the loss of the step it was taken at (None: not saved)


def restore(trainer: Checkpointed) -> Resumed:
    """Load ``out/checkpoint`` into the trainer's parts; the step it was taken at.

    With the saved data layout the RNGs (the CPU's and, where both runs are on CUDA, the
    device's) continue bit for bit; otherwise (an elastic resume) each rank gets a fresh stream
    seeded from ``(seed, rank, step)``, on the CPU and CUDA alike. An enabled GradScaler goes on
    from the saved scale and growth counter. The optimizer's
    ``lr`` and ``weight_decay`` are this run's (:func:`keep_configured`), said on rank 0
    where they differ from the checkpoint's, but those the config's ``keep_on_resume`` names,
    which stay the checkpoint's.
    """
    where, world = directory(trainer), trainer.world
    saved = checkpoint.load(where)
    if trainer.model is None:
        raise ValueError(f"{where}: resuming needs the model the checkpoint was taken of")
    refuse_another_model(where, saved.get("model_settings", {}), trainer.config.model_settings)
    try:
        trainer.model.load_state_dict(saved["model"])
    except RuntimeError as e:  # (settings not recorded, or recorded alike: say what torch saw)
        said = another_model(where, e, saved.get("written_by"), trainer.config.desc)
        raise ValueError(said) from e
    configured = configured_settings(trainer.optimizer)
    for name, part in (("optimizer", trainer.optimizer), ("scheduler", trainer.scheduler)):
        if part is None:
            continue
        if name not in saved:
            raise ValueError(
                f"{where} holds no {name} state; it was written by another kind of run "
                "(delete it or train into another --out)"
            )
        part.load_state_dict(saved[name])
    if scaling(trainer.scaler) and "scaler" in saved:
        trainer.scaler.load_state_dict(saved["scaler"])
    keep = set(trainer.config.keep_on_resume)  # the checkpoint's, where this run set none
    configured = [{k: v for k, v in group.items() if k not in keep} for group in configured]
    changed = keep_configured(trainer.optimizer, trainer.scheduler, configured)
    saved_world = len(saved["loaders"])
    loader_state = saved["loaders"][world.rank % saved_world]
    try:
        trainer.loader.load_state_dict(loader_state)
    except LoaderStateError as refused:  # (it names a digest of the data: the settings
        said = _differences(saved.get("data_settings"), trainer.config.data_settings)
        if not said:  # say why, the loader's own words chained)
            raise
        raise LoaderStateError(
            f"{where} was taken reading other data ({said}), and its loader state is of "
            "that data: resume with the checkpoint's settings, or train into another --out"
        ) from refused
    step = int(saved["step"])
    # bit for bit only with the saved data layout (world size, batch size, …; loading.state):
    # another layout gives rows (LM streams) and ranks no saved counterpart
    exact = saved_world == world.world_size and (
        loader_state["layout"] == trainer.loader.state_dict()["layout"]
    )
    if exact:
        torch.set_rng_state(saved["rng"][world.rank])
        # reading the state first initialises CUDA, which runs the seeding that _start's
        # manual_seed queued where it was not yet: that runs first, not over the saved state
        if "cuda_rng" in saved and cuda_rng_state(trainer.device) is not None:
            torch.cuda.set_rng_state(saved["cuda_rng"][world.rank], trainer.device)
    else:  # no saved stream for this rank: a fresh one (CUDA's too), still reproducible
        torch.manual_seed(elastic_seed(trainer.config.seed, world.rank, step))
    trainer.task.load_state(saved, exact)
    if world.rank == 0:
        rows = getattr(trainer.loader, "batch_size", None)
        saved_rows = dict(loader_state.get("layout") or {}).get("batch_size", rows)
        if isinstance(rows, int) and isinstance(saved_rows, int):
            before, now = saved_rows * saved_world, rows * world.world_size
            if before != now:
                print(
                    f"{trainer.config.desc}: resumed at step {step} with a global batch of "
                    f"{now} ({_ranks(world.world_size)} x batch size {rows}); it was saved with "
                    f"{before} ({_ranks(saved_world)} x {saved_rows}); each sample of the epoch "
                    "is still read once (an elastic resume). Scale the learning rate yourself "
                    "if it should follow the global batch",
                    file=sys.stderr,
                    flush=True,
                )
        for key, change in changed.items():
            print(
                f"{trainer.config.desc}: resumed at step {step} with {key} "
                f"{change['from']:g} -> {change['to']:g} (the checkpoint's optimizer had "
                f"{change['from']:g}; this run's {key} applies from here)",
                file=sys.stderr,
                flush=True,
            )
    loss = saved.get("last_loss")
    return Resumed(step, changed, float(loss) if isinstance(loss, (int, float)) else None)


def _ranks(n: int) -> str:
    return f"{n} rank" if n == 1 else f"{n} ranks"


SETTINGS = ("lr", "weight_decay")  # what a run's options set in its optimizer's groups


def configured_settings(optimizer: Any) -> list[dict[str, float]]:
    """Each parameter group's :data:`SETTINGS` as this run made them (before a checkpoint's
    are loaded over them): the lr is the schedule's base (``initial_lr``) where there is one."""
    if optimizer is None:
        return []
    return [
        {
            key: group.get("initial_lr", group[key]) if key == "lr" else group[key]
            for key in SETTINGS
            if key in group
        }
        for group in optimizer.param_groups
    ]


def keep_configured(
    optimizer: Any, scheduler: Any, configured: list[dict[str, float]]
) -> dict[str, dict[str, float]]:
    """Put this run's settings back where a loaded optimizer state replaced them.

    ``Optimizer.load_state_dict`` takes every group setting from the checkpoint, so a resume
    with another ``--lr`` trained on at the old one, silently. A changed lr under a schedule
    becomes the schedule's base (``base_lrs``, ``initial_lr``) and the current lr is scaled
    by the same factor: a multiplicative schedule (``LambdaLR``: base times a factor of the
    step) goes on from the same step at the new base.

    Returns:
        What changed: ``{key: {"from": the checkpoint's, "to": this run's}}`` (the first
        group that changed it).
    """
    changed: dict[str, dict[str, float]] = {}
    if optimizer is None:
        return changed
    for index, (group, wanted) in enumerate(zip(optimizer.param_groups, configured)):
        for key, value in wanted.items():
            had = group.get("initial_lr", group[key]) if key == "lr" else group[key]
            if had == value:
                continue
            changed.setdefault(key, {"from": had, "to": value})
            if key != "lr":
                group[key] = value
                continue
            group["lr"] = group["lr"] * value / had if had else value
            if "initial_lr" in group:
                group["initial_lr"] = value
            if scheduler is not None and hasattr(scheduler, "base_lrs"):
                scheduler.base_lrs[index] = value
    if "lr" in changed and scheduler is not None and hasattr(scheduler, "_last_lr"):
        scheduler._last_lr = [group["lr"] for group in optimizer.param_groups]
    return changed


def cuda_rng_state(device: torch.device) -> torch.Tensor | None:
    """The generator state of ``device`` where it is a CUDA device (dropout there draws from
    it, not from the CPU's); None elsewhere."""
    device = torch.device(device)
    return torch.cuda.get_rng_state(device) if device.type == "cuda" else None


def scaling(scaler: Any) -> bool:
    """Whether ``scaler`` is a GradScaler that scales (fp16 on CUDA): one with a state to keep."""
    return scaler is not None and bool(scaler.is_enabled())


def directory(trainer: Checkpointed) -> Path:
    """Where the trainer's checkpoint lives: ``out/checkpoint``."""
    if trainer.config.out is None:
        raise ValueError("checkpoints need LoopConfig.out, the run's folder")
    return trainer.config.out / "checkpoint"


def elastic_seed(seed: int, rank: int, step: int) -> int:
    """The torch seed of ``rank`` resuming at ``step`` on another world size."""
    return int(generator(seed, Salt.RESEED, rank, step).integers(2**63))
