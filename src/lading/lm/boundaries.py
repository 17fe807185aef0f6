"""Document boundaries inside a batch of windows: positions, cu_seqlens, masks, loss mask.

A window of ``seq_len + 1`` tokens holds pieces of one or more documents (windows of the epoch
stream cross document ends; packed windows hold whole documents back to back, then padding).
The loader records, per token, which *document* of its row it belongs to (``0, 1, 2 …`` in
reading order; ``-1`` for padding) and everything a transformer needs follows from that:

- ``position_ids``: the index of each input token inside its segment, restarting at 0 where a
  document starts (Megatron's ``reset_position_ids``);
- ``cu_seqlens`` / ``max_seqlen``: the batch flattened to ``B * seq_len`` tokens cut into its
  segments, as ``int32`` offsets ``[0, …, B * seq_len]`` (flash-attention's varlen API,
  modded-nanogpt's ``cum_lengths``). A row's padding is one segment of its own;
- :func:`attention_mask`: the block-diagonal causal mask ``[B, 1, L, L]`` (``True``: may
  attend) for :func:`torch.nn.functional.scaled_dot_product_attention`, Megatron's
  ``reset_attention_mask``; :func:`document_mask_mod` the same rule as a FlexAttention
  ``mask_mod`` (torchtitan / attention-gym's document mask);
- ``loss_mask``: 1 where a label should be scored. Labels are the next token of the window, so
  the last token of a document (its end-of-text id) is labelled with the first token of the
  next segment. That pair is not scored with ``eod_mask_loss`` (Megatron's name; the loader's
  default, as in transformers, where nothing predicts a document's first token from another
  document); without it the model also learns to guess how documents begin. Labels that are
  padding are never scored. :mod:`lading.integrations.transformers_lm` turns a batch into a
  transformers model's keyword arguments (its label convention, a mask per attention).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import numpy.typing as npt
import torch

IGNORE_INDEX = -100
"""The label of a position that is not scored in ``(x, y)`` batches (packed windows' padding):
``torch.nn.functional.cross_entropy``'s default ``ignore_index``, as in transformers."""


class DocumentBatch(NamedTuple):
    """A batch of windows with its document boundaries (``Windows``/``Packed(boundaries=True)``)."""

    input_ids: torch.Tensor  # [B, L] int64
    labels: torch.Tensor  # [B, L] int64: the next token (padding id where padded)
    position_ids: torch.Tensor  # [B, L] int64: restart at 0 at every document start
    document_ids: torch.Tensor  # [B, L] int64: segment of each input token in its row, -1 pad
    loss_mask: torch.Tensor  # [B, L] float32: 1 where the label counts
    cu_seqlens: torch.Tensor  # [segments + 1] int32 over the flattened batch
    max_seqlen: int  # longest segment

    def to(self, device: torch.device | str, non_blocking: bool = False) -> DocumentBatch:
        """The tensors moved to ``device`` (``max_seqlen`` stays a Python int)."""

        def move(t: torch.Tensor) -> torch.Tensor:
            return t.to(device, non_blocking=non_blocking)

        return self._replace(
            input_ids=move(self.input_ids),
            labels=move(self.labels),
            position_ids=move(self.position_ids),
            document_ids=move(self.document_ids),
            loss_mask=move(self.loss_mask),
            cu_seqlens=move(self.cu_seqlens),
        )

    def attention_mask(self) -> torch.Tensor:
        """The block-diagonal causal mask of this batch (see :func:`attention_mask`)."""
        return attention_mask(self.document_ids)


def renumber(documents: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Per-token document indices of one row as segments ``0, 1, …`` in reading order."""
    change = np.empty(len(documents), dtype=np.int64)
    if len(documents):
        change[0] = 0
        np.not_equal(documents[1:], documents[:-1], out=change[1:])
    return np.cumsum(change)


def positions(document_ids: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Index of every token within its segment, for rows ``[B, L]`` of document ids."""
    b, length = document_ids.shape
    starts = np.ones((b, length), dtype=bool)
    starts[:, 1:] = document_ids[:, 1:] != document_ids[:, :-1]
    column = np.broadcast_to(np.arange(length, dtype=np.int64), (b, length))
    return column - np.maximum.accumulate(np.where(starts, column, 0), axis=1)


def cu_seqlens(document_ids: npt.NDArray[np.int64]) -> npt.NDArray[np.int32]:
    """Offsets of the segments of the flattened rows ``[B, L]``: a row end always cuts."""
    b, length = document_ids.shape
    starts = np.ones((b, length), dtype=bool)
    starts[:, 1:] = document_ids[:, 1:] != document_ids[:, :-1]
    offsets = np.flatnonzero(starts.ravel())
    return np.append(offsets, b * length).astype(np.int32)


def document_batch(
    window: npt.NDArray[np.int64], document_ids: npt.NDArray[np.int64], eod_mask_loss: bool = True
) -> DocumentBatch:
    """The batch of ``window`` tokens ``[B, L + 1]`` whose document ids are ``document_ids``."""
    x, y = window[:, :-1], window[:, 1:]
    doc_x, doc_y = document_ids[:, :-1], document_ids[:, 1:]
    keep = (doc_x >= 0) & (doc_y >= 0)
    if eod_mask_loss:
        keep &= doc_x == doc_y
    cu = cu_seqlens(doc_x)
    return DocumentBatch(
        torch.from_numpy(np.ascontiguousarray(x)),
        torch.from_numpy(np.ascontiguousarray(y)),
        torch.from_numpy(positions(doc_x)),
        torch.from_numpy(np.ascontiguousarray(doc_x)),
        torch.from_numpy(keep.astype(np.float32)),
        torch.from_numpy(cu),
        int(np.diff(cu).max()) if len(cu) > 1 else 0,
    )


def attention_mask(document_ids: torch.Tensor) -> torch.Tensor:
    """``[B, 1, L, L]`` bool: query ``i`` may attend key ``j`` iff ``j <= i`` in its document.

    Padding tokens (id ``-1``) attend only to padding, so no row of the mask is empty (an
    empty row makes SDPA return NaN).
    """
    length = document_ids.shape[-1]
    causal = torch.ones(length, length, dtype=torch.bool, device=document_ids.device).tril()
    same = document_ids[:, :, None] == document_ids[:, None, :]
    return (same & causal)[:, None]


def document_mask_mod(
    document_ids: torch.Tensor,
) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]:
    """The same rule as :func:`attention_mask` as a FlexAttention ``mask_mod(b, h, q, kv)``:
    pass it to ``torch.nn.attention.flex_attention.create_block_mask``."""

    def mask_mod(
        b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor
    ) -> torch.Tensor:
        return (q_idx >= kv_idx) & (document_ids[b, q_idx] == document_ids[b, kv_idx])

    return mask_mod
