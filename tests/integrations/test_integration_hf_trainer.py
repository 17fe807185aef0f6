"""The HF Trainer on a lading loader: real data (ADI), exact resume from its own checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from integration_data import Collection, adi

pytestmark = pytest.mark.e2e  # a whole user path: see the e2e marker in pyproject.toml


class Recorder:
    """What each optimizer step trained on and its loss, in order."""

    def __init__(self) -> None:
        self.pairs: list[list[str]] = []
        self.losses: list[float] = []


def make_trainer(
    data: Collection, out: Path, record: Recorder, stop_at: int | None = None, save_steps: int = 7
) -> Any:
    import torch
    from transformers import TrainerCallback, TrainingArguments

    import lading
    from lading.integrations.hf_trainer import LadingTrainer
    from lading.ir import CrossEncoder, CrossEncoderCollator
    from lading.ir.model import ranking_loss, tiny_bert_config

    class CrossEncoderTrainer(LadingTrainer):
        def compute_loss(
            self, model: Any, inputs: Any, return_outputs: bool = False, **kw: Any
        ) -> Any:
            logits = model(inputs["input_ids"], inputs["attention_mask"], inputs["token_type_ids"])
            loss = ranking_loss(logits, inputs["labels"], inputs["group_size"], "listwise")
            record.pairs.append(list(inputs["pairs"]))
            record.losses.append(float(loss.detach()))
            return (loss, logits) if return_outputs else loss

    class StopAt(TrainerCallback):  # an interruption right after the checkpoint of step N
        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if stop_at is not None and state.global_step >= stop_at:
                control.should_training_stop = True

    torch.manual_seed(0)
    model = CrossEncoder.from_config(tiny_bert_config(800, max_position=128))
    loader = lading.loader(
        data.groups(group_size=4, queries=12),
        batch_size=8,
        collate_fn=CrossEncoderCollator(data.store, max_length=96, max_query_length=32),
        seed=3,
    )
    targs = TrainingArguments(
        output_dir=str(out),
        per_device_train_batch_size=8,
        max_steps=12,
        learning_rate=1e-3,
        save_strategy="steps",
        save_steps=save_steps,
        logging_steps=100,
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        seed=3,
    )
    return CrossEncoderTrainer(model=model, args=targs, train_loader=loader, callbacks=[StopAt()])


@pytest.mark.slow  # two Trainer runs on the real data (~11 s): the default run under 10 minutes
def test_resume_from_a_trainer_checkpoint_sees_the_same_batches(
    data_dir: Path, tmp_path: Path
) -> None:
    data = adi(data_dir, tmp_path)
    epoch = len(make_trainer(data, tmp_path / "probe", Recorder()).get_train_dataloader())
    cut = epoch + 2  # two batches into the second epoch
    assert cut < 12
    whole, first, rest = Recorder(), Recorder(), Recorder()
    make_trainer(data, tmp_path / "whole", whole).train()
    make_trainer(data, tmp_path / "cut", first, stop_at=cut, save_steps=cut).train()
    assert (tmp_path / "cut" / f"checkpoint-{cut}" / "lading_loader.json").is_file()
    make_trainer(data, tmp_path / "cut", rest, save_steps=cut).train(resume_from_checkpoint=True)

    assert len(whole.pairs) == 12
    assert first.pairs == whole.pairs[:cut]
    assert rest.pairs == whole.pairs[cut:]  # no batch skipped, none read twice
    assert rest.losses == pytest.approx(whole.losses[cut:], rel=1e-4)
    # the second epoch is a new order, not the first one again
    assert whole.pairs[epoch : epoch + 2] != whole.pairs[:2]


def test_a_checkpoint_without_loader_state_is_refused(data_dir: Path, tmp_path: Path) -> None:
    data = adi(data_dir, tmp_path)
    (tmp_path / "out" / "checkpoint-5").mkdir(parents=True)
    trainer = make_trainer(data, tmp_path / "out", Recorder())
    with pytest.raises(FileNotFoundError, match=r"lading_loader\.json"):
        trainer.train(resume_from_checkpoint=str(tmp_path / "out" / "checkpoint-5"))
