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
(cross-encoders), so the store hands it text.

What each s-t argument that shapes the data does here (the loader is lading's; s-t's own
DataLoader and samplers are not used, so each is honoured by lading's mechanism or refused):

- ``per_device_train_batch_size`` counts *groups*, s-t's counts rows: with ``"n-tuple"`` and
  ``"labeled-list"`` (one row a group) the two agree; with ``"labeled-pair"`` and ``"triplet"`` a
  batch holds ``rows_per_group`` times as many rows as s-t's own route would give, and
  ``train_samples_per_second`` counts groups. A warning says so once.
- ``dataloader_drop_last=True``: ``equalize="truncate", drop_partial_batch=True`` (no partial
  batch, as s-t's ``drop_last``; under DDP every rank still takes the same number of steps).
- ``batch_sampler``: ``"batch_sampler"`` is lading's seeded order; ``"no_duplicates"`` and
  ``"no_duplicates_hashed"`` are ``batching="no_duplicates"``: no query text and no document
  (positive or negative) in two groups of a batch (:mod:`lading.loading.distinct`; a group's
  own rows stay together), every group once an epoch as in s-t's own route. Where s-t reaches
  that on skewed data by yielding extra, smaller batches, lading's batch count is fixed (equal
  on every rank), so a query in more groups than the epoch has batches is refused when the
  loader is made, naming the ``per_device_train_batch_size`` that fits. ``"group_by_label"``
  and custom samplers (a class or a function) are refused: they would reorder rows lading has
  sharded over the ranks.
- ``data_seed``, else ``seed``, shuffles the loader, as it shuffles s-t's own default batch
  sampler (Accelerate seeds it so; s-t's ``no_duplicates`` sampler reads ``seed`` alone, and
  lading's follows the Trainer's one rule for both).
- ``multi_dataset_batch_sampler`` chooses between the datasets of a ``DatasetDict``; lading
  trains on one ``TrainingGroups``, where s-t ignores it too. A dict of groups is refused.
- ``dataloader_num_workers``, ``dataloader_pin_memory`` (pinned only with CUDA),
  ``dataloader_persistent_workers``, ``dataloader_prefetch_factor`` and
  ``dataloader_multiprocessing_context`` go to :func:`lading.loader` as they are.

Under DDP, give the cross-encoder trainer ``ddp_find_unused_parameters=False``: s-t's
CrossEncoder is no ``PreTrainedModel``, so the Trainer turns the unused-parameter search on, and
DDP then fails marking the classifier's parameters ready twice (s-t 6.2, torch 2.13; the
bi-encoder needs the search left on for BERT's unused pooler).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import torch

from lading.errors import missing_package

try:
    from sentence_transformers import SentenceTransformerTrainer
    from sentence_transformers.cross_encoder import CrossEncoderTrainer
except ImportError:  # pragma: no cover - depends on the environment
    raise missing_package(
        "lading.integrations.sentence_transformers", "sentence-transformers", "st"
    ) from None

from lading.integrations.hf_trainer import LadingTrainerMixin
from lading.integrations.rows import FlattenRows, GroupRows, check_format, rows_per_group
from lading.integrations.trainer_args import data_seed
from lading.loading.resumable import Resumable


class GroupsTrainerMixin(LadingTrainerMixin):
    """Builds the loader from training groups and the trainer's own collator and arguments."""

    data_collator: Any
    default_row_format: str = "n-tuple"  # the rows made of groups unless told (row_format=)

    def __init__(
        self,
        *args: Any,
        train_groups: Any = None,
        row_format: str | None = None,
        train_loader: Resumable | None = None,
        **kwargs: Any,
    ) -> None:
        """The trainer's own ``__init__`` (``args``, ``kwargs``), then its loader from
        ``train_groups`` as ``row_format`` rows (default: the trainer's ``default_row_format``)
        or a ready ``train_loader``."""
        super().__init__(*args, **kwargs)
        fmt = self.default_row_format if row_format is None else row_format
        self.setup_groups(train_groups, fmt, train_loader)

    def setup_groups(self, groups: Any, row_format: str, train_loader: Resumable | None) -> None:
        if groups is None and train_loader is None:
            raise ValueError("pass train_groups=TrainingGroups(...) (or train_loader=)")
        if isinstance(groups, Mapping):
            raise ValueError(
                f"train_groups= takes one TrainingGroups, got a {type(groups).__name__} of "
                f"{len(groups)}: several datasets (what multi_dataset_batch_sampler chooses "
                "between) are not supported; build one TrainingGroups over all of them, or "
                "train on a DatasetDict through s-t's own train_dataset="
            )
        self.train_groups, self.row_format = groups, check_format(row_format)
        self.setup_lading(train_loader)

    def make_lading_loader(self) -> Resumable:
        """``lading.loader`` over the groups' rows, batched by the trainer's own collator."""
        from lading.loading.map_workload import loader

        args = self.args
        batching = st_batching(args.batch_sampler)
        warn_batch_counts_groups(
            args.per_device_train_batch_size, self.row_format, self.train_groups.group_size
        )
        workers = args.dataloader_num_workers
        return loader(
            GroupRows(self.train_groups, self.row_format),
            batch_size=args.per_device_train_batch_size,
            collate_fn=FlattenRows(self.data_collator),
            num_workers=workers,
            pin_memory=bool(args.dataloader_pin_memory and torch.cuda.is_available()),
            seed=data_seed(args),  # as s-t's own default sampler, through Accelerate
            equalize="truncate" if args.dataloader_drop_last else "pad",
            drop_partial_batch=bool(args.dataloader_drop_last),
            persistent_workers=bool(args.dataloader_persistent_workers) if workers else None,
            prefetch_factor=args.dataloader_prefetch_factor,
            multiprocessing_context=getattr(args, "dataloader_multiprocessing_context", None),
            batching=batching,
        )


def st_batching(batch_sampler: Any) -> str:
    """lading's ``batching`` for s-t's ``batch_sampler``, or a ValueError saying why not."""
    name = getattr(batch_sampler, "value", batch_sampler)
    if name == "batch_sampler":
        return "order"
    if name in ("no_duplicates", "no_duplicates_hashed"):
        return "no_duplicates"
    if name == "group_by_label":
        raise ValueError(
            "batch_sampler='group_by_label' is not supported on train_groups: groups have no "
            "label column to group by (their rows are one query's documents); use "
            "'batch_sampler' or 'no_duplicates', or train on a labelled Dataset through "
            "s-t's own train_dataset="
        )
    raise ValueError(
        f"batch_sampler={batch_sampler!r} is not supported on train_groups: a custom sampler "
        "would reorder rows lading has already sharded over the ranks (and lose the "
        "loader's resumable position); use 'batch_sampler' or 'no_duplicates', or train "
        "through s-t's own train_dataset="
    )


def warn_batch_counts_groups(batch_size: int, row_format: str, group_size: int) -> None:
    """Warn (once a place) when ``batch_size`` groups are more rows than s-t would batch."""
    rows = rows_per_group(row_format, group_size)
    if rows > 1:
        warnings.warn(
            f"per_device_train_batch_size={batch_size} counts training groups here: a batch "
            f"holds {batch_size} groups = {batch_size * rows} {row_format!r} rows, where s-t's "
            f"own route batches {batch_size} rows (and train_samples_per_second counts "
            f"groups); pass per_device_train_batch_size={max(1, batch_size // rows)} for "
            f"about {batch_size} rows a batch",
            UserWarning,
            stacklevel=3,
        )


class LadingSentenceTransformerTrainer(GroupsTrainerMixin, SentenceTransformerTrainer):  # type: ignore[misc]
    """``SentenceTransformerTrainer`` on ``train_groups`` (default rows: ``"n-tuple"``)."""

    default_row_format = "n-tuple"


class LadingCrossEncoderTrainer(GroupsTrainerMixin, CrossEncoderTrainer):  # type: ignore[misc]
    """``CrossEncoderTrainer`` on ``train_groups`` (default rows: ``"labeled-pair"``, what its
    default BinaryCrossEntropyLoss trains on)."""

    default_row_format = "labeled-pair"


__all__ = ["GroupsTrainerMixin", "LadingCrossEncoderTrainer", "LadingSentenceTransformerTrainer"]
