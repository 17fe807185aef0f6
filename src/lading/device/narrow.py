"""Narrow batches over the bus: token ids in the store's dtype plus lengths, widened on the device.

A cross-encoder batch of 32 groups x 8 documents x 512 tokens is 3 MiB as the int64 ids, attention
mask and token types a model takes, but the information in it is the ids (2 bytes each for a
vocabulary up to 65,536) and, per row, its length and where its second segment starts. A
collator emits that (``CrossEncoderCollator(emit="narrow")``) and :func:`expand` builds the
model's tensors after the copy, on the device, equal to what the collator would have built.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

LENGTHS = "lengths"  # tokens in each row, special tokens included
SEGMENT_STARTS = "segment_starts"  # column of each row's first second-segment token
MODEL_INPUTS: tuple[str, ...] = ("input_ids", "attention_mask", "token_type_ids")


def narrow_dtype(vocab_size: int) -> np.dtype[Any]:
    """The id dtype sent over the bus: uint16 up to 65,536 ids (a store's tokens), else int32."""
    return np.dtype(np.uint16) if vocab_size <= 2**16 else np.dtype(np.int32)


def widen(ids: torch.Tensor) -> torch.Tensor:
    """``ids`` as int64. Where a device has no conversion kernel for an unsigned type (torch's
    unsigned types have only some kernels), its bits are read through the signed type of the
    same width and masked."""
    try:
        return ids.to(torch.int64)
    except (RuntimeError, NotImplementedError):
        signed = {torch.uint16: torch.int16, torch.uint32: torch.int32}.get(ids.dtype)
        if signed is None:
            raise
        return ids.view(signed).to(torch.int64) & ((1 << (8 * ids.element_size())) - 1)


def is_narrow(batch: Mapping[str, Any]) -> bool:
    """Whether ``batch`` carries lengths instead of an attention mask."""
    return LENGTHS in batch and "attention_mask" not in batch


def to(batch: Mapping[str, Any], device: torch.device) -> dict[str, Any]:
    """Every tensor of ``batch`` on ``device`` (a no-op for those already there)."""
    return {
        k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v
        for k, v in batch.items()
    }


def expand(batch: Mapping[str, Any], device: torch.device | str) -> dict[str, Any]:
    """``batch`` on ``device`` with the model's int64 ``input_ids``, ``attention_mask`` and
    ``token_type_ids``, built there from narrow ids, lengths and segment starts.

    A batch that already has them (the collator's default output) is only moved; a
    GPU-resident batch (document rows, no ids) needs
    :meth:`lading.device.ResidentTokens.assemble` instead.
    """
    out = to(batch, torch.device(device))
    if not is_narrow(out):
        return out
    ids = widen(out["input_ids"])
    lengths = out.pop(LENGTHS).to(torch.int64)
    starts = out.pop(SEGMENT_STARTS).to(torch.int64)
    attention, token_type = masks(ids.shape[1], lengths, starts)
    out.update(input_ids=ids, attention_mask=attention, token_type_ids=token_type)
    return out


def masks(
    width: int, lengths: torch.Tensor, starts: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(attention mask, token types) of rows of ``lengths`` whose second segment starts at
    ``starts``, both int64 ``[rows, width]`` on the lengths' device."""
    cols = torch.arange(width, device=lengths.device)
    attention = cols < lengths[:, None]
    token_type = (cols >= starts[:, None]) & attention
    return attention.to(torch.int64), token_type.to(torch.int64)


def batch_bytes(batch: Any) -> int:
    """Bytes of every tensor in ``batch``: what one host-to-device copy of it moves."""
    from lading.device.prefetch import tensors

    return sum(t.numel() * t.element_size() for t in tensors(batch))
