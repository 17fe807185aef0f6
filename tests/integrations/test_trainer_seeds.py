"""TrainingArguments' ``seed`` and ``data_seed`` against the Trainer's own route.

The Trainer's own route shuffles its RandomSampler with ``data_seed``, else ``seed`` (Accelerate's
SeedableRandomSampler); a seed sweep reorders the data. A lading loader is built by its caller
with a ``seed=`` of its own, so a LadingTrainer either trains the order the arguments ask for or
refuses naming the loader's ``seed=``: never the same order for every seed without a word.
(sentence-transformers' trainers build their loader from the arguments: test_st_arguments.py.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")
pytest.importorskip("accelerate")

pytestmark = pytest.mark.e2e  # a framework's trainer: see the e2e marker in pyproject.toml

ITEMS = 40


def first_batch_of_own_route(out: Path, **seeds: Any) -> list[int]:
    """The Trainer's first batch on a plain list dataset: its own sampler, its own seeding."""
    from transformers import Trainer

    trainer = Trainer(
        model=_model(),
        args=_args(out, **seeds),
        train_dataset=list(range(ITEMS)),
        data_collator=list,
    )
    return list(next(iter(trainer.get_train_dataloader())))


def lading_trainer(out: Path, loader_seed: int, **seeds: Any) -> Any:
    import lading
    from lading.integrations.hf_trainer import LadingTrainer

    loader = lading.loader(list(range(ITEMS)), batch_size=4, collate_fn=list, seed=loader_seed)
    return LadingTrainer(model=_model(), args=_args(out, **seeds), train_loader=loader)


def _model() -> Any:
    from torch import nn

    return nn.Linear(1, 1)


def _args(out: Path, **seeds: Any) -> Any:
    from transformers import TrainingArguments

    return TrainingArguments(
        output_dir=str(out), per_device_train_batch_size=4, report_to="none", use_cpu=True, **seeds
    )


def first_batch(trainer: Any) -> list[int]:
    return list(next(iter(trainer.get_train_dataloader())))


def test_the_trainers_own_route_reorders_with_data_seed_else_seed(tmp_path: Path) -> None:
    """What lading is held to: the route a plain Trainer takes."""
    own = {
        name: first_batch_of_own_route(tmp_path, **seeds)
        for name, seeds in {
            "default": {},
            "seed1": {"seed": 1},
            "seed2": {"seed": 2},
            "seed1-data5": {"seed": 1, "data_seed": 5},
            "seed2-data5": {"seed": 2, "data_seed": 5},
            "seed5": {"seed": 5},
        }.items()
    }
    assert own["seed1"] != own["seed2"] != own["default"]  # a seed sweep reorders the data
    assert own["seed1-data5"] == own["seed2-data5"] == own["seed5"]  # data_seed, else seed


@pytest.mark.parametrize(
    "seeds, asked",
    [({"seed": 1}, "seed=1"), ({"data_seed": 5}, "data_seed=5"), ({"seed": 7, "data_seed": 5}, "")],
)
def test_a_seed_the_loader_does_not_shuffle_by_is_refused_naming_its_seed(
    seeds: dict[str, int], asked: str, tmp_path: Path
) -> None:
    want = seeds.get("data_seed", seeds.get("seed"))
    with pytest.raises(ValueError, match=rf"{asked}.*seed=0.*pass seed={want} to lading.loader"):
        lading_trainer(tmp_path, 0, **seeds)


def test_seeds_that_agree_with_the_loader_train_the_order_they_ask_for(tmp_path: Path) -> None:
    """Accepted arguments order the batches as the Trainer's own route would: the same
    effective seed gives the same order, another one another order."""
    sweep = {s: first_batch(lading_trainer(tmp_path, s, seed=s)) for s in (1, 2, 3)}
    assert len({tuple(b) for b in sweep.values()}) == 3  # a seed sweep reorders, as the Trainer
    fixed = [first_batch(lading_trainer(tmp_path, 5, seed=s, data_seed=5)) for s in (1, 2)]
    assert fixed[0] == fixed[1]  # data_seed holds the order while seed changes the rest
    default = first_batch(lading_trainer(tmp_path, 0))  # no seed asked for: the loader's own
    assert default == first_batch(lading_trainer(tmp_path, 0, seed=42))  # 42 is the default


def test_an_unshuffled_loader_has_no_order_to_seed(tmp_path: Path) -> None:
    import lading
    from lading.integrations.hf_trainer import LadingTrainer

    loader = lading.loader(list(range(ITEMS)), batch_size=4, collate_fn=list, shuffle=False)
    trainer = LadingTrainer(model=_model(), args=_args(tmp_path, seed=3), train_loader=loader)
    assert first_batch(trainer) == [0, 1, 2, 3]


def test_an_unshuffled_mixture_is_seeded_all_the_same(tmp_path: Path) -> None:
    """A TokenMixture's windows are drawn from the loader's seed even with shuffle=False (the
    check skipped it as unshuffled): another TrainingArguments seed is refused naming why,
    the loader's own is accepted."""
    from conftest import word_corpus
    from lading.integrations.hf_trainer import LadingTrainer
    from lading.lm import LanguageModelLoader, TokenMixture, Windows

    parts = [
        word_corpus(tmp_path / name, docs=20, lengths=(5, 30), words=200, seed=seed)
        for seed, name in enumerate("ab")
    ]

    def made() -> Any:
        mixture = TokenMixture({parts[0]: 0.7, parts[1]: 0.3}, windows=40)
        return LanguageModelLoader(mixture, 4, Windows(8), shuffle=False, seed=0)

    with pytest.raises(ValueError, match=r"seed=3.*seed=0 and draws its mixture's windows"):
        LadingTrainer(model=_model(), args=_args(tmp_path, seed=3), train_loader=made())
    LadingTrainer(model=_model(), args=_args(tmp_path, seed=3, data_seed=0), train_loader=made())
