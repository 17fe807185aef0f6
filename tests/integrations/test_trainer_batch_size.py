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


def test_a_mid_epoch_checkpoint_of_another_world_size_is_refused_naming_both(
    tmp_path: Path,
) -> None:
    """A 1-process checkpoint at step 3 of 10, resumed on 2 ranks: lading re-deals what is
    left (an elastic resume), but the Trainer counts the epoch from len() and its global step
    and skipped the rest of it, cutting later epochs short too (a reviewer: rank 0 read 0 of
    its 4 remaining batches, then 4 and 3 of 7). Refused, as LadingDataModule refuses it; at
    an epoch's start or end the count holds, and another layout is taken."""
    import lading
    from lading.integrations.hf_trainer import LadingTrainer
    from lading.loading import LoaderStateError
    from lading.world import World

    def state_after(batches: int) -> dict[str, Any]:
        loader = lading.loader(list(range(ITEMS)), 4, collate_fn=collate)
        taken = iter(loader)
        for _ in range(batches):
            next(taken)
        return loader.state_dict()

    def resumed(state: dict[str, Any]) -> Any:
        loader = lading.loader(list(range(ITEMS)), 4, collate_fn=collate, world=World(0, 2))
        trainer = LadingTrainer(model=Weight.make(), args=args(tmp_path), train_loader=loader)
        trainer._lading_resume = (tmp_path, state)  # what train(resume_from_checkpoint=) reads
        return trainer.get_train_dataloader()

    with pytest.raises(LoaderStateError, match=r"'world_size': 1.*'world_size': 2.*mid-epoch"):
        resumed(state_after(3))
    assert resumed(state_after(0)).remaining() == 5  # the epoch's start: 20 items, 2 ranks
    assert resumed(state_after(10)).remaining() == 0  # its end: the next epoch is whole


def test_a_resume_that_loses_the_epochs_last_accumulation_says_so(tmp_path: Path) -> None:
    """10 batches an epoch at 3 accumulated a step, resumed after 3: the Trainer counts the
    epoch from the resume and never applies the last batch's gradient; warned, naming the
    fix (silent before). At an epoch's start, or at 2 a step (10 divides), no warning."""
    import warnings

    import lading
    from lading.integrations.hf_trainer import LadingTrainer

    def resume(batches: int, steps: int) -> list[str]:
        loader = lading.loader(list(range(ITEMS)), 4, collate_fn=collate)
        taken = iter(loader)
        for _ in range(batches):
            next(taken)
        state = loader.state_dict()
        again = lading.loader(list(range(ITEMS)), 4, collate_fn=collate)
        given = args(tmp_path, gradient_accumulation_steps=steps)
        trainer = LadingTrainer(model=Weight.make(), args=given, train_loader=again)
        trainer._lading_resume = (tmp_path, state)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            trainer.get_train_dataloader()
        return [str(w.message) for w in caught if "accumulation" in str(w.message)]

    said = resume(3, 3)
    assert len(said) == 1 and "last 1 batch(es)" in said[0] and "multiple of 3" in said[0]
    assert resume(0, 3) == [] and resume(3, 2) == []


def test_train_ends_the_loaders_workers_as_the_trainers_own_route_does(tmp_path: Path) -> None:
    """Each train() with num_workers=2 left 2 worker processes alive (3 trainers kept: 6);
    the Trainer's own DataLoader leaves none."""
    import multiprocessing

    import lading
    from lading.integrations.hf_trainer import LadingTrainer

    before = set(multiprocessing.active_children())
    loader = lading.loader(list(range(ITEMS)), 4, collate_fn=collate, num_workers=2)
    trainer = LadingTrainer(model=Weight.make(), args=args(tmp_path), train_loader=loader)
    trainer.train()
    assert [p for p in multiprocessing.active_children() if p not in before] == []


def test_split_batches_is_refused_naming_the_loaders_batch_size(tmp_path: Path) -> None:
    """``accelerator_config={"split_batches": True}`` splits each batch over the ranks in the
    Trainer's own route; the lading loader gives every rank a whole batch, so it was accepted
    and ignored (a reviewer under torchrun: 8 a rank a step where the stock route read 4, half
    the steps)."""
    with pytest.raises(ValueError, match=r"split_batches.*batch_size= the global batch"):
        lading_trainer(args(tmp_path, accelerator_config={"split_batches": True}), 4)


def test_loaders_whose_epochs_differ_in_length_are_refused(tmp_path: Path) -> None:
    """Jittered streams draw an epoch's lengths from (seed, epoch): their batch count differs
    an epoch, and the Trainer (as Lightning) sizes every epoch as the first (a reviewer: 3
    batches of the longest epoch never trained). Refused naming jitter=None, which trains."""
    from conftest import word_corpus
    from lading.integrations.hf_trainer import LadingTrainer
    from lading.lm import LanguageModelLoader, Streams

    corpus = word_corpus(tmp_path / "c", docs=60, lengths=(5, 40), words=50, seed=5)
    jittered = LanguageModelLoader(corpus, 4, Streams(8))
    assert len({jittered.batches_in(e) for e in range(3)}) > 1  # the case: lengths differ
    with pytest.raises(ValueError, match=r"HF Trainer sizes every epoch.*jitter=None"):
        LadingTrainer(model=Weight.make(), args=args(tmp_path), train_loader=jittered)
    fixed = LanguageModelLoader(corpus, 4, Streams(8, jitter=None))
    LadingTrainer(model=Weight.make(), args=args(tmp_path), train_loader=fixed)
    pytest.importorskip("lightning")
    from lading.integrations.lightning import TrainLoader

    with pytest.raises(ValueError, match=r"Lightning sizes every epoch.*jitter=None"):
        TrainLoader(jittered)
    assert len(TrainLoader(fixed)) == fixed.batches_in(0) == fixed.batches_in(1)


def test_the_loader_position_goes_where_the_trainer_writes_its_checkpoint(tmp_path: Path) -> None:
    """A hyperparameter search saves a trial's checkpoints in ``run-<trial>/`` (and a push to
    the Hub uploads a checkpoint before any ``on_save`` callback): the position was written
    to ``output_dir/checkpoint-N`` by a callback, so a trial's checkpoint had none ("not
    written by a trainer with a LoaderStateCallback" at its resume). It is written into the
    folder the Trainer saves, before the Trainer's own files."""
    from lading.integrations.hf_trainer import LOADER_FILE

    given = args(tmp_path / "out")
    given.save_strategy, given.save_steps = "steps", 1
    trainer = lading_trainer(given, 4)
    run = tmp_path / "out" / "run-3"
    trainer._get_output_dir = lambda trial: str(run)  # where a search's trial 3 saves
    trainer.train()
    assert sorted(p.name for p in run.iterdir()) == ["checkpoint-1", "checkpoint-2"]
    assert (run / "checkpoint-2" / LOADER_FILE).is_file()
    assert not (tmp_path / "out" / "checkpoint-2").exists()  # no stray folder beside it
