"""GPU-resident tokens: a tokenized store or corpus copied to the device once per rank.

MS MARCO passages are ~1.2 GB as uint16 token ids, the documents at 512 tokens at most 3.3 GB:
either fits beside a model in one GPU's memory. :func:`to_device` copies a ragged token array
(ids + ``n + 1`` offsets) there, in chunks (no host copy of the whole corpus), and batches are
then built on the device from row numbers or stream positions alone: per step only a few
integers cross the bus.

:class:`ResidentTokens` only holds the ids and gathers them (:meth:`ResidentTokens.take`);
what a batch is made of is the workload's: the cross-encoder's rows in
:func:`lading.ir.layouts.assemble`, the LM's epoch stream in
:class:`lading.lm.resident.ResidentStream`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from lading.device.check import usable_device

CHUNK = 1 << 26  # tokens per host-to-device copy while making a store resident


class ResidentTokens:
    """Token ids of ``n`` rows (``tokens[offsets[i]:offsets[i + 1]]``) held on ``device``.

    Attributes:
        tokens: the ids as stored, in a signed type of the same width (uint16 ids are kept as
            their int16 bit pattern, uint32 as int32: gathers work on every device).
        unsigned: whether ``tokens`` holds an unsigned type's bits (widened with a mask).
        offsets: int64 ``[n + 1]``.
        content: the content id of the corpus or store they were copied from (None: not
            known), so that a loader given them for another corpus refuses them.
    """

    def __init__(
        self,
        tokens: torch.Tensor,
        offsets: torch.Tensor,
        unsigned: bool,
        content: str | None = None,
    ) -> None:
        self.tokens, self.offsets, self.unsigned = tokens, offsets, unsigned
        self.content = content

    @property
    def device(self) -> torch.device:
        return self.tokens.device

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def nbytes(self) -> int:
        """Device memory held (ids and offsets)."""
        return sum(t.numel() * t.element_size() for t in (self.tokens, self.offsets))

    def take(self, index: torch.Tensor) -> torch.Tensor:
        """int64 ids at token positions ``index`` (any shape, on the device)."""
        if self.tokens.numel() == 0:
            return torch.zeros(index.shape, dtype=torch.int64, device=self.device)
        raw = self.tokens[index.clamp(0, self.tokens.numel() - 1)].to(torch.int64)
        if self.unsigned:
            raw &= (1 << (8 * self.tokens.element_size())) - 1
        return raw


def ragged_tokens(source: Any) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
    """(ids, offsets) of a tokenized store (``token_arrays()``) or a
    :class:`~lading.lm.TokenCorpus` (``tokens``/``offsets``)."""
    arrays = getattr(source, "token_arrays", None)
    if callable(arrays):
        tokens, offsets = arrays()
        return tokens, offsets
    if hasattr(source, "tokens") and hasattr(source, "offsets"):
        return source.tokens, source.offsets
    raise TypeError(
        f"{source!r} holds no token ids to put on a device: give a store built with a "
        "tokenizer or a lading.lm.TokenCorpus"
    )


def to_device(source: Any, device: torch.device | str) -> ResidentTokens:
    """Copy the token ids and offsets of ``source`` (a tokenized store or a TokenCorpus) to
    ``device``, :data:`CHUNK` tokens at a time (once per rank; the host keeps only the map).

    Raises:
        TypeError: ``source`` has no token ids.
        ValueError: the ids are of a type wider than 32 bits.
        DeviceUnavailableError: ``device`` is a CUDA device this process cannot use.
    """
    device = usable_device(device)
    tokens, offsets = ragged_tokens(source)
    dtype = np.dtype(tokens.dtype)
    if dtype.itemsize > 4:
        raise ValueError(f"{source!r}: token ids of {dtype} are wider than 32 bits")
    signed = np.dtype(f"<i{dtype.itemsize}")
    bits = np.asarray(tokens).view(signed)
    torch_dtype = {1: torch.int8, 2: torch.int16, 4: torch.int32}[dtype.itemsize]
    on_device = torch.empty(len(bits), dtype=torch_dtype, device=device)
    for start in range(0, len(bits), CHUNK):
        piece = torch.from_numpy(np.array(bits[start : start + CHUNK]))  # a writable copy
        on_device[start : start + len(piece)].copy_(piece)
    offs = torch.from_numpy(np.asarray(offsets, dtype=np.int64)).to(device)
    content = getattr(source, "content_id", None)
    return ResidentTokens(
        on_device, offs, dtype.kind == "u", content if isinstance(content, str) else None
    )
