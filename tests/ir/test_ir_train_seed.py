"""``--seed`` fixes every initial weight of ``lading train cross-encoder``, a HF model's too.

A model folder (``save_pretrained``) holds the backbone; the classifier head over it is drawn
new, and was drawn from an unseeded RNG: two runs with one seed ended 0.24 apart in loss. The
tiny model was seeded, the folder was not.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("safetensors")

pytestmark = pytest.mark.e2e  # the CLI trains: see the e2e marker in pyproject.toml


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A synthetic collection and a tiny BERT folder with a tokenizer trained on it."""
    from transformers import BertModel

    from lading.bench.examples import hf_tokenizer_folder
    from lading.bench.synth import synth
    from lading.ir.model import tiny_bert_config
    from lading.stores.tokens import load_tokenizer, save_tokenizer, train_tokenizer

    tmp = tmp_path_factory.mktemp("seed")
    made = synth("passages", 200, tmp / "c", queries=10)
    texts = [line.split("\t", 1)[-1] for line in Path(made.corpus).read_text().splitlines()]
    tokenizer = save_tokenizer(train_tokenizer(texts, "wordpiece", 400), tmp / "tok.json")
    folder = hf_tokenizer_folder(tokenizer, tmp / "bert")
    torch.manual_seed(123)
    vocab = load_tokenizer(tokenizer).get_vocab_size()
    BertModel(tiny_bert_config(vocab, max_position=128)).save_pretrained(folder)
    return {
        "corpus": Path(made.corpus),
        "queries": Path(made.queries),
        "qrels": Path(made.qrels),
        "run": Path(made.run),
        "model": folder,
    }


def train(files: dict[str, Path], out: Path, seed: int) -> dict[str, torch.Tensor]:
    """``lading train cross-encoder --model <folder> --seed <seed>``: the trained weights."""
    from safetensors.torch import load_file

    from lading.cli import main

    code = main(["train", "cross-encoder", "--parallel", "none", "--out", str(out),
                 "--corpus", str(files["corpus"]), "--queries", str(files["queries"]),
                 "--qrels", str(files["qrels"]), "--negatives", str(files["run"]),
                 "--model", str(files["model"]), "--seed", str(seed), "--steps", "3",
                 "--group-size", "4", "--max-length", "64", "--max-query-length", "16",
                 "--lr", "1e-3"])  # fmt: skip
    assert code == 0
    return load_file(str(out / "model" / "model.safetensors"))


@pytest.mark.slow  # two whole training runs (~6 s): the default run under 10 minutes
def test_one_seed_trains_one_model_from_a_hf_folder(files: dict[str, Path], tmp_path: Path) -> None:
    first, again = train(files, tmp_path / "a", 1), train(files, tmp_path / "b", 1)
    assert sorted(first) == sorted(again)
    for name in first:
        assert torch.equal(first[name], again[name]), name
    # another seed draws another head: test_the_head_over_a_hf_folder_is_drawn_from_the_seed


def test_the_head_over_a_hf_folder_is_drawn_from_the_seed(
    files: dict[str, Path], tmp_path: Path
) -> None:
    from lading.ir.train import TrainConfig, prepare
    from lading.world import World

    def head(seed: int, before: int) -> torch.Tensor:
        config = TrainConfig(
            out=tmp_path, queries=files["queries"], qrels=files["qrels"],
            corpus=files["corpus"], model=str(files["model"]), seed=seed, max_length=64,
        )  # fmt: skip
        torch.manual_seed(before)  # whatever the RNG held before: the seed decides
        return prepare(config, World())[2].classifier.weight.detach().clone()

    assert torch.equal(head(1, before=10), head(1, before=11))
    assert not torch.equal(head(1, before=10), head(2, before=10))
