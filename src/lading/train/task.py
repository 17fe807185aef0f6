"""What the shared training loop asks of a training task, and what it is told and gives back.

A task (cross-encoder ranking, LSTM language model, next-item sessions, the bench) says how
one batch becomes a loss in :meth:`TrainingTask.step`; the loop does everything around it: the
optimizer update, logging, traces, checkpoints and resume. The other hooks have defaults that
do nothing, so a task overrides only what it needs. (A loader's *workload*,
:mod:`lading.loading.workload`, is what it reads and builds: another thing.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import torch


class StepResult(NamedTuple):
    """One batch's outcome.

    Attributes:
        loss: the scalar to back-propagate; None when there is nothing to learn (the bench's
            loader mode), and then the loop makes no update.
        rows: what the throughput counts for this batch (pairs, tokens, sessions).
    """

    loss: torch.Tensor | None
    rows: int


class TrainingTask:
    """Hooks of one training task; subclass and override :meth:`step` (the rest is optional)."""

    def step(self, batch: Any) -> StepResult:
        """Forward one batch (on this rank's share) and return its loss; no backward here."""
        raise NotImplementedError(f"{type(self).__name__} must define step(batch)")

    def trace(self, batch: Any) -> dict[str, Any]:
        """Fields identifying ``batch`` in the per-step trace (only called when tracing)."""
        return {}

    def on_epoch(self, epoch: int) -> None:
        """The loader has just moved on to ``epoch`` after finishing the previous one."""

    def evaluate(self, step: int) -> dict[str, Any]:
        """What is measured at ``step`` (a validation every ``eval_every`` steps), ``{}``
        where nothing is due; called on every rank after every step (it may reduce). The loop
        adds it to the step's log record, or writes it as a record of its own where the step
        logs none."""
        return {}

    def state(self) -> dict[str, Any]:
        """This rank's extra state to checkpoint, by key; each key is saved as a per-rank list."""
        return {}

    def load_state(self, saved: dict[str, Any], exact: bool) -> None:
        """Take back what :meth:`state` saved; ``exact`` False means an elastic resume."""


@dataclass
class LoopConfig:
    """How long to train and what to write.

    Attributes:
        total: optimizer steps to reach (a resumed run counts the saved ones).
        out: folder for ``log.jsonl``, ``trace-rank{R}.jsonl`` and ``checkpoint/``; None writes
            nothing (the bench).
        seed: the run's seed: every rank's torch RNG starts at ``seed + rank``, and an elastic
            resume reseeds from ``(seed, rank, step)``.
        log_every: steps between log records (0: none); the last step is always logged.
        checkpoint_every: steps between checkpoints (0: none, and none at the end either).
        resume: continue from ``out/checkpoint`` when one is there.
        trace: one JSON line per step and rank (loss, rows, fetch time, the workload's fields).
        progress: the progress bar on rank 0 (None: only on a terminal).
        desc: the progress bar's label; checkpoints record it (``written_by``), to name the run
            that wrote one whose weights do not fit a resumed run's model.
        rate_key: the log field of the summed throughput, e.g. ``"tokens_per_s"``.
        memory: log the memory of every rank's process tree (a gather per record).
        warmup: steps before the clock of :class:`LoopResult` starts.
        clip: gradient-norm clipping (None or 0: none).
        prefetch: on CUDA, copy the next batches on a side stream while the step runs
            (:class:`lading.device.DevicePrefetcher`); elsewhere it changes nothing.
        keep_on_resume: optimizer settings a resume keeps from the checkpoint (see
            :class:`lading.train.config.RunConfig`); the others are set to this run's.
        model_settings: what makes the model (its architecture and sizes, by the config's
            field names): saved in every checkpoint, and a resume whose settings differ is
            refused naming them (some, such as a GPT's heads, change no weight's shape).
        data_settings: what makes the loader's data (a cross-encoder's group size, sampling,
            negatives...; the flags' names): saved in every checkpoint, and where a resume's
            loader refuses the checkpoint's state, those that differ are named with it (the
            state names only a digest of the data).
    """

    total: int
    out: Path | None = None
    seed: int = 0
    log_every: int = 0
    checkpoint_every: int = 0
    resume: bool = False
    trace: bool = False
    progress: bool | None = None
    desc: str = "train"
    rate_key: str = "samples_per_s"
    memory: bool = True
    warmup: int = 0
    clip: float | None = None
    prefetch: bool = True
    keep_on_resume: tuple[str, ...] = ()
    model_settings: dict[str, Any] = field(default_factory=dict)
    data_settings: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.clip is not None:
            if not (0 <= self.clip < math.inf):
                raise ValueError(
                    f"clip={self.clip!r}: the gradients' largest norm is a finite number of at "
                    "least 0 (0 or None: no clipping)"
                )
            self.clip = float(self.clip) or None  # 0 clipped every gradient to nothing

    @classmethod
    def of(cls, settings: Any, total: int, **fields: Any) -> LoopConfig:
        """The loop's part of a workload's config: ``out``, ``seed``, ``log_every``,
        ``checkpoint_every``, ``resume``, ``trace``, ``progress``, ``prefetch``, ``clip`` and
        ``keep_on_resume`` where ``settings`` has them, then ``fields``."""
        shared = {k: getattr(settings, k) for k in _SHARED if hasattr(settings, k)}
        if shared.get("out") is not None:
            shared["out"] = Path(shared["out"])
        return cls(total, **{**shared, **fields})


_SHARED = (
    "out",
    "seed",
    "log_every",
    "checkpoint_every",
    "resume",
    "trace",
    "progress",
    "prefetch",
    "clip",
    "keep_on_resume",
)


@dataclass
class LoopResult:
    """Where the loop stopped and what it measured after the warm-up, on this rank.

    Attributes:
        steps: the step reached.
        epoch: the loader's epoch at the end.
        last_loss: the last step's loss (NaN without a loss).
        rows: rows stepped since the clock started.
        seconds: time since the clock started (CUDA synchronised).
        wait_s: of those, time spent waiting for batches.
        resumed: None for a run from scratch; else ``{"step": the checkpoint's, "changed":
            {"lr": {"from": the checkpoint's, "to": this run's}}}`` (settings of this run that
            replaced the checkpoint's optimizer's), which the summaries record.
    """

    steps: int
    epoch: int
    last_loss: float
    rows: int = 0
    seconds: float = 0.0
    wait_s: float = 0.0
    resumed: dict[str, Any] | None = None
