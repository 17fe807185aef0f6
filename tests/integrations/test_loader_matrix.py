"""Every loader lading makes, in every integration that takes a loader.

``LadingTrainer`` once crashed in its setup on a language-model or a parquet loader (it read
``loader.loader.num_workers``, which only ``lading.loader``'s had). Here each loader kind (map,
parquet, the LM's streams, windows and packed; in this process and with DataLoader workers)
goes through (with ``boundaries=True`` too, whose batches are NamedTuples):

- the HF ``LadingTrainer`` (``train_loader=``): it trains into a second epoch on the batches
  iterating the loader by hand gives, and resumes from its own mid-epoch checkpoint on the next
  batch;
- lading's own training loop (:class:`lading.train.Trainer`): the same, through its checkpoint;
- the data arguments check the HF and sentence-transformers trainers share
  (:func:`lading.integrations.trainer_args.check_trainer_arguments`), which was the crash,
  ``per_device_train_batch_size`` among them, and the old ``.loader`` naming its new spelling.

Lightning's ``LadingDataModule`` runs every workload in
tests/integrations/test_integration_lightning.py, and ``DevicePrefetcher`` every kind in
tests/loading/test_contracts.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lading.world import World

pytest.importorskip("tokenizers")
pytest.importorskip("pyarrow")

pytestmark = pytest.mark.e2e  # whole trainers: see the e2e marker in pyproject.toml

KINDS = (
    "map",
    "parquet",
    "lm-streams",
    "lm-windows",
    "lm-packed",
    "lm-windows+boundaries",
    "lm-packed+boundaries",
)


def kind_of(name: str, tmp: Path) -> Any:
    from loader_kinds import lm_kind, map_kind, packed_kind, parquet_kind

    return {
        "map": lambda: map_kind(40, tmp, as_dict=True),  # what model(**batch) takes
        "parquet": lambda: parquet_kind(40, tmp),
        "lm-streams": lambda: lm_kind(400, tmp, "streams", jitter=None),
        "lm-windows": lambda: lm_kind(40, tmp, "windows"),
        "lm-packed": lambda: packed_kind(40, tmp),
        # DocumentBatch NamedTuples, which the HF Trainer's _prepare_input once crashed on
        "lm-windows+boundaries": lambda: lm_kind(40, tmp, "windows", boundaries=True),
        "lm-packed+boundaries": lambda: packed_kind(40, tmp, boundaries=True),
    }[name]()


def params() -> list[Any]:
    """Every kind in this process; with 2 DataLoader workers (forks) in the slow set."""
    return [(name, 0) for name in KINDS] + [
        pytest.param(name, 2, marks=pytest.mark.slow) for name in KINDS
    ]


def by_hand(kind: Any, workers: int, epochs: int = 2) -> list[list[int]]:
    """The batches of the first ``epochs`` epochs, iterating the loader directly."""
    loader = kind.make(World(), workers)
    out = []
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        out += [kind.key(batch) for batch in loader]
    return out


def hf_run(
    kind: Any, workers: int, out: Path, steps: int, stop: int | None = None, resume: bool = False
) -> list[list[int]]:
    """The batch keys a LadingTrainer trains on, ``steps`` steps (checkpoints every 2)."""
    import torch
    from transformers import TrainerCallback, TrainingArguments

    from lading.integrations.hf_trainer import LadingTrainer

    seen: list[list[int]] = []

    class Probe(LadingTrainer):  # type: ignore[misc]
        def compute_loss(
            self, model: Any, inputs: Any, return_outputs: bool = False, **kw: Any
        ) -> Any:
            seen.append(kind.key(inputs))
            loss = (model.w**2).sum()
            return (loss, None) if return_outputs else loss

    class Stop(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if stop is not None and state.global_step >= stop:
                control.should_training_stop = True

    class Weight(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(1))

    args = TrainingArguments(
        output_dir=str(out), per_device_train_batch_size=3, max_steps=steps, save_strategy="steps",
        save_steps=2, logging_steps=100, report_to="none", use_cpu=True, disable_tqdm=True,
        seed=3,
    )  # fmt: skip
    trainer = Probe(
        model=Weight(), args=args, train_loader=kind.make(World(), workers), callbacks=[Stop()]
    )
    trainer.train(resume_from_checkpoint=True if resume else None)
    return seen


@pytest.mark.parametrize(("name", "workers"), params())
def test_hf_trainer_trains_and_resumes_every_loader(
    name: str, workers: int, tmp_path: Path
) -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    kind = kind_of(name, tmp_path)
    want = by_hand(kind, workers)
    first = len(kind.make(World(), workers))
    steps = first + 2  # two batches into the second epoch
    assert len(want) >= steps
    assert hf_run(kind, workers, tmp_path / "whole", steps) == want[:steps]
    assert hf_run(kind, workers, tmp_path / "cut", steps, stop=2) == want[:2]
    assert hf_run(kind, workers, tmp_path / "cut", steps, resume=True) == want[2:steps]


def loop_run(kind: Any, workers: int, out: Path, total: int) -> list[list[int]]:
    """The batch keys lading's own loop steps on, to ``total`` steps, resuming from ``out``."""
    import torch

    from lading.train import LoopConfig, StepResult, Trainer, TrainingTask

    seen: list[list[int]] = []

    class Record(TrainingTask):
        def step(self, batch: Any) -> StepResult:
            seen.append(kind.key(batch))
            return StepResult((model.weight**2).sum(), 1)

    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    config = LoopConfig(total, out=out, checkpoint_every=2, resume=True, progress=False)
    loader = kind.make(World(), workers)
    Trainer(Record(), loader, config, World(), torch.device("cpu"), model, optimizer).run()
    return seen


@pytest.mark.parametrize(("name", "workers"), params())
def test_the_training_loop_trains_and_resumes_every_loader(
    name: str, workers: int, tmp_path: Path
) -> None:
    kind = kind_of(name, tmp_path)
    want = by_hand(kind, workers)
    steps = len(kind.make(World(), workers)) + 2
    assert loop_run(kind, workers, tmp_path / "whole", steps) == want[:steps]
    assert loop_run(kind, workers, tmp_path / "cut", 2) == want[:2]
    assert loop_run(kind, workers, tmp_path / "cut", steps) == want[2:steps]


@pytest.mark.parametrize(("name", "workers"), params())
def test_trainer_data_arguments_are_checked_against_every_loader(
    name: str, workers: int, tmp_path: Path
) -> None:
    """What the HF and sentence-transformers trainers check at setup: each loader's settings
    are read, a matching argument passes and another is refused naming the fix."""
    pytest.importorskip("transformers")
    from transformers import TrainingArguments

    from lading.integrations.trainer_args import check_trainer_arguments

    loader = kind_of(name, tmp_path).make(World(), workers)

    def args(**extra: Any) -> Any:
        return TrainingArguments(output_dir=str(tmp_path), report_to="none", **extra)

    check_trainer_arguments(args(), loader)
    if workers:
        check_trainer_arguments(args(dataloader_num_workers=workers), loader)
    with pytest.raises(ValueError, match=r"dataloader_num_workers=5\).* num_workers="):
        check_trainer_arguments(args(dataloader_num_workers=5), loader)
    from loader_kinds import BATCH

    check_trainer_arguments(args(per_device_train_batch_size=BATCH), loader)
    with pytest.raises(ValueError, match=rf"per_device_train_batch_size=7\).*batch_size={BATCH}"):
        check_trainer_arguments(args(per_device_train_batch_size=7), loader)
    # what get_train_dataloader() returns: the loader itself, whose old .loader names that
    with pytest.raises(AttributeError, match=r"get_train_dataloader\(\)\.loader is get_train"):
        loader.loader  # noqa: B018
