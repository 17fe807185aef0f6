"""lading's LM batches through transformers, checked against transformers' own route.

The same documents go through ``DataCollatorWithFlattening`` (transformers' padding-free
packing) and through lading's packed loader with ``to_hf_kwargs``: labels, position ids and
flash varlen offsets must be equal field by field; a tiny Llama must give every document in a
packed row the logits it gives that document alone, in ``sdpa``, ``eager`` and
``flex_attention``; and the loss of lading's route must equal the loss of transformers' route.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from conftest import word_tokenizer, write
from lading.lm import DocumentBatch, LanguageModelLoader, Packed, TokenCorpus
from lading.world import World

transformers = pytest.importorskip("transformers")
from lading.integrations.transformers_lm import to_hf_kwargs  # noqa: E402

pytestmark = pytest.mark.e2e  # a whole user path: see the e2e marker in pyproject.toml

VOCAB = [f"w{i}" for i in range(60)]


@pytest.fixture(scope="module")
def packed_batch(tmp_path_factory: pytest.TempPathFactory) -> DocumentBatch:
    tmp = tmp_path_factory.mktemp("hf")
    rng = np.random.default_rng(5)
    docs = [" ".join(rng.choice(VOCAB, int(rng.integers(2, 9)))) for _ in range(30)]
    src = write(tmp / "docs.txt", "\n\n".join(docs) + "\n")
    corpus = TokenCorpus.build(src, tmp / "c", word_tokenizer(VOCAB, tmp / "t.json"))
    loader = LanguageModelLoader(corpus, 4, Packed(16, boundaries=True), world=World())
    batch = next(iter(loader))
    assert isinstance(batch, DocumentBatch)
    return batch


def pieces(batch: DocumentBatch, row: int) -> list[list[int]]:
    """The documents (or pieces of documents) of one row, in order, without padding."""
    ids, docs = batch.input_ids[row].tolist(), batch.document_ids[row].tolist()
    out: dict[int, list[int]] = {}
    for token, doc in zip(ids, docs):
        if doc >= 0:
            out.setdefault(doc, []).append(token)
    return [out[d] for d in sorted(out)]


def test_labels_and_positions_equal_the_flattening_collator(packed_batch: DocumentBatch) -> None:
    collate = transformers.DataCollatorWithFlattening(return_flash_attn_kwargs=True)
    kwargs = to_hf_kwargs(packed_batch, "sdpa")
    several = 0
    for row in range(packed_batch.input_ids.shape[0]):
        row_pieces = pieces(packed_batch, row)
        several += len(row_pieces) > 1
        theirs = collate([{"input_ids": p} for p in row_pieces])
        n = sum(len(p) for p in row_pieces)  # the row's tokens before its padding
        assert kwargs["input_ids"][row, :n].tolist() == theirs["input_ids"][0].tolist()
        assert kwargs["labels"][row, :n].tolist() == theirs["labels"][0].tolist()
        assert kwargs["position_ids"][row, :n].tolist() == theirs["position_ids"][0].tolist()
        assert set(kwargs["labels"][row, n:].tolist()) <= {-100}  # padding is never scored
        if row == 0:  # flash varlen offsets: the first row's pieces start the flattened batch
            flash = to_hf_kwargs(packed_batch, "flash_attention_2")
            cu = flash["cu_seq_lens_q"].tolist()
            assert cu[: len(row_pieces) + 1] == theirs["cu_seq_lens_q"].tolist()
            assert flash["input_ids"].shape == (1, packed_batch.input_ids.numel())
    assert several  # rows really pack several documents


def tiny_llama(attn: str) -> Any:
    config = transformers.LlamaConfig(
        vocab_size=len(VOCAB) + 2,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    config._attn_implementation = attn
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).eval()


@pytest.mark.parametrize(
    "attn", ["sdpa", "eager", pytest.param("flex_attention", marks=pytest.mark.slow)]
)  # flex compiles its block mask: ~10 s, so it runs in the slow set
def test_each_document_sees_only_itself(packed_batch: DocumentBatch, attn: str) -> None:
    model = tiny_llama(attn)
    with torch.no_grad():
        logits = model(**to_hf_kwargs(packed_batch, attn)).logits
        for row in range(packed_batch.input_ids.shape[0]):
            start = 0
            for piece in pieces(packed_batch, row):
                alone = model(input_ids=torch.tensor([piece])).logits[0]
                here = logits[row, start : start + len(piece)]
                assert torch.allclose(here, alone, atol=1e-5), (attn, row, start)
                start += len(piece)


def sliding(kind: str, attn: str) -> Any:
    """A tiny model whose attention slides over the last 3 tokens: Mistral's every layer, or
    Gemma 2's every other layer (its ``layer_types``)."""
    sizes = dict(
        vocab_size=len(VOCAB) + 2, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        sliding_window=3,
    )  # fmt: skip
    if kind == "mistral":
        config = transformers.MistralConfig(**sizes)
        model_class: Any = transformers.MistralForCausalLM
    else:
        config = transformers.Gemma2Config(**sizes, head_dim=8)
        model_class = transformers.Gemma2ForCausalLM
    config._attn_implementation = attn
    torch.manual_seed(0)
    return model_class(config).eval()


@pytest.mark.parametrize(
    ("kind", "attn"),
    [
        ("mistral", "sdpa"),
        ("mistral", "eager"),
        ("gemma2", "eager"),  # (Gemma 2 has no sdpa in transformers)
        pytest.param("gemma2", "flex_attention", marks=pytest.mark.slow),  # compiles: ~10 s
    ],
)
def test_a_sliding_window_is_kept(packed_batch: DocumentBatch, kind: str, attn: str) -> None:
    """A model whose attention slides over a window (Mistral, Gemma 2/3, GPT-OSS) gives each
    document the logits it gives it alone, and the flattening collator's loss: the
    block-diagonal mask replaced the model's window (every token attended to its whole
    document: logits 0.19 off in a reviewer's Mistral), now it is cut to it."""
    from lading.integrations.transformers_lm import model_inputs

    model = sliding(kind, attn)
    assert max(len(p) for row in range(4) for p in pieces(packed_batch, row)) > 3  # the case
    with torch.no_grad():
        kwargs = dict(model_inputs(packed_batch, model, "cpu"))
        logits = model(**kwargs).logits
        for row in range(packed_batch.input_ids.shape[0]):
            start = 0
            for piece in pieces(packed_batch, row):
                alone = model(input_ids=torch.tensor([piece])).logits[0]
                here = logits[row, start : start + len(piece)]
                assert torch.allclose(here, alone, atol=1e-5), (kind, attn, row, start)
                start += len(piece)
        rows = range(packed_batch.input_ids.shape[0])
        features = [{"input_ids": p} for row in rows for p in pieces(packed_batch, row)]
        theirs = model(**transformers.DataCollatorWithFlattening()(features), use_cache=False)
        assert torch.allclose(model(**kwargs).loss, theirs.loss, atol=1e-5)


def test_a_bool_mask_in_eager_would_be_wrong(packed_batch: DocumentBatch) -> None:
    # why eager gets an additive mask: the bool mask adds 1s and 0s to the scores
    model = tiny_llama("eager")
    kwargs = to_hf_kwargs(packed_batch, "eager")
    with torch.no_grad():
        right = model(**kwargs).logits
        kwargs["attention_mask"] = packed_batch.attention_mask()
        wrong = model(**kwargs).logits
    assert (right - wrong).abs().max() > 1e-3


def test_loss_equals_the_framework_route(packed_batch: DocumentBatch) -> None:
    model = tiny_llama("sdpa")
    rows = range(packed_batch.input_ids.shape[0])
    features = [{"input_ids": p} for row in rows for p in pieces(packed_batch, row)]
    theirs = transformers.DataCollatorWithFlattening()(features)
    with torch.no_grad():
        ours = model(**to_hf_kwargs(packed_batch, "sdpa")).loss
        framework = model(**theirs, use_cache=False).loss
    assert torch.allclose(ours, framework, atol=1e-5), (ours, framework)


def test_refusals(packed_batch: DocumentBatch) -> None:
    with pytest.raises(ValueError, match="use_cache=False"):
        to_hf_kwargs(packed_batch, "sdpa", use_cache=True)
    with pytest.raises(ValueError, match=r"'paged_attention'.*document_ids"):
        to_hf_kwargs(packed_batch, "paged_attention")


def test_default_labels_leave_the_document_start_unscored(packed_batch: DocumentBatch) -> None:
    # eod_mask_loss is on by default: the end-of-text -> next document's first token pair
    starts = packed_batch.position_ids == 0
    scored = packed_batch.loss_mask.bool()
    assert not bool((scored[:, :-1] & starts[:, 1:]).any())


def test_the_guides_loss_from_ladings_labels_scores_every_pair(
    packed_batch: DocumentBatch,
) -> None:
    """The lines docs/language-models.md gives for a loss of every pair: transformers' labels
    leave each row's last pair unscored (a review counted 10,406 pairs of 1,336,297 never
    trained on Wikipedia at Packed(128), among them the pairs where a split document's pieces
    meet); the loss from lading's labels scores each pair of the loss mask once, and equals
    the cross-entropy of those pairs computed by hand."""
    model = tiny_llama("sdpa")
    batch = packed_batch
    kwargs = to_hf_kwargs(batch, model.config._attn_implementation)
    with torch.no_grad():
        logits = model(**{k: v for k, v in kwargs.items() if k != "labels"}).logits
    scored = batch.loss_mask.reshape(-1).bool()  # (flash attention flattens the rows: reshape)
    loss = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1])[scored], batch.labels.reshape(-1)[scored]
    )
    hf_scored = int((kwargs["labels"] != -100).sum())
    last_scored = int(batch.loss_mask[:, -1].sum())  # rows whose last pair lading scores
    assert int(scored.sum()) == hf_scored + last_scored and last_scored > 0
    rows, cols = torch.nonzero(batch.loss_mask.bool(), as_tuple=True)
    by_hand = -torch.log_softmax(logits[rows, cols], -1)[
        torch.arange(len(rows)), batch.labels[rows, cols]
    ].mean()
    assert torch.allclose(loss, by_hand, atol=1e-6)
