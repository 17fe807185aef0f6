"""A mid-epoch resume under the HF Trainer: what the Trainer's step count makes of it.

The lading loader resumes itself (``ignore_data_skip=True``), so the Trainer counts a resumed
epoch's batches from the resume, not from the epoch's start. Two consequences live here:

- a checkpoint of another layout (world size, batch size; workers may change) mid-epoch is refused
  (:func:`refuse_another_layout_mid_epoch`);
- the Trainer finds the epoch it resumes in as its global step // the steps of an epoch
  (``len()``, accumulated); after a resume that lost a step (below) that is not the loader's
  epoch, so the loader the Trainer reads numbers the Trainer's epochs as its own
  (:func:`as_the_trainer_counts`);
- with ``gradient_accumulation_steps`` not dividing the epoch's batch count, the epoch's last,
  partial accumulation is never stepped (the Trainer steps an epoch's last batch only when it
  is batch ``len()`` of the epoch): warned of at the resume
  (:func:`warn_of_a_regrouped_last_step`), and its gradient dropped at the epoch's end
  (:class:`DropUnsteppedGradients`), where the Trainer, which zeroes gradients only at
  ``train()``'s start and after each optimizer step, added it into the next epoch's first step.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from lading.errors import LoaderStateError, missing_package
from lading.loading.resumable import Resumable

try:
    from transformers import TrainerCallback
except ImportError:  # pragma: no cover - depends on the environment
    raise missing_package("lading.integrations.trainer_resume", "transformers", "trainer") from None


class DropUnsteppedGradients(TrainerCallback):
    """Drops, at an epoch's end, the gradient of micro-batches no optimizer step applied.

    The Trainer steps each epoch's last batch (batch ``len()``), so an uninterrupted epoch
    ends on a step and nothing is dropped. A resumed epoch ends ``len()`` minus the batches
    read before the resume into its count, so with ``gradient_accumulation_steps`` not
    dividing what is left its last micro-batches end on no step; their gradient stayed on the
    parameters and was added into the next epoch's first step (a reviewer: at 2 a step, 3
    batches in it, the leftover at double weight). Zeroed as the Trainer zeroes after a step
    (``model.zero_grad()`` on the model it trains, the DDP/FSDP wrapper where there is one),
    only where a micro-batch since the last step is pending, so accumulation within an
    epoch (and Accelerate's ``no_sync`` over it) is untouched.
    """

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer
        self.pending = False  # a micro-batch's gradient since the last optimizer step

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.pending = False  # the Trainer zeroes gradients as train() starts

    def on_substep_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.pending = True

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.pending = False

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not self.pending:
            return
        self.pending = False
        model = getattr(self.trainer, "model_wrapped", None) or self.trainer.model
        model.zero_grad()  # set_to_none, as the Trainer's own zero_grad after a step


def warn_of_a_regrouped_last_step(loader: Resumable, args: Any) -> None:
    """Say so where a mid-epoch resume loses the epoch's last optimizer step: under
    ``ignore_data_skip`` the Trainer counts the resumed epoch's batches from 0, so with
    ``gradient_accumulation_steps`` not dividing the epoch's batches the last, partial
    accumulation is computed and never applied, its gradient dropped at the epoch's end
    (:class:`DropUnsteppedGradients`; a reviewer: the docs' example, 7 batches an epoch at 2 a
    step, ended at step 3 of 4 when resumed)."""
    steps, batches = int(args.gradient_accumulation_steps), len(loader)
    read = batches - loader.remaining()
    if steps > 1 and 0 < read < batches and batches % steps:
        warnings.warn(
            f"resumed {read} batches into an epoch of {batches} with "
            f"gradient_accumulation_steps={steps}: the Trainer counts this epoch's batches "
            f"from here, so its last {batches % steps} batch(es) are read but never applied "
            "as a step (their gradient is dropped at the epoch's end, their loss still counts "
            "in the next logged loss), and its logged epoch counts from here. For exact "
            f"resumes make the epoch's batch count a multiple of {steps} (batch size, "
            "drop_partial_batch), or resume from a checkpoint at an epoch's end",
            stacklevel=3,
        )


def refuse_another_layout_mid_epoch(loader: Resumable, state: Mapping[str, Any]) -> None:
    """Refuse a mid-epoch ``state`` of another layout (world size, batch size): the
    loader would read what that layout left, re-dealt (an elastic resume), but the Trainer
    counts the epoch from ``len()`` and its global step, and skipped the rest of the epoch
    (a reviewer's 1-process checkpoint at step 5 of 13, resumed on 2 ranks: rank 0 read 0 of
    its 4 remaining batches, then 4 and 3 of 7 in the next epochs).

    Raises:
        LoaderStateError: naming both layouts and the fix.
    """
    now = loader.state_dict()["layout"]
    at_start = not state.get("batches") and not state.get("segment")
    if dict(state.get("layout", {})) == dict(now) or at_start or loader.remaining() == 0:
        return  # (at an epoch's start or end the Trainer's count holds)
    raise LoaderStateError(
        f"the checkpoint's loader was saved with {dict(state.get('layout', {}))}, this run has "
        f"{dict(now)}; the HF Trainer counts the epoch's steps from len() and its global "
        "step, so resume a mid-epoch checkpoint with the saved world size and batch size "
        "(any workers), or resume from a checkpoint at an epoch's end"
    )


class TrainerEpochs:
    """``loader`` as the HF Trainer reads it where the Trainer numbers epochs ``offset`` below
    the loader's: ``set_epoch(e)`` goes to the loader's epoch ``e + offset``, and where the
    run is ``epochs`` epochs long (``num_train_epochs``; None: ``max_steps`` bounds it), an
    epoch past them is empty (the Trainer then stops, as at the end of its data); everything
    else is the loader's."""

    def __init__(self, loader: Resumable, offset: int, epochs: int | None) -> None:
        self.loader, self.offset, self.epochs = loader, offset, epochs
        self.past = False  # the epoch set is past the run's last

    def set_epoch(self, epoch: int) -> None:
        own = epoch + self.offset
        self.past = self.epochs is not None and own >= self.epochs
        if not self.past:
            self.loader.set_epoch(own)

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[Any]:
        return iter(()) if self.past else iter(self.loader)

    def __getattr__(self, name: str) -> Any:
        if name == "loader":  # (not set yet: a copy being made)
            raise AttributeError(name)
        return getattr(self.loader, name)


def as_the_trainer_counts(
    loader: Resumable, checkpoint: str | os.PathLike[str], args: Any
) -> Resumable | TrainerEpochs:
    """``loader``, just restored from ``checkpoint``, as the Trainer resuming from it will
    read it. The Trainer takes the epoch it resumes in to be its global step // the steps of
    an epoch (``len()`` batches, ``gradient_accumulation_steps`` a step), and calls
    ``set_epoch`` of it. That is the loader's own epoch (the next one where the state ended
    its epoch) unless a resume before this one lost a step (:func:`warn_of_a_regrouped_last_step`):
    the Trainer then counted one epoch short or over, read no batch at all or an epoch twice
    (a reviewer: 0 batches of epoch 2 resumed from its step 7). There the Trainer's epochs are
    renumbered to the loader's (:class:`TrainerEpochs`), and the run ends with the loader's
    last epoch (``num_train_epochs``) or at ``max_steps``, as asked.
    """
    state = Path(checkpoint) / "trainer_state.json"
    try:
        step = int(json.loads(state.read_text())["global_step"])
    except (OSError, ValueError, KeyError, TypeError):
        return loader  # no state of the Trainer's: it starts at epoch 0 and step 0 too
    accumulation = max(1, int(args.gradient_accumulation_steps))
    per_epoch = max(-(-len(loader) // accumulation), 1)  # the Trainer's own rounding
    own = loader.epoch + (1 if loader.remaining() == 0 else 0)
    offset = own - step // per_epoch
    epochs = None if args.max_steps > 0 else math.ceil(args.num_train_epochs)
    return loader if offset == 0 else TrainerEpochs(loader, offset, epochs)
