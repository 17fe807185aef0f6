"""``LadingTrainer`` on LM batches with document boundaries, beside a hand loop of transformers.

``Packed``/``Windows(..., boundaries=True)`` batches are :class:`~lading.lm.DocumentBatch`
NamedTuples, which the Trainer's ``_prepare_input`` once crashed on (it rebuilds a tuple from
one iterable). A tiny Llama trained by ``LadingTrainer`` must end with the weights of the plain
loop a transformers user writes over the same batches, ``model(**to_hf_kwargs(batch))``, with
SGD: also under gradient accumulation, where the Trainer divides by the step's scored labels.
The loader matrix (tests/integrations/test_loader_matrix.py) covers resume.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from conftest import word_tokenizer, write
from lading.lm import DocumentBatch, LanguageModelLoader, Packed, TokenCorpus, Windows
from lading.world import World

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")
from lading.integrations.hf_trainer import LadingTrainer  # noqa: E402
from lading.integrations.transformers_lm import to_hf_kwargs  # noqa: E402

pytestmark = pytest.mark.e2e  # whole trainers: see the e2e marker in pyproject.toml

VOCAB = [f"w{i}" for i in range(60)]
LR, STEPS = 0.5, 3


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> TokenCorpus:
    tmp = tmp_path_factory.mktemp("lm")
    rng = np.random.default_rng(7)
    docs = [" ".join(rng.choice(VOCAB, int(rng.integers(2, 12)))) for _ in range(60)]
    src = write(tmp / "docs.txt", "\n\n".join(docs) + "\n")
    return TokenCorpus.build(src, tmp / "c", word_tokenizer(VOCAB, tmp / "t.json"))


def tiny_llama(attn: str) -> Any:
    config = transformers.LlamaConfig(
        vocab_size=len(VOCAB) + 2, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
    )  # fmt: skip
    config._attn_implementation = attn
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config)


def make_loader(corpus: TokenCorpus, sequence: str) -> Any:
    kind = Packed(16, boundaries=True) if sequence == "packed" else Windows(16, boundaries=True)
    return LanguageModelLoader(corpus, 4, kind, seed=1, world=World())


def arguments(out: Path, accumulate: int, **extra: Any) -> Any:
    return transformers.TrainingArguments(
        output_dir=str(out), per_device_train_batch_size=4, max_steps=STEPS, optim="sgd",
        learning_rate=LR, lr_scheduler_type="constant", weight_decay=0.0, max_grad_norm=0.0,
        gradient_accumulation_steps=accumulate, save_strategy="no", report_to="none",
        use_cpu=True, disable_tqdm=True, logging_steps=100, **extra,
    )  # fmt: skip


def by_hand(model: Any, batches: list[DocumentBatch], attn: str, accumulate: int) -> None:
    """SGD over ``batches`` in steps of ``accumulate``: each step's loss is the mean over the
    scored labels of all its batches (the Trainer's rule where the model takes its count)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    for step in range(STEPS):
        step_batches = batches[step * accumulate : (step + 1) * accumulate]
        group = [to_hf_kwargs(b, attn) for b in step_batches]
        counts = [int((k["labels"][:, 1:] != -100).sum()) for k in group]
        for kwargs, count in zip(group, counts):
            (model(**kwargs).loss * count / sum(counts)).backward()
        optimizer.step()
        optimizer.zero_grad()


@pytest.mark.parametrize(
    ("sequence", "attn", "accumulate"),
    [("packed", "sdpa", 1), ("windows", "eager", 1), ("packed", "sdpa", 2)],
)
def test_the_trainer_trains_boundary_batches_as_the_hand_loop(
    corpus: TokenCorpus, sequence: str, attn: str, accumulate: int, tmp_path: Path
) -> None:
    model = tiny_llama(attn)
    theirs = copy.deepcopy(model)
    batches = list(make_loader(corpus, sequence))[: STEPS * accumulate]
    assert len(batches) == STEPS * accumulate and isinstance(batches[0], DocumentBatch)
    trainer = LadingTrainer(
        model=model,
        args=arguments(tmp_path, accumulate),
        train_loader=make_loader(corpus, sequence),
    )
    trainer.train()
    by_hand(theirs, batches, attn, accumulate)
    trained, start = dict(model.named_parameters()), dict(tiny_llama(attn).named_parameters())
    moved = 0.0
    for name, value in theirs.named_parameters():
        assert torch.allclose(trained[name], value, atol=1e-5), name
        moved = max(moved, float((value - start[name]).detach().abs().max()))
    assert moved > 1e-2  # the steps did train


def test_a_compute_loss_of_the_document_batch_route_still_trains(
    corpus: TokenCorpus, tmp_path: Path
) -> None:
    """A ``compute_loss`` written when ``LadingTrainer`` handed it the DocumentBatch itself
    (``model(**to_hf_kwargs(inputs, attn))``, ``inputs.loss_mask``) keeps working now that it
    gets the model's keyword arguments (it raised "'dict' object has no attribute
    'input_ids'"), and trains what the hand loop does; ``inputs["labels"]`` is the new route's."""
    seen: list[Any] = []

    class Written(LadingTrainer):  # type: ignore[misc]
        def compute_loss(self, model: Any, inputs: Any, **kw: Any) -> Any:
            seen.append((inputs.input_ids, inputs.loss_mask, inputs["labels"]))
            return model(**to_hf_kwargs(inputs, model.config._attn_implementation)).loss

    model = tiny_llama("sdpa")
    theirs = copy.deepcopy(model)
    batches = list(make_loader(corpus, "packed"))[:STEPS]
    trainer = Written(
        model=model, args=arguments(tmp_path, 1), train_loader=make_loader(corpus, "packed")
    )
    trainer.train()
    by_hand(theirs, batches, "sdpa", 1)
    assert len(seen) == STEPS
    for (input_ids, loss_mask, labels), batch in zip(seen, batches):
        assert torch.equal(input_ids, batch.input_ids) and torch.equal(loss_mask, batch.loss_mask)
        assert torch.equal(labels, to_hf_kwargs(batch, "sdpa")["labels"])
    trained = dict(model.named_parameters())
    for name, value in theirs.named_parameters():
        assert torch.allclose(trained[name], value, atol=1e-5), name


class NoConfig(torch.nn.Module):
    """A model that is no transformers model (no ``config._attn_implementation``)."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(1))


def test_a_model_without_a_config_gets_the_batch_or_a_named_refusal(
    corpus: TokenCorpus, tmp_path: Path
) -> None:
    seen: list[Any] = []

    class Own(LadingTrainer):  # type: ignore[misc]
        def compute_loss(self, model: Any, inputs: Any, **kw: Any) -> Any:
            seen.append(inputs)
            return (model.w * inputs.loss_mask.sum()).sum()

    args = arguments(tmp_path, 1)
    Own(model=NoConfig(), args=args, train_loader=make_loader(corpus, "packed")).train()
    assert [type(b) for b in seen] == [DocumentBatch] * STEPS  # lading's own convention
    want = list(make_loader(corpus, "packed"))[:STEPS]
    assert all(torch.equal(a.input_ids, b.input_ids) for a, b in zip(seen, want))
    trainer = LadingTrainer(
        model=NoConfig(), args=arguments(tmp_path, 1), train_loader=make_loader(corpus, "packed")
    )
    with pytest.raises(ValueError, match=r"NoConfig has none.*override compute_loss"):
        trainer.train()


def test_a_batch_that_is_no_mapping_is_refused_naming_boundaries(
    corpus: TokenCorpus, tmp_path: Path
) -> None:
    loader = LanguageModelLoader(corpus, 4, Windows(16), world=World())  # (x, y) tuples
    args = arguments(tmp_path, 1)
    trainer = LadingTrainer(model=tiny_llama("sdpa"), args=args, train_loader=loader)
    with pytest.raises(ValueError, match=r"a tuple, no mapping.*boundaries=True"):
        trainer.train()
