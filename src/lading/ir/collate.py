"""CrossEncoderCollator: model inputs for ``[CLS] query [SEP] document [SEP]`` pairs.

Two paths. With a store built with the model's tokenizer, documents are never tokenized in the
training loop: their token ids are read from the map (uint16, no copy) and only the short
queries are encoded, in one ``encode_batch``. Without tokens (the study's setup) the pairs are
tokenized in the collator. Both give what the HF tokenizer gives for
``tokenizer(query, doc, truncation="only_second", max_length=max_length)`` (for queries within
``max_query_length``), padded to the batch's longest row rounded up to a multiple of 8
(tensor cores like multiples of 8).

Rows are laid out group by group, relevant document first, so ``logits.view(-1, group_size)``
with target 0 is the listwise loss and ``labels`` (1.0 for the relevant row) the pointwise one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from lading.stores.base import DocStore
from lading.stores.packed import PackedStore
from lading.tokens import describe_tokenizer, load_tokenizer


class CrossEncoderCollator:
    """Turns a list of :class:`~lading.ir.TrainingGroups` items into a batch of tensors.

    Args:
        store: where the documents are (the same store the groups were made from).
        tokenizer: the model's tokenizer (a ``tokenizers.Tokenizer``, HF fast tokenizer or
            path). Optional for a tokenized store: its own copy is used.
        max_length: longest row, special tokens included.
        max_query_length: query tokens kept (the document fills the rest).
        pad_to_multiple_of: row length granularity.
        cls_token, sep_token, pad_token: names of the special tokens in the vocabulary.
        use_tokens: ``None`` (tokens when the store has them), True (require them) or False
            (tokenize text, the study's way).

    Raises:
        ValueError: the store was tokenized with a different tokenizer than ``tokenizer``.
    """

    def __init__(
        self,
        store: DocStore,
        tokenizer: Any = None,
        max_length: int = 512,
        max_query_length: int = 64,
        pad_to_multiple_of: int = 8,
        *,
        cls_token: str = "[CLS]",
        sep_token: str = "[SEP]",
        pad_token: str = "[PAD]",
        use_tokens: bool | None = None,
    ) -> None:
        has_tokens = isinstance(store, PackedStore) and store.has_tokens
        if use_tokens and not has_tokens:
            raise ValueError(f"{store!r} has no tokens; build it with the model's tokenizer")
        self.use_tokens = has_tokens if use_tokens is None else use_tokens
        if tokenizer is None:
            if not self.use_tokens:
                raise ValueError("tokenizing text needs tokenizer=")
            assert isinstance(store, PackedStore)
            tok = store.tokenizer()
        else:
            tok = load_tokenizer(tokenizer)
        if self.use_tokens:
            assert isinstance(store, PackedStore)
            built_with = store.meta["tokens"]["sha256"]
            if describe_tokenizer(tok)["sha256"] != built_with:
                raise ValueError(
                    f"{store!r} was tokenized with another tokenizer than the one given; "
                    "rebuild the store with the model's tokenizer, or pass use_tokens=False"
                )
        if max_length < max_query_length + 4:
            raise ValueError(
                f"max_length {max_length} leaves no room for a document after a "
                f"query of up to {max_query_length} tokens"
            )
        self.store, self.tokenizer = store, tok
        self.max_length, self.max_query_length = max_length, max_query_length
        self.multiple = pad_to_multiple_of
        ids = [tok.token_to_id(t) for t in (cls_token, sep_token, pad_token)]
        if any(i is None for i in ids):
            raise ValueError(
                f"the tokenizer lacks one of {cls_token!r}, {sep_token!r}, "
                f"{pad_token!r}; pass cls_token=/sep_token=/pad_token="
            )
        self.cls_id, self.sep_id, self.pad_id = (int(i) for i in ids)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["tokenizer"] = self.tokenizer.to_str()  # Tokenizer objects travel as their JSON
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        from tokenizers import Tokenizer

        state["tokenizer"] = Tokenizer.from_str(state["tokenizer"])
        self.__dict__.update(state)

    def __call__(self, items: Sequence[dict[str, Any]]) -> dict[str, Any]:
        group_size = len(items[0]["doc_codes"])
        queries = [it["query"] for it in items]
        if self.use_tokens:
            rows = self._rows_from_tokens(items, queries)
        else:
            rows = self._rows_from_text(items, queries, group_size)
        batch = self._pad(rows)
        labels = torch.zeros(len(items) * group_size, dtype=torch.float32)
        labels[::group_size] = 1.0
        batch["labels"] = labels
        batch["group_size"] = group_size
        batch["pairs"] = [f"{it.get('qid')}/{it['doc_ids'][0]}" for it in items]
        return batch

    def _rows_from_tokens(
        self, items: Sequence[dict[str, Any]], queries: list[str]
    ) -> list[tuple[np.ndarray, int]]:
        assert isinstance(self.store, PackedStore)
        encoded = self.tokenizer.encode_batch(queries, add_special_tokens=False)
        codes = np.concatenate([it["doc_codes"] for it in items])
        docs = self.store.tokens_at(codes)
        group_size = len(items[0]["doc_codes"])
        out = []
        for g, enc in enumerate(encoded):
            q = np.asarray(enc.ids[: self.max_query_length], dtype=np.int64)
            budget = self.max_length - len(q) - 3
            head = np.concatenate([[self.cls_id], q, [self.sep_id]])
            for doc in docs[g * group_size : (g + 1) * group_size]:
                body = np.asarray(doc[:budget], dtype=np.int64)
                out.append((np.concatenate([head, body, [self.sep_id]]), len(head)))
        return out

    def _rows_from_text(
        self, items: Sequence[dict[str, Any]], queries: list[str], group_size: int
    ) -> list[tuple[np.ndarray, int]]:
        texts = self.store.get_many([d for it in items for d in it["doc_ids"]])
        q_encoded = self.tokenizer.encode_batch(queries, add_special_tokens=False)
        d_encoded = self.tokenizer.encode_batch(texts, add_special_tokens=False)
        out = []
        for g, enc in enumerate(q_encoded):
            q = np.asarray(enc.ids[: self.max_query_length], dtype=np.int64)
            budget = self.max_length - len(q) - 3
            head = np.concatenate([[self.cls_id], q, [self.sep_id]])
            for d in d_encoded[g * group_size : (g + 1) * group_size]:
                body = np.asarray(d.ids[:budget], dtype=np.int64)
                out.append((np.concatenate([head, body, [self.sep_id]]), len(head)))
        return out

    def _pad(self, rows: list[tuple[np.ndarray, int]]) -> dict[str, Any]:
        longest = max(len(r) for r, _ in rows)
        width = -(-longest // self.multiple) * self.multiple
        input_ids = np.full((len(rows), width), self.pad_id, dtype=np.int64)
        token_type = np.zeros((len(rows), width), dtype=np.int64)
        attention = np.zeros((len(rows), width), dtype=np.int64)
        for i, (row, head) in enumerate(rows):
            input_ids[i, : len(row)] = row
            token_type[i, head : len(row)] = 1
            attention[i, : len(row)] = 1
        return {
            "input_ids": torch.from_numpy(input_ids),
            "attention_mask": torch.from_numpy(attention),
            "token_type_ids": torch.from_numpy(token_type),
        }
