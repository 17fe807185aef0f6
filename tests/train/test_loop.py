"""The training loop tells the task of every new epoch, also of one that starts right after
a checkpoint taken at the end of an epoch (the LM's hidden state is reset there)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import lading
from lading.train import LoopConfig, StepResult, Trainer, TrainingTask
from lading.world import World


class Events(TrainingTask):
    """Records each batch and each ``on_epoch`` in the order the loop makes them."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model, self.seen = model, []  # type: list[Any]

    def step(self, batch: Any) -> StepResult:
        self.seen.append(batch.tolist())
        return StepResult((self.model.weight**2).sum(), len(batch))

    def on_epoch(self, epoch: int) -> None:
        self.seen.append(f"epoch {epoch}")


def run(out: Path, total: int) -> list[Any]:
    model = torch.nn.Linear(1, 1)
    events = Events(model)
    data = lading.loader(list(range(12)), 4, seed=1, world=World())  # 3 batches an epoch
    config = LoopConfig(total, out=out, checkpoint_every=3, resume=True, progress=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    Trainer(events, data, config, World(), torch.device("cpu"), model, optimizer).run()
    return events.seen


def test_a_checkpoint_at_the_end_of_an_epoch_resumes_into_the_next_one_announced(
    tmp_path: Path,
) -> None:
    whole = run(tmp_path / "whole", 7)
    assert whole[3] == "epoch 1" and whole[7] == "epoch 2" and len(whole) == 9
    head = run(tmp_path / "cut", 3)  # the checkpoint at step 3 is the end of epoch 0
    assert head == whole[:3]
    assert run(tmp_path / "cut", 7) == whole[3:]  # "epoch 1" first, then its batches


def test_the_old_name_of_a_training_task_still_answers_with_a_warning() -> None:
    """``lading.train.Workload`` (the word a loader's workload also used) is now
    ``TrainingTask``; code subclassing the old name keeps working, told the new one."""
    import lading.train

    with pytest.warns(DeprecationWarning, match="TrainingTask"):
        old = lading.train.Workload  # type: ignore[attr-defined]
    assert old is TrainingTask
    with pytest.raises(AttributeError, match="Nothing"):
        lading.train.Nothing  # type: ignore[attr-defined]  # noqa: B018
