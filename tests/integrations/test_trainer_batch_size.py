"""``per_device_train_batch_size`` beside a lading loader, against the Trainer's own route.

The Trainer's own route batches its DataLoader by ``per_device_train_batch_size``; a lading
loader was batched by its caller. One set to another size was accepted without a word (the
Trainer then logged, counted and saved a batch size it did not train); now it is refused
naming both, and at its default it gives way to the loader's, so that the Trainer's state says
what the Trainer's own route with that batch size says. ``auto_find_batch_size``, which halves
a batch size the loader does not take from the arguments, is refused. Every loader kind:
tests/integrations/test_loader_matrix.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")
pytest.importorskip("accelerate")

pytestmark = pytest.mark.e2e  # a framework's trainer: see the e2e marker in pyproject.toml

ITEMS = 40


class Weight:
    """A model of one weight whose loss is its square (what is trained does not matter)."""

    @staticmethod
    def make() -> Any:
        import torch

        class Model(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.w = torch.nn.Parameter(torch.ones(1))

            def forward(self, x: Any) -> Any:
                return {"loss": (self.w**2).sum() + 0 * x.float().sum()}

        return Model()


def args(out: Path, **extra: Any) -> Any:
    from transformers import TrainingArguments

    return TrainingArguments(
        output_dir=str(out), max_steps=2, report_to="none", use_cpu=True, save_strategy="no",
        disable_tqdm=True, **extra,
    )  # fmt: skip


def collate(items: list[int]) -> dict[str, Any]:
    import torch

    return {"x": torch.tensor(items)}


def lading_trainer(given: Any, batch_size: int) -> Any:
    """A LadingTrainer of arguments ``given`` over a loader of ``batch_size``."""
    import lading
    from lading.integrations.hf_trainer import LadingTrainer

    loader = lading.loader(list(range(ITEMS)), batch_size, collate_fn=collate)
    return LadingTrainer(model=Weight.make(), args=given, train_loader=loader)


def test_another_batch_size_is_refused_naming_both(tmp_path: Path) -> None:
    fix = r"per_device_train_batch_size=4\).* batch_size=5 .*: pass batch_size=4 to the loader"
    with pytest.raises(ValueError, match=fix):
        lading_trainer(args(tmp_path, per_device_train_batch_size=4), 5)
    lading_trainer(args(tmp_path, per_device_train_batch_size=4), 4)  # the same size: as asked


def test_the_default_gives_way_to_the_loaders_as_in_the_trainers_own_route(
    tmp_path: Path,
) -> None:
    from transformers import Trainer

    own = Trainer(
        model=Weight.make(),
        args=args(tmp_path / "own", per_device_train_batch_size=5),
        train_dataset=list(range(ITEMS)),
        data_collator=collate,
    )
    own.train()
    given = args(tmp_path / "lading")
    trainer = lading_trainer(given, 5)
    trainer.train()
    assert next(iter(trainer.get_train_dataloader()))["x"].numel() == 5
    assert trainer.state.train_batch_size == own.state.train_batch_size == 5
    assert trainer.args.per_device_train_batch_size == 5
    assert given.per_device_train_batch_size == 8  # the caller's arguments stay as given
    lading_trainer(given, 3)  # and serve another trainer, of another loader


def test_auto_find_batch_size_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"auto_find_batch_size=True.*batch_size=4"):
        lading_trainer(args(tmp_path, auto_find_batch_size=True), 4)


def test_the_old_loader_attribute_names_the_new_spelling(tmp_path: Path) -> None:
    trainer = lading_trainer(args(tmp_path), 4)
    with pytest.raises(AttributeError, match=r"get_train_dataloader\(\)\.loader is get_train_"):
        trainer.get_train_dataloader().loader.num_workers  # noqa: B018
    assert getattr(trainer.get_train_dataloader(), "loader", None) is None


def test_under_data_parallel_a_batch_is_split_over_the_gpus(tmp_path: Path) -> None:
    """The Trainer's own DataLoader batches ``per_device_train_batch_size x n_gpu`` in one
    process of DataParallel (``args.train_batch_size``): so is a lading loader's batch read."""
    from transformers import TrainingArguments

    import lading
    from lading.integrations.trainer_args import check_batch_size

    class TwoGPUs(TrainingArguments):  # what n_gpu says on a machine with two, no torchrun
        @property
        def n_gpu(self) -> int:
            return 2

    two = TwoGPUs(output_dir=str(tmp_path), report_to="none", per_device_train_batch_size=4)
    assert two.train_batch_size == 8
    check_batch_size(two, lading.loader(list(range(ITEMS)), 8, collate_fn=collate))
    with pytest.raises(ValueError, match=r"batches of 8 \(2 GPUs of DataParallel x 4\).*=2\b"):
        check_batch_size(two, lading.loader(list(range(ITEMS)), 4, collate_fn=collate))
