"""One training loop for every task: the step is the task's, the rest is shared.

Subclass :class:`TrainingTask` (``step(batch) -> StepResult(loss, rows)`` and optional hooks),
put it in a :class:`Trainer` with the loader, model, optimizer and a :class:`LoopConfig`, and
call :meth:`Trainer.run`. Checkpoints keep the on-disk layout of :mod:`lading.train.state`.

``TrainingTask`` was called ``Workload``, the word :mod:`lading.loading` uses for what a loader
reads and builds; ``lading.train.Workload`` still answers, with a ``DeprecationWarning``.
"""

from __future__ import annotations

import warnings
from typing import Any

from lading.train.loop import Trainer
from lading.train.records import jsonable, write_summary
from lading.train.task import LoopConfig, LoopResult, StepResult, TrainingTask


def __getattr__(name: str) -> Any:
    if name == "Workload":  # the old name of TrainingTask
        warnings.warn(
            "lading.train.Workload is now lading.train.TrainingTask (a loader's workload is "
            "another thing); subclass TrainingTask",
            DeprecationWarning,
            stacklevel=2,
        )
        return TrainingTask
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "LoopConfig",
    "LoopResult",
    "StepResult",
    "Trainer",
    "TrainingTask",
    "jsonable",
    "write_summary",
]
