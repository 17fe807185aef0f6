"""The HF ``Trainer`` reading a lading loader, resumable through the Trainer's own checkpoints.

``LadingTrainer(model=..., args=..., train_loader=lading.loader(...))`` (or any lading loader:
``LanguageModelLoader(...)``, ``PartitionedParquet(...)``) trains from the loader as it is: each
rank reads its own disjoint, equal share (the Trainer does not wrap the loader in a sampler of
its own, nor hand it to Accelerate to shard again), and ``set_epoch`` reshuffles and redraws
per-epoch negatives. Every checkpoint the Trainer writes gets the loader's ``state_dict()`` as
``lading_loader.json``, before the Trainer's own files; ``trainer.train(
resume_from_checkpoint=...)`` loads it, so the resumed run reads exactly the batches the
interrupted one had not yet read, in the same order.

The Trainer's own way of resuming data, skipping the first batches of the epoch, would rebuild
the DataLoader from its parts and lose the loader's position; the trainer sets
``args.ignore_data_skip = True`` because the loader resumes itself (no batch is read twice to
be skipped). One limit of that: the Trainer then counts a resumed epoch's batches from the
resume, so with ``gradient_accumulation_steps > 1`` on an epoch whose batch count is not a
multiple of it the last, partial accumulation of that epoch is not applied as a step (warned
of at the resume; its gradient is dropped at the epoch's end, not carried into the next
epoch's first step: :mod:`lading.integrations.trainer_resume`), and the epoch the Trainer logs
counts from the resume; pick equal multiples when exact resumes matter. A mid-epoch
checkpoint of another layout (world size, batch size; not workers) is refused: the Trainer would
skip what the re-dealt loader has left.

:class:`LadingTrainerMixin` holds all of it for other ``Trainer`` subclasses (the
sentence-transformers trainers in :mod:`lading.integrations.sentence_transformers`).

The ``dataloader_*`` arguments and ``train_sampling_strategy`` (``group_by_length``) shape a
DataLoader the Trainer would build; the lading loader is built by its caller, so one set to
something the loader does not do is refused, naming where it goes instead
(:mod:`lading.integrations.trainer_args`).

On a batch of training groups (:class:`~lading.ir.CrossEncoderCollator`'s, which carries
``group_size``) ``LadingTrainer.compute_loss`` is the listwise loss (``ranking_loss="bce"``:
pointwise), never the model's own loss on ``labels`` (a ``BertForSequenceClassification``
with one label would train MSE on them). Its scale follows the Trainer's convention under
gradient accumulation: when the Trainer counts ``num_items_in_batch`` (models whose
``forward`` takes ``**kwargs``) the loss is the sum over this batch's groups divided by the
groups of the whole accumulated step, and the Trainer does not divide it again; otherwise it is
this batch's mean and the Trainer divides by ``gradient_accumulation_steps``. Either way one
optimizer step of ``k`` accumulated batches of ``b`` groups trains and logs what one batch of
``k * b`` groups would.

Language-model batches with document boundaries (``Packed``/``Windows(..., boundaries=True)``:
a :class:`~lading.lm.DocumentBatch`) reach a transformers model as its keyword arguments
(:func:`~lading.integrations.transformers_lm.to_hf_kwargs` for the model's
``config._attn_implementation``: labels aligned with ``input_ids``, ``-100`` where nothing is
scored, restarting ``position_ids``, the mask that attention reads), converted as the Trainer
takes each batch, so its ``num_items_in_batch`` counts their scored labels as it counts
``DataCollatorWithFlattening``'s. A ``compute_loss`` of your own gets them as
:class:`~lading.integrations.transformers_lm.ModelInputs`, which also reads as the
``DocumentBatch`` (``to_hf_kwargs(inputs, attn)``, ``inputs.loss_mask``: a ``compute_loss``
written when the trainer handed the batch itself). A model without such a config gets the
``DocumentBatch`` itself, on the device, for a ``compute_loss`` of its own; the Trainer's own
``compute_loss`` (``model(**inputs)``) refuses a batch that is no mapping, naming the fix.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from lading.errors import missing_package

try:
    from transformers import Trainer, TrainerCallback
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint
except ImportError:  # pragma: no cover - depends on the environment
    raise missing_package("lading.integrations.hf_trainer", "transformers", "trainer") from None

from lading.integrations.trainer_args import (
    check_trainer_arguments,
    gpus_per_process,
    loader_batch_size,
)
from lading.integrations.trainer_resume import (
    DropUnsteppedGradients,
    as_the_trainer_counts,
    refuse_another_layout_mid_epoch,
    warn_of_a_regrouped_last_step,
)
from lading.integrations.transformers_lm import ModelInputs, model_inputs
from lading.lm.boundaries import DocumentBatch
from lading.loading.resumable import Resumable

LOADER_FILE = "lading_loader.json"


def save_loader_state(loader: Resumable, folder: str | os.PathLike[str]) -> Path:
    """Write ``loader.state_dict()`` as ``folder/lading_loader.json`` (atomically)."""
    path = Path(folder) / LOADER_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{LOADER_FILE}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(loader.state_dict(), indent=1))
    tmp.replace(path)
    return path


def load_loader_state(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """The loader state saved in checkpoint ``folder``; FileNotFoundError saying why if none."""
    path = Path(folder) / LOADER_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"{folder} has no {LOADER_FILE}: it was not written by a LadingTrainer (or a "
            "Trainer of LadingTrainerMixin), so the loader position is unknown. Resume from a "
            "checkpoint of such a trainer, or start training afresh."
        )
    state: dict[str, Any] = json.loads(path.read_text())
    return state


class LoaderStateCallback(TrainerCallback):
    """Saves the trainer's loader position into ``output_dir/checkpoint-N`` at every save: for
    a Trainer of your own with a ``lading_loader``. :class:`LadingTrainerMixin` needs none (it
    writes the position where the Trainer saves, a search's trial folder included).

    The position is the same on every rank (all take the same batches), so the process that
    saves checkpoints (``args.should_save``) writes it, beside ``trainer_state.json``.
    """

    def __init__(self, trainer: LadingTrainerMixin) -> None:
        self.trainer = trainer

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        loader = self.trainer.lading_loader
        if loader is None or not args.should_save:
            return
        folder = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
        save_loader_state(loader, folder)


class LadingTrainerMixin:
    """Makes a ``transformers.Trainer`` subclass train from a lading loader, resumably.

    Call :meth:`setup_lading` from ``__init__`` after the Trainer's; a subclass that builds its
    loader itself (from its collator, its batch size) overrides :meth:`make_lading_loader`.
    The Trainer iterates the lading loader itself: its ``len()`` is the epoch's batch count (the
    Trainer plans its steps from it), and ``set_epoch`` of the epoch a just-restored state
    stands in keeps that position (:meth:`lading.loading.Loader.set_epoch`).
    """

    args: Any
    _train_batch_size: int
    lading_loader: Resumable | None
    _lading_resume: tuple[str | os.PathLike[str], dict[str, Any]] | None

    def setup_lading(self, loader: Resumable | None) -> None:
        self.lading_loader = loader
        if loader is not None:
            check_trainer_arguments(self.args, loader)  # refused when made, not at train()
            self.adopt_batch_size(loader)
        self._lading_resume = None
        self.args.ignore_data_skip = True  # the loader resumes itself; see the module docstring
        self.add_callback(DropUnsteppedGradients(self))  # type: ignore[attr-defined]

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        """The Trainer's, with the loader's position written into the folder it saves first:
        a hyperparameter search's trial saves in ``run-<trial>/`` and a push to the Hub uploads
        the folder before any ``on_save`` callback runs, so a callback writing into
        ``output_dir/checkpoint-N`` (:class:`LoaderStateCallback`) left those without it."""
        loader = self.lading_loader
        if loader is not None and self.args.should_save:
            run = self._get_output_dir(trial=trial)  # type: ignore[attr-defined]
            step = self.state.global_step  # type: ignore[attr-defined]
            save_loader_state(loader, Path(run) / f"{PREFIX_CHECKPOINT_DIR}-{step}")
        super()._save_checkpoint(model, trial)  # type: ignore[misc]

    def _save(self, output_dir: str | None = None, state_dict: Any = None) -> None:
        """The Trainer's, but a collator's ``tokenizers.Tokenizer`` (lading's collators',
        as ``data_collator``) saved as its ``tokenizer.json``: the Trainer calls
        ``save_pretrained`` on it, which it lacks, and the first checkpoint failed half
        written (no ``trainer_state.json``)."""
        collator = getattr(self, "data_collator", None)
        tok = getattr(collator, "tokenizer", None)
        plain = tok is not None and not hasattr(tok, "save_pretrained")
        if not plain or getattr(self, "processing_class", None) is not None:
            super()._save(output_dir, state_dict)  # type: ignore[misc]
            return
        self.data_collator = None  # (the Trainer's rule skipped for it; set back below)
        try:
            super()._save(output_dir, state_dict)  # type: ignore[misc]
        finally:
            self.data_collator = collator
        if self.args.should_save and tok is not None:
            tok.save(str(Path(output_dir or self.args.output_dir) / "tokenizer.json"))

    def adopt_batch_size(self, loader: Resumable) -> None:
        """``per_device_train_batch_size`` at its default gives way to the loader's batch size
        (another value is refused): in a copy of the arguments, so that the Trainer's logs,
        sample counts and ``trainer_state.json`` say what it trains and the caller's
        ``TrainingArguments`` stay as given (another trainer may share them)."""
        size, gpus = loader_batch_size(loader), gpus_per_process(self.args)
        if size is None or size == self.args.train_batch_size or size % gpus:
            return
        self.args = copy.copy(self.args)
        self.args.per_device_train_batch_size = size // gpus  # DataParallel splits a batch
        self._train_batch_size = size

    def make_lading_loader(self) -> Resumable:
        raise ValueError(
            f"{type(self).__name__} has no loader: pass train_loader=lading.loader(...)"
        )

    def get_train_dataloader(self) -> Resumable:
        """The lading loader itself (made on first use), at the checkpoint's position when
        resuming: no DataLoader around it (its old ``.loader`` names this spelling); where the
        Trainer will count the resumed epoch otherwise, the loader with the Trainer's epochs
        numbered as its own (:func:`~lading.integrations.trainer_resume.as_the_trainer_counts`)."""
        if self.lading_loader is None:
            made = self.make_lading_loader()
            check_trainer_arguments(self.args, made)
            self.lading_loader = made
        if self._lading_resume is not None:
            (checkpoint, state), self._lading_resume = self._lading_resume, None
            self.lading_loader.load_state_dict(state)
            refuse_another_layout_mid_epoch(self.lading_loader, state)
            warn_of_a_regrouped_last_step(self.lading_loader, self.args)
            return as_the_trainer_counts(self.lading_loader, checkpoint, self.args)
        return self.lading_loader

    def train(self, resume_from_checkpoint: str | bool | None = None, **kwargs: Any) -> Any:
        """``Trainer.train``; a checkpoint resumed from also gives the loader its position."""
        if resume_from_checkpoint is True:
            resume_from_checkpoint = get_last_checkpoint(self.args.output_dir)
            if resume_from_checkpoint is None:
                raise ValueError(f"no checkpoint found in {self.args.output_dir} to resume from")
        if isinstance(resume_from_checkpoint, (str, os.PathLike)):
            # read before the Trainer loads anything, so a checkpoint without it fails first
            state = load_loader_state(resume_from_checkpoint)
            self._lading_resume = (resume_from_checkpoint, state)
        try:
            return super().train(resume_from_checkpoint=resume_from_checkpoint or None, **kwargs)  # type: ignore[misc]
        finally:  # its workers and threads end with train(), as the Trainer's DataLoader's do
            close = getattr(self.lading_loader, "close", None)
            if callable(close):
                close()


RANKING_LOSSES: tuple[str, ...] = ("bce", "listwise")


def not_keywords(batch: Any, model: nn.Module) -> str:
    """Why the Trainer's ``model(**inputs)`` cannot take ``batch`` (no mapping), and the fix."""
    if isinstance(batch, DocumentBatch):
        return (
            f"LadingTrainer hands a DocumentBatch to a transformers model as its keyword "
            f"arguments, by the model's config._attn_implementation; {type(model).__name__} "
            "has none, so the Trainer's compute_loss (model(**inputs)) cannot call it: train a "
            "transformers causal LM, or override compute_loss to train from the DocumentBatch "
            "(labels already shifted, loss_mask where they count)"
        )
    return (
        f"the Trainer calls model(**inputs), and this batch is a {type(batch).__name__}, no "
        "mapping: for a transformers causal LM build the loader with boundaries=True "
        "(Windows(seq_len, boundaries=True) or Packed(seq_len, boundaries=True)), give the "
        "loader a collate_fn that returns a dict, or override compute_loss"
    )


def _a_score_a_row(logits: Any, labels: Any, size: int) -> bool:
    """Whether ``logits`` and ``labels`` are one value a row of whole groups of ``size`` (a
    ranker's): a model's several outputs, or several logits a row, are left as they are."""
    if not (torch.is_tensor(logits) and torch.is_tensor(labels)):
        return False
    rows = labels.numel()
    flat = logits.dim() == 1 or (logits.dim() == 2 and logits.shape[1] == 1)
    return labels.dim() == 1 and flat and logits.shape[0] == rows and rows % size == 0


class LadingTrainer(LadingTrainerMixin, Trainer):  # type: ignore[misc]
    """``transformers.Trainer`` training from ``train_loader`` (a :func:`lading.loader` or any
    lading loader: ``PartitionedParquet(...)``, ``LanguageModelLoader(...)``).

    Everything else is the Trainer's: pass ``model``, ``args`` and the rest as usual. Batches of
    training groups train ``ranking_loss`` (see the module docstring); any other batch trains
    the Trainer's own way (the model's loss, or ``compute_loss_func``).

    Args:
        train_loader: the loader to train from.
        ranking_loss: ``"listwise"`` (cross-entropy over each group, relevant document first)
            or ``"bce"`` (binary cross-entropy on each row's label).
    """

    def __init__(
        self,
        *args: Any,
        train_loader: Resumable | None = None,
        ranking_loss: str = "listwise",
        **kwargs: Any,
    ):
        if ranking_loss not in RANKING_LOSSES:
            raise ValueError(
                f"unknown ranking_loss {ranking_loss!r}; choose from {sorted(RANKING_LOSSES)}"
            )
        super().__init__(*args, **kwargs)
        self.ranking_loss = ranking_loss
        self.setup_lading(train_loader)

    def get_batch_samples(
        self, epoch_iterator: Iterator[Any], num_batches: int, device: torch.device
    ) -> tuple[list[Any], Any]:
        """The Trainer's, with each :class:`~lading.lm.DocumentBatch` as the model's inputs
        (:func:`~lading.integrations.transformers_lm.model_inputs`) before it counts labels."""
        batches = (self.as_model_inputs(batch) for batch in epoch_iterator)
        return super().get_batch_samples(batches, num_batches, device)

    def as_model_inputs(self, batch: Any) -> Any:
        """A :class:`~lading.lm.DocumentBatch` as the model takes it; any other batch as is."""
        if isinstance(batch, DocumentBatch):
            return model_inputs(batch, self.model, self.args.device)
        return batch

    def _prepare_input(self, data: Any) -> Any:
        # a NamedTuple cannot be rebuilt from one iterable, as the Trainer rebuilds tuples,
        # nor ModelInputs from one mapping (it keeps its DocumentBatch too)
        if isinstance(data, DocumentBatch):
            return data.to(self.args.device)
        if isinstance(data, ModelInputs):
            prepared = {key: self._prepare_input(value) for key, value in data.items()}
            return ModelInputs(prepared, data.document_batch.to(self.args.device))
        return super()._prepare_input(data)

    def compute_loss(
        self,
        model: nn.Module,
        inputs: dict[str, Any],
        return_outputs: bool = False,
        num_items_in_batch: torch.Tensor | int | None = None,
    ) -> Any:
        """The ranking loss of a batch of groups, at the Trainer's scale; else the Trainer's."""
        if not isinstance(inputs, Mapping):
            raise ValueError(not_keywords(inputs, model))
        if "group_size" not in inputs or self.compute_loss_func is not None:
            self.__dict__.pop("loss_is_scaled_for_ga", None)  # the class's rule again
            return super().compute_loss(
                model, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch
            )
        if "input_ids" not in inputs:
            raise ValueError(
                "LadingTrainer scores groups from input_ids: build the collator with "
                f"emit='wide' (this batch has {sorted(inputs)})"
            )
        outputs = model(
            input_ids=inputs["input_ids"],
            attention_mask=inputs["attention_mask"],
            token_type_ids=inputs.get("token_type_ids"),
        )
        logits = outputs if torch.is_tensor(outputs) else outputs["logits"]
        total, items = self.summed_ranking_loss(logits, inputs["labels"], inputs["group_size"])
        if num_items_in_batch is None:  # the Trainer divides by gradient_accumulation_steps
            loss, self.loss_is_scaled_for_ga = total / items, False
        else:  # counted rows (labels) of the whole accumulated step, on every rank
            per_item = 1 if self.ranking_loss == "bce" else int(inputs["group_size"])
            loss, self.loss_is_scaled_for_ga = total / (num_items_in_batch / per_item), True
            if self.args.average_tokens_across_devices:
                # as Trainer.compute_loss: the count is over all ranks and DDP averages the
                # gradients over them, so scale back up by the ranks sharing the count
                gpus = self.args.n_gpu
                loss = loss * (
                    self.accelerator.num_processes // self.get_tp_size() if gpus <= 1 else gpus
                )
        if not return_outputs:
            return loss
        # a model output, as the Trainer's prediction step reads one: a bare tensor there was
        # cut as ``outputs[1:]`` (the loss's place), dropping the first score of every batch
        return loss, (outputs if isinstance(outputs, Mapping) else {"logits": logits})

    def prediction_step(
        self,
        model: nn.Module,
        inputs: dict[str, Any],
        prediction_loss_only: bool,
        ignore_keys: list[str] | None = None,
    ) -> Any:
        """The Trainer's, with a batch of groups' scores and labels as one row a group
        (``[groups, group_size]``): the Trainer and Accelerate take the first dimension for
        the dataset's items, and cut the last batch of an epoch to the items left, so rows
        there lost all but the first group's (37 scores for 40 rows)."""
        loss, logits, labels = super().prediction_step(
            model, inputs, prediction_loss_only, ignore_keys=ignore_keys
        )
        size = inputs.get("group_size") if isinstance(inputs, Mapping) else None
        if isinstance(size, int) and size > 0 and _a_score_a_row(logits, labels, size):
            assert logits is not None and labels is not None  # (tensors, checked)
            logits, labels = logits.reshape(-1, size), labels.reshape(-1, size)
        return loss, logits, labels

    def summed_ranking_loss(
        self, logits: torch.Tensor, labels: torch.Tensor, group_size: int
    ) -> tuple[torch.Tensor, int]:
        """The loss summed over this batch's items (groups, or rows for bce) and their count."""
        rows = labels.numel()
        if logits.numel() != rows:
            raise ValueError(
                f"the model gave {logits.numel()} logits for {rows} rows: a ranker needs one "
                "score a row (num_labels=1)"
            )
        logits = logits.reshape(-1).float()
        if self.ranking_loss == "bce":
            bce = nn.functional.binary_cross_entropy_with_logits
            return bce(logits, labels.float(), reduction="sum"), rows
        grouped = logits.view(-1, int(group_size))
        target = torch.zeros(grouped.shape[0], dtype=torch.long, device=logits.device)
        return nn.functional.cross_entropy(grouped, target, reduction="sum"), grouped.shape[0]


__all__ = [
    "LOADER_FILE",
    "RANKING_LOSSES",
    "LadingTrainer",
    "LadingTrainerMixin",
    "LoaderStateCallback",
    "load_loader_state",
    "save_loader_state",
]
