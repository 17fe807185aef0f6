"""CrossEncoderCollator: the same tensors as the HF tokenizer, from stored tokens or from text."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import lading
from lading.ir import CrossEncoderCollator, TrainingGroups, read_qrels, read_queries, read_run
from lading.sources import read_records

pytest.importorskip("tokenizers")
transformers = pytest.importorskip("transformers")
POOL = "ir/normalized/msmarco-passage-trecdl1920-pool"


def bert_tokenizer(texts: list[str], path: Path) -> Path:
    """A BERT-style WordPiece tokenizer trained here, with BERT's pair template."""
    from lading.stores.tokens import save_tokenizer, train_tokenizer

    return save_tokenizer(train_tokenizer(texts, "wordpiece", 4000), path)


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from conftest import shared_data

    root = shared_data()
    if root is None:
        pytest.skip("real data not found: set LADING_DATA or put it at ../shared/data")
    tmp = tmp_path_factory.mktemp("collate")
    pool = root / POOL
    texts = [r.text for _, r in zip(range(5000), read_records(pool / "docs.tsv"))]
    tok_path = bert_tokenizer(texts, tmp / "tokenizer.json")
    tokens = lading.build_store(
        pool / "docs.tsv", tmp / "tokens", tokenizer=tok_path, progress=False
    )
    plain = lading.build_store(pool / "docs.tsv", tmp / "plain", progress=False)
    args = (
        read_queries(pool / "queries.tsv"),
        read_qrels(pool / "qrels.in_pool.txt"),
        read_run(pool / "runs/dl19.bm25.run"),
    )
    hf = transformers.PreTrainedTokenizerFast(
        tokenizer_file=str(tok_path),
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        pad_token="[PAD]",
        mask_token="[MASK]",
    )
    return {"tok": tok_path, "tokens": tokens, "plain": plain, "args": args, "hf": hf}


@pytest.mark.parametrize("max_length", [96, 128, 512])
@pytest.mark.parametrize("kind", ["tokens", "plain"])
def test_equals_the_hf_tokenizer(setup: dict[str, Any], max_length: int, kind: str) -> None:
    store = setup[kind]
    groups = TrainingGroups(store, *setup["args"], group_size=4, on_missing="skip")
    collate = CrossEncoderCollator(store, setup["tok"], max_length=max_length)
    assert collate.use_tokens == (kind == "tokens")
    items = [groups[i] for i in range(0, len(groups), len(groups) // 12)]
    batch = collate(items)
    n = len(items) * 4
    assert batch["input_ids"].shape[0] == n and batch["input_ids"].shape[1] % 8 == 0
    assert batch["labels"].tolist() == [1.0, 0.0, 0.0, 0.0] * len(items)
    row = 0
    for item in items:
        for text in store.get_many(item["doc_ids"]):
            want = setup["hf"](
                item["query"],
                text,
                truncation="only_second",
                max_length=max_length,
                return_token_type_ids=True,
            )
            length = len(want["input_ids"])
            assert batch["input_ids"][row, :length].tolist() == want["input_ids"]
            assert batch["token_type_ids"][row, :length].tolist() == want["token_type_ids"]
            assert batch["attention_mask"][row].sum().item() == length
            assert (batch["input_ids"][row, length:] == 0).all()  # [PAD] is id 0
            row += 1


def test_token_path_refuses_a_store_of_another_tokenizer(
    setup: dict[str, Any], tmp_path: Path
) -> None:
    other = bert_tokenizer(["completely different words here"] * 50, tmp_path / "other.json")
    with pytest.raises(ValueError, match="tokenized with another tokenizer"):
        CrossEncoderCollator(setup["tokens"], other)
    with pytest.raises(ValueError, match="has no tokens"):
        CrossEncoderCollator(setup["plain"], setup["tok"], use_tokens=True)


def test_collator_pickles_for_spawned_workers(setup: dict[str, Any]) -> None:
    import pickle

    collate = CrossEncoderCollator(setup["tokens"])
    groups = TrainingGroups(setup["tokens"], *setup["args"], group_size=2, on_missing="skip")
    again = pickle.loads(pickle.dumps(collate))
    items = [groups[0], groups[1]]
    assert torch.equal(again(items)["input_ids"], collate(items)["input_ids"])


def test_queries_are_cut_to_max_query_length(setup: dict[str, Any]) -> None:
    store = setup["tokens"]
    collate = CrossEncoderCollator(store, max_length=64, max_query_length=5)
    groups = TrainingGroups(store, *setup["args"], group_size=2, on_missing="skip")
    item = dict(groups[0])
    item["query"] = " ".join(["longword"] * 40)
    batch = collate([item])
    sep = collate.sep_id
    first_sep = int(np.flatnonzero(batch["input_ids"][0].numpy() == sep)[0])
    assert first_sep == 1 + 5


def test_tokens_cut_shorter_than_the_rows_are_refused(tmp_path: Path) -> None:
    """A store built with ``max_length=16`` tokens a document, collated at 64, gave rows of
    21 tokens where the text path (and the HF tokenizer) gives 64: every document silently
    cut to the store's 16 tokens (``lading build --max-length 128`` then ``lading train
    --max-length 512`` trained on a quarter of each passage). Refused, naming both lengths;
    tokens long enough for the rows are used as before."""
    texts = [" ".join(f"w{(i * 7 + j) % 40}" for j in range(60)) for i in range(10)]
    source = tmp_path / "c.tsv"
    source.write_text("".join(f"d{i}\t{t}\n" for i, t in enumerate(texts)))
    tok = bert_tokenizer(texts, tmp_path / "tok.json")
    short = lading.build_store(source, tmp_path / "s", tokenizer=tok, max_length=16)
    items = [{"query": "w1 w2", "doc_ids": ["d1"], "doc_codes": short.rows(["d1"])}]
    text_rows = CrossEncoderCollator(short, tok, 64, 16, use_tokens=False)(items)
    assert int(text_rows["attention_mask"].sum()) == 64
    with pytest.raises(ValueError, match=r"16 tokens a document.*max_length=64"):
        CrossEncoderCollator(short, tok, 64, 16)
    with pytest.raises(ValueError, match=r"16 tokens a document"):
        CrossEncoderCollator(short, tok, 64, 16, use_tokens=True)
    with pytest.raises(ValueError) as refused:  # the fix it names must itself be taken:
        CrossEncoderCollator(short, tok, 128, 64)  # max_length=19 alone was refused next
    assert "max_length=19 or less with max_query_length=15 or less" in str(refused.value)
    fits = CrossEncoderCollator(short, tok, max_length=19, max_query_length=15)(items)
    assert int(fits["attention_mask"].sum()) == 19
    fits = CrossEncoderCollator(short, tok, max_length=19, max_query_length=8)(items)
    assert int(fits["attention_mask"].sum()) == 19  # [CLS] 2 [SEP] 16 would fit 21: cut at 19
