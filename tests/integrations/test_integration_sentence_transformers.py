"""sentence-transformers' own trainers on lading training groups, real data (ADI), offline.

One process: rows come from the store, each (query, positive) pair once per epoch, negatives
redrawn per epoch. Two gloo processes (slow): each rank trains on a disjoint, equal share.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("sentence_transformers")
pytest.importorskip("datasets")

from distributed import run_processes
from integration_data import Collection, adi, hf_tokenizer_dir

pytestmark = pytest.mark.e2e  # a whole user path: see the e2e marker in pyproject.toml

KINDS = ("bi-encoder", "cross-encoder")


class RecordingCollator:
    """Wraps the trainer's collator and keeps the rows of every batch."""

    def __init__(self, collate: Any) -> None:
        self.collate, self.batches = collate, []

    def __call__(self, rows: list[dict[str, Any]]) -> Any:
        self.batches.append(rows)
        return self.collate(rows)


def model_folder(kind: str, data: Collection, tmp: Path) -> Path:
    """A tiny BERT (bi-encoder) or BERT classifier (cross-encoder) saved from a config."""
    from transformers import BertForSequenceClassification, BertModel

    from lading.ir.model import tiny_bert_config

    config = tiny_bert_config(800, max_position=128)
    folder = hf_tokenizer_dir(data.tokenizer, tmp / kind)
    if kind == "bi-encoder":
        BertModel(config).save_pretrained(folder)
    else:
        config.num_labels = 1
        BertForSequenceClassification(config).save_pretrained(folder)
    return folder


def make_trainer(
    kind: str,
    data: Collection,
    tmp: Path,
    max_steps: int,
    queries: int = 4,
    folder: Path | None = None,
    **extra: Any,
) -> Any:
    """A trainer of a tiny model built from a config (nothing downloaded)."""
    folder = folder or model_folder(kind, data, tmp)
    common = dict(
        output_dir=str(tmp / f"out-{kind}"),
        per_device_train_batch_size=4,
        max_steps=max_steps,
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        save_strategy="no",
        seed=1,
        **extra,
    )
    groups = data.groups(group_size=3, queries=queries, seed=5)
    if kind == "bi-encoder":
        from sentence_transformers import SentenceTransformer, SentenceTransformerTrainingArguments

        from lading.integrations.sentence_transformers import LadingSentenceTransformerTrainer

        try:  # v6 moved the bi-encoder losses; v4 and v5 have them here
            from sentence_transformers.sentence_transformer.losses import (
                MultipleNegativesRankingLoss,
            )
        except ImportError:
            from sentence_transformers.losses import MultipleNegativesRankingLoss

        model = SentenceTransformer(str(folder), device="cpu")
        return LadingSentenceTransformerTrainer(
            model=model,
            args=SentenceTransformerTrainingArguments(**common),
            loss=MultipleNegativesRankingLoss(model),
            train_groups=groups,
        )
    from sentence_transformers.cross_encoder import CrossEncoder, CrossEncoderTrainingArguments

    from lading.integrations.sentence_transformers import LadingCrossEncoderTrainer

    return LadingCrossEncoderTrainer(
        model=CrossEncoder(str(folder), device="cpu", num_labels=1),
        args=CrossEncoderTrainingArguments(**common),
        train_groups=groups,  # labeled-pair rows for the default BinaryCrossEntropyLoss
    )


def groups_of(kind: str, batch: list[dict[str, Any]]) -> list[tuple[str, str, tuple[str, ...]]]:
    """(query, positive, negatives) of each group in a batch of rows."""
    if kind == "bi-encoder":  # n-tuple rows: one a group
        return [
            (r["query"], r["positive"], tuple(v for k, v in r.items() if k.startswith("negative")))
            for r in batch
        ]
    out = []  # labeled-pair rows: the positive then its negatives
    for r in batch:
        if r["label"] == 1.0:
            out.append((r["query"], r["passage"], ()))
        else:
            q, p, negs = out[-1]
            out[-1] = (q, p, (*negs, r["passage"]))
    return out


@pytest.mark.parametrize("kind", KINDS)
def test_trains_on_groups_redrawn_every_epoch(kind: str, data_dir: Path, tmp_path: Path) -> None:
    data = adi(data_dir, tmp_path)
    trainer = make_trainer(kind, data, tmp_path, max_steps=6)
    recorder = trainer.data_collator = RecordingCollator(trainer.data_collator)
    result = trainer.train()
    assert result.global_step == 6 and result.training_loss == result.training_loss  # not NaN

    epoch = len(trainer.get_train_dataloader())
    assert epoch == 3  # 4 queries: 11 (query, positive) pairs, 4 groups a batch
    seen = [groups_of(kind, b) for b in recorder.batches]
    first = [g for b in seen[:epoch] for g in b]
    second = [g for b in seen[epoch : 2 * epoch] for g in b]
    pairs = Counter((q, p) for q, p, _ in first)
    assert len(pairs) == len(data.groups(queries=4)) == 11
    assert set(pairs.values()) == {1}
    assert pairs == Counter((q, p) for q, p, _ in second)
    texts = set(data.store.get_many(data.store.ids()))
    assert all(len(negs) == 2 and set(negs) <= texts for _, _, negs in first + second)
    negatives = {(q, p): negs for q, p, negs in first}
    assert any(negatives.get((q, p)) != negs for q, p, negs in second)  # redrawn


def _rank_trains(
    rank: int, world: int, kind: str, data: Collection, folder: Path, tmp: str
) -> list[Any]:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    trainer = make_trainer(
        kind,
        data,
        Path(tmp),
        max_steps=2,
        queries=5,
        folder=folder,
        ddp_backend="gloo",
        # s-t's CrossEncoder is no PreTrainedModel, so the Trainer would make DDP search for
        # unused parameters, and DDP then counts the classifier's twice (all are used); the
        # bi-encoder's BERT pooler is unused, so there the search must stay on
        ddp_find_unused_parameters=kind == "bi-encoder",
    )
    recorder = trainer.data_collator = RecordingCollator(trainer.data_collator)
    trainer.train()
    return [(q, p) for batch in recorder.batches for q, p, _ in groups_of(kind, batch)]


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_two_gloo_ranks_train_on_disjoint_equal_shares(
    kind: str, data_dir: Path, tmp_path: Path
) -> None:
    data = adi(data_dir, tmp_path)  # store and model made once here; the ranks open them
    folder = model_folder(kind, data, tmp_path)
    per_rank = run_processes(_rank_trains, 2, kind, data, folder, str(tmp_path), timeout=240)
    # 5 queries: 14 (query, positive) pairs, 7 a rank. Under DDP s-t's own route drops the
    # last partial batch (it forces dataloader_drop_last), and lading honours it: an epoch is
    # one batch of 4 a rank, so the 2 steps read 2 epochs of 4 groups
    assert len(per_rank[0]) == len(per_rank[1]) == 8
    first = [set(pairs[:4]) for pairs in per_rank]  # epoch 0 of each rank
    assert not first[0] & first[1] and len(first[0] | first[1]) == 8  # disjoint, no repeat
    assert len(set(per_rank[0]) | set(per_rank[1])) <= 14  # only the 14 pairs there are
