"""A mid-epoch resume's last, partial accumulation under the HF Trainer: dropped, not leaked.

Under ``ignore_data_skip`` the Trainer counts a resumed epoch's batches from the resume, so with
``gradient_accumulation_steps=2`` and an odd number of batches left its last batch is never
stepped. Its gradient was kept, though: the Trainer zeroes gradients only at ``train()``'s start
and after each optimizer step, so it was added into the next epoch's first step (a reviewer: 3
batches in that step, the leftover at double weight). The loss is ``w * sum(ids)``, so each
step's gradient names the batches it holds (the mean of their id sums: the Trainer divides by
the step's batch count).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")
pytest.importorskip("accelerate")

pytestmark = pytest.mark.e2e  # a framework's trainer: see the e2e marker in pyproject.toml

ITEMS, BATCH, STEPS = 28, 4, 2  # 7 batches an epoch at 2 a step: the docs' example


def train(
    out: Path, resume: Path | None = None, epochs: int = 2, warned: bool = True
) -> tuple[list[int], list[float]]:
    """``epochs`` epochs; the id sum of each batch read, and of the batches each optimizer
    step holds (``warned``: a resume says its last accumulation is lost)."""
    import torch
    from transformers import TrainerCallback, TrainingArguments

    import lading
    from lading.integrations.hf_trainer import LadingTrainer

    read: list[int] = []
    stepped: list[float] = []

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))

        def forward(self, ids: Any = None, **kwargs: Any) -> Any:
            read.append(int(ids.sum()))
            return {"loss": (self.w * ids.sum().float()).sum()}

    class Record(TrainerCallback):
        def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            stepped.append(round(float(model.w.grad), 3))

    model = Model()
    loader = lading.loader(
        list(range(ITEMS)), BATCH, seed=0, collate_fn=lambda b: {"ids": torch.tensor(b)}
    )
    args = TrainingArguments(
        str(out),
        num_train_epochs=epochs,
        gradient_accumulation_steps=STEPS,
        learning_rate=0.0,  # the gradient does not depend on w anyway
        max_grad_norm=0,
        save_strategy="steps",
        save_steps=1,
        logging_strategy="no",
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
    )
    trainer = LadingTrainer(model=model, args=args, train_loader=loader)
    trainer.add_callback(Record())
    with pytest.warns(UserWarning, match="accumulation") if resume and warned else _nothing():
        trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    return read, stepped


def _nothing() -> Any:
    import contextlib

    return contextlib.nullcontext()


def per_step(read: list[int], shape: list[int]) -> list[float]:
    """The mean id sum of ``read``'s batches grouped into steps of ``shape`` batches."""
    sums, at = [], 0
    for size in shape:
        sums.append(round(sum(read[at : at + size]) / size, 3))
        at += size
    return sums


def test_an_uninterrupted_run_steps_every_batch_once(tmp_path: Path) -> None:
    """The Trainer steps each epoch's last, partial accumulation itself: nothing dropped."""
    read, stepped = train(tmp_path)
    assert len(read) == 14
    assert stepped == per_step(read, [2, 2, 2, 1] * 2)


def test_a_resumed_epochs_unstepped_leftover_is_dropped_not_carried(tmp_path: Path) -> None:
    """Resumed after step 1 (2 of 7 batches): steps 2-3 as before, the epoch's 7th batch
    never stepped, and the next epoch's steps exactly the uninterrupted run's (its first step
    held (54 + 119) / 2 before: the leftover carried in)."""
    read, stepped = train(tmp_path / "whole")
    again, resumed = train(tmp_path / "resumed", tmp_path / "whole" / "checkpoint-1")
    assert again == read[2:]  # the loader resumed exactly
    assert resumed == stepped[1:3] + stepped[4:]


@pytest.mark.slow  # ~4-6 s: the default run keeps under its 10 minutes
def test_a_resume_after_one_that_lost_a_step_reads_the_loaders_next_epoch(tmp_path: Path) -> None:
    """A resume that lost a step (the epoch's 7th batch unstepped) leaves the run a step
    behind the Trainer's count: its checkpoint-7 ends loader epoch 1, and the Trainer takes
    step 7 for epoch 1 (7 // 4 steps an epoch). Resumed from it, the run read no batch and
    stopped (the Trainer's epoch 1 was the loader's finished one; a reviewer); now it reads
    epoch 2 whole, as the uninterrupted run did, and ends there (3 epochs asked)."""
    read, _ = train(tmp_path / "whole", epochs=3)
    train(tmp_path / "resumed", tmp_path / "whole" / "checkpoint-1", epochs=3)
    again, _ = train(
        tmp_path / "again", tmp_path / "resumed" / "checkpoint-7", epochs=3, warned=False
    )
    assert len(read) == 21 and again == read[14:]
