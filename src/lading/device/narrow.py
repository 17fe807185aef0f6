"""Narrow types over the bus: ids sent in the store's dtype and widened to int64 on the device.

A cross-encoder batch of 32 groups x 8 documents x 512 tokens is 3 MiB as the int64 ids, attention
mask and token types a model takes, but the information in it is the ids (2 bytes each for a
vocabulary up to 65,536) and a few integers per row. This module holds what any workload needs for
that (the id dtype, widening, moving a batch, counting its bytes); the layouts that use it are the
workloads' own (the cross-encoder's in :mod:`lading.ir.layouts`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from lading.stores.tokens import token_dtype


def narrow_dtype(vocab_size: int) -> np.dtype[Any]:
    """The id dtype sent over the bus: the store's own
    (:func:`lading.stores.tokens.token_dtype`) where that is uint16, else int32 (torch has few
    kernels for uint32; ids stay below 2**31)."""
    return np.dtype(np.uint16) if token_dtype(vocab_size).itemsize == 2 else np.dtype(np.int32)


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


def to(batch: Mapping[str, Any], device: torch.device) -> dict[str, Any]:
    """Every tensor of ``batch`` on ``device`` (a no-op for those already there)."""
    return {
        k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v
        for k, v in batch.items()
    }


def batch_bytes(batch: Any) -> int:
    """Bytes of every tensor in ``batch``: what one host-to-device copy of it moves."""
    from lading.device.prefetch import tensors

    return sum(t.numel() * t.element_size() for t in tensors(batch))
