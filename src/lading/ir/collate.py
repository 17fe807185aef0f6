"""CrossEncoderCollator: model inputs for ``[CLS] query [SEP] document [SEP]`` pairs.

Two paths. With a store built with the model's tokenizer, documents are never tokenized in the
training loop: their token ids are read from the map (uint16, no copy) and only the short
queries are encoded, in one ``encode_batch``. Without tokens (the study's setup) the pairs are
tokenized in the collator. Both give what the HF tokenizer gives for
``tokenizer(query, doc, truncation="only_second", max_length=max_length)`` (for queries within
``max_query_length``), padded to the batch's longest row rounded up to a multiple of 8
(tensor cores like multiples of 8), at most ``max_length``.

Rows are laid out group by group, relevant document first, so ``logits.view(-1, group_size)``
with target 0 is the listwise loss and ``labels`` (1.0 for the relevant row) the pointwise one.

What crosses the bus (``emit=``): ``"wide"`` is the int64 ids, attention mask and token types a
model takes; ``"narrow"`` the ids in the store's dtype (uint16 up to 65,536 ids) with each row's
length and second-segment start, widened on the device by :func:`lading.ir.layouts.expand`;
``"rows"`` (tokenized stores) only the query ids and the documents' store rows, for a store held
on the device (:func:`lading.ir.layouts.assemble`). All three give equal tensors; the layouts
and their masks are defined once, in :mod:`lading.ir.layouts`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from lading.device import narrow_dtype
from lading.ir import layouts
from lading.stores.base import DocStore
from lading.stores.tokens import describe_tokenizer, load_tokenizer

EMIT: tuple[str, ...] = layouts.LAYOUTS


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
        emit: ``"wide"`` (int64 model inputs), ``"narrow"`` (ids in the store's dtype +
            lengths) or ``"rows"`` (query ids + document rows; needs a tokenized store).

    Raises:
        ValueError: the store was tokenized with a different tokenizer than ``tokenizer``,
            or keeps fewer tokens a document than rows of ``max_length`` hold (documents
            would be cut shorter than the text path cuts them); an unknown ``emit``, or
            ``"rows"`` without tokens.
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
        emit: str = "wide",
    ) -> None:
        if emit not in EMIT:
            raise ValueError(f"unknown emit={emit!r}; choose from {list(EMIT)}")
        has_tokens = store.has_tokens
        if use_tokens and not has_tokens:
            raise ValueError(f"{store!r} has no tokens; build it with the model's tokenizer")
        self.use_tokens = has_tokens if use_tokens is None else use_tokens
        if tokenizer is None:
            if not self.use_tokens:
                raise ValueError("tokenizing text needs tokenizer=")
            tok = store.tokenizer()
        else:
            tok = load_tokenizer(tokenizer)
        if self.use_tokens:
            built_with = (store.token_info or {}).get("sha256")
            if describe_tokenizer(tok)["sha256"] != built_with:
                raise ValueError(
                    f"{store!r} was tokenized with another tokenizer than the one given; "
                    "rebuild the store with the model's tokenizer, or pass use_tokens=False "
                    "(--no-use-tokens, in lading train cross-encoder and lading rerank) to "
                    "tokenize its text"
                )
        if max_length < max_query_length + 4:
            raise ValueError(
                f"max_length {max_length} leaves no room for a document after a "
                f"query of up to {max_query_length} tokens"
            )
        kept = (store.token_info or {}).get("max_length") if self.use_tokens else None
        if isinstance(kept, int) and kept < max_length - 3:  # a row: [CLS] q [SEP] d [SEP]
            shorter = f"max_length={kept + 3} or less"
            if max_query_length > kept - 1:  # (what max_length's own check would refuse next)
                shorter += f" with max_query_length={kept - 1} or less"
            raise ValueError(
                f"{store!r} keeps {kept} tokens a document (built with max_length={kept}), "
                f"fewer than rows of max_length={max_length} hold (up to {max_length - 3}): "
                "every document would be cut shorter than its text gives; rebuild the store "
                f"with max_length={max_length} or more, pass {shorter}, "
                "or use_tokens=False (--no-use-tokens) to tokenize the text"
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
        if emit == "rows" and not self.use_tokens:
            raise ValueError("emit='rows' sends store rows: it needs a store with tokens")
        self.emit = emit
        content = getattr(store, "content_id", None) if emit == "rows" else None
        self._content = content if isinstance(content, str) else None  # (assemble checks it)
        self.id_dtype = narrow_dtype(tok.get_vocab_size()) if emit != "wide" else np.dtype(np.int64)

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
        queries = [
            np.asarray(e.ids[: self.max_query_length], dtype=np.int64)
            for e in self.tokenizer.encode_batch(
                [it["query"] for it in items], add_special_tokens=False
            )
        ]
        if self.use_tokens:
            rows = np.concatenate([it["doc_codes"] for it in items])
            docs = self.store.tokens_at(rows)  # views of the map: only offsets are read here
            if self.emit == "rows":
                batch = self._rows(queries, docs, rows, group_size)
                return self._finish(batch, items, group_size)
        else:
            texts = self.store.get_many([d for it in items for d in it["doc_ids"]])
            docs = [
                np.asarray(e.ids, dtype=np.int64)
                for e in self.tokenizer.encode_batch(texts, add_special_tokens=False)
            ]
        batch = self._assemble(queries, docs, group_size)
        return self._finish(batch, items, group_size)

    def _finish(
        self, batch: dict[str, Any], items: Sequence[dict[str, Any]], group_size: int
    ) -> dict[str, Any]:
        labels = torch.zeros(len(items) * group_size, dtype=torch.float32)
        labels[::group_size] = 1.0
        batch["labels"] = labels
        batch["group_size"] = group_size
        batch["pairs"] = [f"{it.get('qid')}/{it['doc_ids'][0]}" for it in items]
        return batch

    def _shape(
        self, queries: list[np.ndarray], docs: list[np.ndarray], group_size: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """Per row: query tokens, document tokens kept, row length; and the padded width."""
        q_len = np.repeat([len(q) for q in queries], group_size)
        budget = self.max_length - q_len - 3  # the document fills what the query leaves
        d_len = np.minimum([len(d) for d in docs], budget)
        lengths = q_len + d_len + 3
        width = int(-(-lengths.max() // self.multiple) * self.multiple)
        # never past max_length: a model of 100 positions takes max_length=100, not 104
        return q_len, d_len, lengths, min(width, self.max_length)

    def _rows(
        self, queries: list[np.ndarray], docs: list[np.ndarray], rows: np.ndarray, group_size: int
    ) -> dict[str, Any]:
        """What a device holding the store's tokens needs to build the batch itself."""
        q_len, d_len, _, width = self._shape(queries, docs, group_size)
        longest = max((len(q) for q in queries), default=0)
        query_ids = np.full((len(queries), longest), self.pad_id, dtype=self.id_dtype)
        for g, q in enumerate(queries):
            query_ids[g, : len(q)] = q
        return {
            layouts.QUERY_IDS: torch.from_numpy(query_ids),
            layouts.QUERY_LENGTHS: torch.from_numpy(q_len[::group_size].astype(np.int32)),
            layouts.DOC_ROWS: torch.from_numpy(np.asarray(rows, dtype=np.int64)),
            layouts.DOC_LENGTHS: torch.from_numpy(d_len.astype(np.int32)),
            layouts.SPECIAL: (self.cls_id, self.sep_id, self.pad_id),
            layouts.WIDTH: width,
            layouts.STORE: self._content,
        }

    def _assemble(
        self, queries: list[np.ndarray], docs: list[np.ndarray], group_size: int
    ) -> dict[str, Any]:
        """Rows ``[CLS] q [SEP] d [SEP]`` written straight into the padded matrix."""
        n = len(docs)
        q_len, d_len, lengths, width = self._shape(queries, docs, group_size)
        input_ids = np.full((n, width), self.pad_id, dtype=self.id_dtype)
        input_ids[:, 0] = self.cls_id
        rows = np.arange(n)
        input_ids[rows, q_len + 1] = self.sep_id
        input_ids[rows, lengths - 1] = self.sep_id
        for g, q in enumerate(queries):  # one query fills its whole group at once
            input_ids[g * group_size : (g + 1) * group_size, 1 : 1 + len(q)] = q
        starts, ends = (q_len + 2).tolist(), (q_len + 2 + d_len).tolist()
        for i, (doc, a, b) in enumerate(zip(docs, starts, ends)):
            input_ids[i, a:b] = doc[: b - a]
        if self.emit == "narrow":
            return {
                "input_ids": torch.from_numpy(input_ids),
                layouts.LENGTHS: torch.from_numpy(lengths.astype(np.int32)),
                layouts.SEGMENT_STARTS: torch.from_numpy((q_len + 2).astype(np.int32)),
            }
        attention, token_type = layouts.masks(width, lengths, q_len + 2)
        return {
            "input_ids": torch.from_numpy(input_ids),
            "attention_mask": attention,
            "token_type_ids": token_type,
        }
