"""sentence-transformers' trainers (v4+) training on lading training groups.

``LadingSentenceTransformerTrainer`` and ``LadingCrossEncoderTrainer`` are
``SentenceTransformerTrainer`` and ``CrossEncoderTrainer`` given ``train_groups=`` (a
:class:`~lading.ir.TrainingGroups`) instead of a static ``train_dataset``:

- rows come from the store in a sentence-transformers format (``row_format``: ``"n-tuple"``
  for MultipleNegativesRankingLoss, ``"labeled-pair"`` for the cross-encoder's
  BinaryCrossEntropyLoss, ``"triplet"``, ``"labeled-list"``; :mod:`lading.integrations.rows`);
- negatives are redrawn every epoch from ``(seed, epoch, item)``, the same on every rank, where
  ``mine_hard_negatives`` fixes them for the whole run;
- each DDP rank reads a disjoint, equal share through :func:`lading.loader` (the trainer does
  not add a sampler of its own), and a run resumed from a trainer checkpoint continues at the
  loader's exact position (:mod:`lading.integrations.hf_trainer`).

sentence-transformers tokenizes text in its collator (bi-encoders) or its losses
(cross-encoders), so the store hands it text. ``per_device_train_batch_size`` counts *groups*
per batch: a batch has that many groups' rows (``rows_per_group`` each).

Under DDP, give the cross-encoder trainer ``ddp_find_unused_parameters=False``: s-t's
CrossEncoder is no ``PreTrainedModel``, so the Trainer turns the unused-parameter search on, and
DDP then fails marking the classifier's parameters ready twice (s-t 6.2, torch 2.13; the
bi-encoder needs the search left on for BERT's unused pooler).
"""

from __future__ import annotations

from typing import Any

import torch
from sentence_transformers import SentenceTransformerTrainer
from sentence_transformers.cross_encoder import CrossEncoderTrainer

from lading.integrations.hf_trainer import LadingTrainerMixin
from lading.integrations.rows import FlattenRows, GroupRows, check_format
from lading.loading.loader import ResumableLoader


class GroupsTrainerMixin(LadingTrainerMixin):
    """Builds the loader from training groups and the trainer's own collator and arguments."""

    data_collator: Any

    def setup_groups(
        self, groups: Any, row_format: str, train_loader: ResumableLoader | None
    ) -> None:
        if groups is None and train_loader is None:
            raise ValueError("pass train_groups=TrainingGroups(...) (or train_loader=)")
        self.train_groups, self.row_format = groups, check_format(row_format)
        self.setup_lading(train_loader)

    def make_lading_loader(self) -> ResumableLoader:
        """``lading.loader`` over the groups' rows, batched by the trainer's own collator."""
        from lading.dataloader import loader

        args = self.args
        return loader(
            GroupRows(self.train_groups, self.row_format),
            batch_size=args.per_device_train_batch_size,
            collate_fn=FlattenRows(self.data_collator),
            num_workers=args.dataloader_num_workers,
            pin_memory=bool(args.dataloader_pin_memory and torch.cuda.is_available()),
            seed=args.seed,
        )


class LadingSentenceTransformerTrainer(GroupsTrainerMixin, SentenceTransformerTrainer):  # type: ignore[misc]
    """``SentenceTransformerTrainer`` on ``train_groups`` (default rows: ``"n-tuple"``)."""

    def __init__(
        self,
        *args: Any,
        train_groups: Any = None,
        row_format: str = "n-tuple",
        train_loader: ResumableLoader | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.setup_groups(train_groups, row_format, train_loader)


class LadingCrossEncoderTrainer(GroupsTrainerMixin, CrossEncoderTrainer):  # type: ignore[misc]
    """``CrossEncoderTrainer`` on ``train_groups`` (default rows: ``"labeled-pair"``, what its
    default BinaryCrossEntropyLoss trains on)."""

    def __init__(
        self,
        *args: Any,
        train_groups: Any = None,
        row_format: str = "labeled-pair",
        train_loader: ResumableLoader | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.setup_groups(train_groups, row_format, train_loader)


__all__ = ["GroupsTrainerMixin", "LadingCrossEncoderTrainer", "LadingSentenceTransformerTrainer"]
