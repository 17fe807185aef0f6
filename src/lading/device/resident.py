"""GPU-resident tokens: a tokenized store or corpus copied to the device once per rank.

MS MARCO passages are ~1.2 GB as uint16 token ids, the documents at 512 tokens at most 3.3 GB:
either fits beside a model in one GPU's memory. :func:`to_device` copies a ragged token array
(ids + ``n + 1`` offsets) there, in chunks (no host copy of the whole corpus), and batches are
then built on the device from row numbers or stream positions alone: per step only a few
integers cross the bus.

- :meth:`ResidentTokens.assemble`: a cross-encoder batch from document rows and the (short)
  query ids (``CrossEncoderCollator(emit="rows")``), equal to the collator's own output.
- :class:`ResidentStream`: an LM epoch stream (documents permuted, concatenated, cyclic) read
  on the device, equal to :class:`lading.lm.stream.EpochStream` reading on the host.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from lading.device.narrow import masks, to, widen

CHUNK = 1 << 26  # tokens per host-to-device copy while making a store resident

DOC_ROWS = "doc_rows"  # a rows batch: store rows of the documents, one per output row
DOC_LENGTHS = "doc_lengths"  # document tokens kept in each row (after the length budget)
QUERY_IDS = "query_ids"  # [groups, longest query] narrow ids, padded
QUERY_LENGTHS = "query_lengths"  # query tokens of each group
SPECIAL = "special"  # (cls, sep, pad) ids


class ResidentTokens:
    """Token ids of ``n`` rows (``tokens[offsets[i]:offsets[i + 1]]``) held on ``device``.

    Attributes:
        tokens: the ids as stored, in a signed type of the same width (uint16 ids are kept as
            their int16 bit pattern, uint32 as int32: gathers work on every device).
        unsigned: whether ``tokens`` holds an unsigned type's bits (widened with a mask).
        offsets: int64 ``[n + 1]``.
    """

    def __init__(self, tokens: torch.Tensor, offsets: torch.Tensor, unsigned: bool) -> None:
        self.tokens, self.offsets, self.unsigned = tokens, offsets, unsigned

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

    def assemble(self, batch: Mapping[str, Any]) -> dict[str, Any]:
        """The model inputs of a rows batch (``CrossEncoderCollator(emit="rows")``) built here:
        ``[CLS] query [SEP] document [SEP]``, padded, with mask and token types, int64.
        The batch's other entries are moved to this device as they are."""
        out = to(batch, self.device)
        rows = out.pop(DOC_ROWS).to(torch.int64)
        d_len = out.pop(DOC_LENGTHS).to(torch.int64)
        query = widen(out.pop(QUERY_IDS))
        groups = query.shape[0]
        cls_id, sep_id, pad_id = out.pop(SPECIAL)
        per_group = len(rows) // max(1, groups)
        q_len = out.pop(QUERY_LENGTHS).to(torch.int64).repeat_interleave(per_group)
        query = query.repeat_interleave(per_group, dim=0)
        lengths = q_len + d_len + 3
        width = int(out.pop("width"))
        cols = torch.arange(width, device=self.device)[None, :]
        q, d, end = q_len[:, None], d_len[:, None], lengths[:, None]
        ids = torch.full((len(rows), width), pad_id, dtype=torch.int64, device=self.device)
        if query.shape[1]:
            q_part = query.gather(1, (cols - 1).clamp(0, query.shape[1] - 1).expand(len(rows), -1))
            ids = torch.where((cols >= 1) & (cols <= q), q_part, ids)
        starts = self.offsets[rows][:, None]
        d_part = self.take(starts + cols - q - 2)
        ids = torch.where((cols >= q + 2) & (cols < q + 2 + d), d_part, ids)
        ids = torch.where(cols == 0, cls_id, ids)
        ids = torch.where((cols == q + 1) | (cols == end - 1), sep_id, ids)
        attention, token_type = masks(width, lengths, q_len + 2)
        out.update(input_ids=ids, attention_mask=attention, token_type_ids=token_type)
        return out


def token_arrays(source: Any) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
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
    """
    device = torch.device(device)
    tokens, offsets = token_arrays(source)
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
    return ResidentTokens(on_device, offs, unsigned=dtype.kind == "u")


class ResidentStream:
    """An LM epoch stream read on the device: documents (given by their start and length in
    the resident tokens, in epoch order) concatenated into a cycle.

    Args:
        resident: the corpus's tokens on the device.
        doc_start, lengths: per document of the epoch, in order (host arrays; copied once).
        backwards: read the stream from its end to its start.
    """

    def __init__(
        self,
        resident: ResidentTokens,
        doc_start: npt.NDArray[np.int64],
        lengths: npt.NDArray[np.int64],
        backwards: bool = False,
    ) -> None:
        device = resident.device
        self.resident, self.backwards = resident, backwards
        self.doc_start = torch.from_numpy(np.asarray(doc_start, dtype=np.int64)).to(device)
        self.lengths = torch.from_numpy(np.asarray(lengths, dtype=np.int64)).to(device)
        self.cum_end = torch.cumsum(self.lengths, 0)
        self.total = int(np.sum(lengths))
        if self.total < 1:
            raise ValueError("the epoch stream holds no tokens")

    def read(self, starts: torch.Tensor | npt.ArrayLike, n: int) -> torch.Tensor:
        """int64 ``[rows, n]``: row ``r`` is stream positions ``[starts[r], starts[r] + n)``,
        wrapping at the end of the stream (what ``EpochStream.read`` gives, row by row)."""
        device = self.resident.device
        begin = torch.as_tensor(starts, dtype=torch.int64).to(device)
        total = self.total
        if self.backwards:  # reversed [s, s+n) is forward [T-s-n, T-s), read back to front
            begin = (total - begin - n) % total
        pos = (begin[:, None] + torch.arange(n, device=device)) % total
        k = torch.searchsorted(self.cum_end, pos, right=True)
        src = self.doc_start[k] + pos - (self.cum_end[k] - self.lengths[k])
        out = self.resident.take(src)
        return out.flip(1) if self.backwards else out
