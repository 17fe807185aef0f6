"""LadingTrainer's loss under gradient accumulation, against the Trainer's own route (ADI).

The Trainer's own route for a custom loss is ``compute_loss_func`` on a stock Dataset, read in
order (``train_sampling_strategy="sequential"``): it receives ``num_items_in_batch`` and the
Trainer takes its value as scaled for accumulation. Both routes read the same groups in the same
order, from the same weights, with no dropout; one optimizer step of 2 accumulated batches of 4
groups must log the same loss and gradient norm, and leave the same weights, as each other and
as the Trainer's one batch of 8 groups. Plain SGD, so the weights show the gradient's scale.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from integration_data import Collection, adi

pytestmark = pytest.mark.e2e  # a whole user path: see the e2e marker in pyproject.toml

GROUP = 4
INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def make_model(kind: str) -> Any:
    """A tiny ranker without dropout: HF's classifier (its forward takes ``**kwargs``, so the
    Trainer counts ``num_items_in_batch``) or lading's CrossEncoder (no ``**kwargs``)."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    from lading.ir import CrossEncoder

    config = BertConfig(
        vocab_size=800,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        num_labels=1,
    )
    torch.manual_seed(0)
    if kind == "hf-classifier":
        return BertForSequenceClassification(config)
    return CrossEncoder.from_config(config, dropout=0.0)


def make_args(out: Path, batch: int, accumulate: int, **extra: Any) -> Any:
    from transformers import TrainingArguments

    return TrainingArguments(
        output_dir=str(out),
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=accumulate,
        max_steps=1,
        learning_rate=0.5,
        optim="sgd",
        lr_scheduler_type="constant",
        max_grad_norm=1e9,  # logged, never clipping
        logging_steps=1,
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        save_strategy="no",
        seed=3,
        **extra,
    )


def lading_loader(data: Collection, batch: int = 4, **extra: Any) -> Any:
    import lading

    return lading.loader(
        data.groups(group_size=GROUP, queries=12),
        batch_size=batch,
        collate_fn=collator(data),
        seed=3,
        **extra,
    )


def collator(data: Collection) -> Any:
    from lading import ir

    return ir.CrossEncoderCollator(data.store, max_length=64, max_query_length=16)


class ModelInputs:
    """The framework route's collator: the model's inputs and labels, nothing of lading's."""

    def __init__(self, collate: Any) -> None:
        self.collate = collate

    def __call__(self, items: list[Any]) -> dict[str, Any]:
        batch = self.collate(items)
        return {k: batch[k] for k in (*INPUTS, "labels")}


def reference_loss(kind: str) -> Any:
    """``compute_loss_func`` for the Trainer's route: summed, over the step's counted items."""
    import torch

    def loss(outputs: Any, labels: Any, num_items_in_batch: Any = None) -> Any:
        logits = (outputs if torch.is_tensor(outputs) else outputs["logits"]).reshape(-1)
        if kind == "bce":
            total = torch.nn.functional.binary_cross_entropy_with_logits(
                logits, labels.float(), reduction="sum"
            )
            return total / num_items_in_batch  # rows
        grouped = logits.view(-1, GROUP)
        target = torch.zeros(len(grouped), dtype=torch.long)
        total = torch.nn.functional.cross_entropy(grouped, target, reduction="sum")
        return total / (num_items_in_batch / GROUP)  # labels are rows: groups = rows / GROUP

    return loss


def framework_route(data: Collection, kind: str, loss: str, out: Path, batch: int, acc: int) -> Any:
    """The stock Trainer on lading's first-epoch groups, in lading's order."""
    from transformers import Trainer

    import lading

    # the first epoch's groups in lading's order: what the first pass of the same loader reads,
    # each group as the dataset gives it (a list per batch)
    probe = lading.loader(data.groups(group_size=GROUP, queries=12), 4, collate_fn=list, seed=3)
    items = [group for batch in probe for group in batch]
    trainer = Trainer(
        model=make_model(kind),
        args=make_args(
            out, batch, acc, train_sampling_strategy="sequential", remove_unused_columns=False
        ),
        train_dataset=items,  # a list is a map-style Dataset
        data_collator=ModelInputs(collator(data)),
        compute_loss_func=reference_loss(loss),
    )
    trainer.train()
    return trainer


def lading_route(data: Collection, kind: str, loss: str, out: Path) -> Any:
    from lading.integrations.hf_trainer import LadingTrainer

    trainer = LadingTrainer(
        model=make_model(kind),
        args=make_args(out, 4, 2),
        train_loader=lading_loader(data),
        **({} if loss == "listwise" else {"ranking_loss": loss}),  # listwise: the default
    )
    trainer.train()
    return trainer


def step_one(trainer: Any) -> tuple[float, float]:
    log = trainer.state.log_history[0]
    return log["loss"], log["grad_norm"]


@pytest.mark.parametrize("loss", ["listwise", "bce"])
@pytest.mark.parametrize("kind", ["hf-classifier", "lading-cross-encoder"])
def test_loss_under_accumulation_equals_the_trainer_own_route(
    kind: str, loss: str, data_dir: Path, tmp_path: Path
) -> None:
    data = adi(data_dir, tmp_path)
    ours = lading_route(data, kind, loss, tmp_path / "ours")
    theirs = framework_route(data, kind, loss, tmp_path / "theirs", 4, 2)
    whole = framework_route(data, kind, loss, tmp_path / "whole", 8, 1)
    assert step_one(theirs) == pytest.approx(step_one(whole), abs=1e-5)  # the route is sound
    assert step_one(ours) == pytest.approx(step_one(theirs), abs=1e-5)
    assert step_one(ours)[0] == pytest.approx(step_one(theirs)[0], abs=1e-5)
    mine, reference = ours.model.state_dict(), theirs.model.state_dict()
    for name, value in reference.items():
        assert (mine[name] - value).abs().max() < 1e-5, name  # the same update


def test_a_listwise_batch_never_trains_the_model_own_pointwise_loss(
    data_dir: Path, tmp_path: Path
) -> None:
    import math

    data = adi(data_dir, tmp_path)
    ours = lading_route(data, "hf-classifier", "listwise", tmp_path / "ours")
    loss = step_one(ours)[0]
    # at initialisation the scores are about equal: listwise CE over 4 is about ln 4, where the
    # classifier's own MSE on labels 1/0 would be about 1/4
    assert abs(loss - math.log(GROUP)) < 0.1


def test_data_arguments_are_honoured_or_refused_by_name(data_dir: Path, tmp_path: Path) -> None:
    from lading.integrations.hf_trainer import LadingTrainer

    data = adi(data_dir, tmp_path)

    def make(loader: Any = None, **extra: Any) -> Any:
        return LadingTrainer(
            model=make_model("lading-cross-encoder"),
            args=make_args(tmp_path / "out", 4, 1, **extra),
            train_loader=loader or lading_loader(data),
        )

    for extra, match in [
        ({"dataloader_drop_last": True}, r"dataloader_drop_last=True.*drop_partial_batch=True"),
        ({"dataloader_num_workers": 2}, r"dataloader_num_workers=2.*num_workers="),
        ({"dataloader_pin_memory": False}, None),  # the loader does not pin: what was asked
        ({"dataloader_in_order": False}, r"dataloader_in_order=False"),
        ({"train_sampling_strategy": "group_by_length"}, r"group_by_length"),
        ({"train_sampling_strategy": "sequential"}, r"shuffle=False"),
    ]:
        if match is None:
            make(**extra)
            continue
        with pytest.raises(ValueError, match=match):
            make(**extra)
    dropping = lading_loader(data, equalize="truncate", drop_partial_batch=True)
    assert len(make(dropping, dataloader_drop_last=True).get_train_dataloader()) == 37 // 4
    assert make(lading_loader(data, shuffle=False), train_sampling_strategy="sequential")


def _rank_step(rank: int, world: int, data: Collection, kind: str, out: str) -> Any:
    """One optimizer step of 2 accumulated batches of 2 groups on each of 2 gloo ranks."""
    from lading.integrations.hf_trainer import LadingTrainer

    trainer = LadingTrainer(
        model=make_model(kind),
        args=make_args(Path(out) / kind, 2, 2, ddp_backend="gloo"),
        train_loader=lading_loader(data, batch=2),
    )
    trainer.train()
    # numpy, not tensors: a tensor sent through the queue is shared memory the rank frees
    weights = {k: v.detach().numpy().copy() for k, v in trainer.model.state_dict().items()}
    return step_one(trainer), weights


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["hf-classifier", "lading-cross-encoder"])
def test_two_gloo_ranks_accumulating_train_as_one_batch_of_all(
    kind: str, data_dir: Path, tmp_path: Path
) -> None:
    from distributed import run_processes

    data = adi(data_dir, tmp_path)
    # 2 ranks x 2 accumulated batches x 2 groups read the order's first 8 groups: the very
    # batch the Trainer's own route reads in one process (the count of num_items_in_batch
    # is gathered over the ranks and DDP averages the gradients)
    ranks = run_processes(_rank_step, 2, data, kind, str(tmp_path), timeout=300)
    whole = framework_route(data, kind, "listwise", tmp_path / "whole", 8, 1)
    for logged, weights in ranks:
        assert logged == pytest.approx(step_one(whole), abs=1e-5)
        for name, value in whole.model.state_dict().items():
            assert abs(weights[name] - value.numpy()).max() < 1e-5, name
