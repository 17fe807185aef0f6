"""One training loop for every workload: the step is the workload's, the rest is shared.

Subclass :class:`Workload` (``step(batch) -> StepResult(loss, rows)`` and optional hooks), put it
in a :class:`Trainer` with the loader, model, optimizer and a :class:`LoopConfig`, and call
:meth:`Trainer.run`. Checkpoints keep the on-disk layout of :mod:`lading.train.state`.
"""

from __future__ import annotations

from lading.train.hooks import LoopConfig, LoopResult, StepResult, Workload
from lading.train.loop import Trainer
from lading.train.records import jsonable, write_summary

__all__ = [
    "LoopConfig",
    "LoopResult",
    "StepResult",
    "Trainer",
    "Workload",
    "jsonable",
    "write_summary",
]
