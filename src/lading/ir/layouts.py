"""The cross-encoder batch: its three layouts and the model inputs built from each, in one place.

A row is ``[CLS] query [SEP] document [SEP]``, padded; token types are 1 from the document on.
What the collator hands over (``CrossEncoderCollator(emit=...)``) is one of:

- ``"wide"``: the model's int64 ``input_ids``, ``attention_mask`` and ``token_type_ids``;
- ``"narrow"``: ``input_ids`` in the store's dtype (uint16 up to 65,536 ids) with each row's
  length (:data:`LENGTHS`) and second-segment start (:data:`SEGMENT_STARTS`), a quarter of the
  bytes over the bus; :func:`expand` rebuilds the masks on the device;
- ``"rows"``: only the query ids and the documents' store rows, for a store whose tokens are on
  the device (:func:`lading.device.to_device`); :func:`assemble` builds the rows there.

:func:`model_inputs` takes any of the three to what the model takes; all three give equal
tensors (tests/device/test_device.py). The masks of every layout come from :func:`masks`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from lading.device import ResidentTokens, to, widen
from lading.device.check import usable_device

MODEL_INPUTS: tuple[str, ...] = ("input_ids", "attention_mask", "token_type_ids")
LAYOUTS: tuple[str, ...] = ("wide", "narrow", "rows")

# narrow
LENGTHS = "lengths"  # tokens in each row, special tokens included
SEGMENT_STARTS = "segment_starts"  # column of each row's first second-segment token
# rows
DOC_ROWS = "doc_rows"  # store rows of the documents, one per output row
DOC_LENGTHS = "doc_lengths"  # document tokens kept in each row (after the length budget)
QUERY_IDS = "query_ids"  # [groups, longest query] narrow ids, padded
QUERY_LENGTHS = "query_lengths"  # query tokens of each group
SPECIAL = "special"  # (cls, sep, pad) ids
WIDTH = "width"  # the padded row length
STORE = "store_content"  # a rows batch's store's content id: its rows mean rows of that store


def layout(batch: Mapping[str, Any]) -> str:
    """Which of :data:`LAYOUTS` ``batch`` is in."""
    if DOC_ROWS in batch:
        return "rows"
    if LENGTHS in batch and "attention_mask" not in batch:
        return "narrow"
    return "wide"


def masks(
    width: int,
    lengths: torch.Tensor | npt.NDArray[np.int64],
    starts: torch.Tensor | npt.NDArray[np.int64],
) -> tuple[torch.Tensor, torch.Tensor]:
    """(attention mask, token types) of rows of ``lengths`` whose second segment starts at
    ``starts``, both int64 ``[rows, width]``: on the lengths' device for tensors (widened
    there), built in numpy for host arrays (the collator's: torch spreads these small
    operations over its threads, which cost 17x a batch on a loaded 2-core machine,
    benchmarks/REFACTOR.md)."""
    if isinstance(lengths, np.ndarray):
        cols = np.arange(width)
        attention = cols < lengths[:, None]
        token_type = (cols >= np.asarray(starts)[:, None]) & attention
        return (
            torch.from_numpy(attention.astype(np.int64)),
            torch.from_numpy(token_type.astype(np.int64)),
        )
    assert isinstance(starts, torch.Tensor)
    positions = torch.arange(width, device=lengths.device)
    on_device = positions < lengths[:, None]
    types = (positions >= starts[:, None]) & on_device
    return on_device.to(torch.int64), types.to(torch.int64)


def expand(batch: Mapping[str, Any], device: torch.device | str) -> dict[str, Any]:
    """``batch`` on ``device`` with the model's int64 inputs, built there from a narrow batch's
    ids, lengths and segment starts. A wide batch is only moved; a rows batch needs
    :func:`assemble` (or :func:`model_inputs` with the resident tokens)."""
    out = to(batch, usable_device(device))
    if layout(out) == "rows":
        raise ValueError(
            "a rows batch (CrossEncoderCollator(emit='rows')) is built from the store's tokens "
            "on the device: use lading.ir.layouts.assemble(batch, lading.device.to_device(store))"
        )
    if layout(out) == "wide":
        return out
    ids = widen(out["input_ids"])
    lengths = out.pop(LENGTHS).to(torch.int64)
    starts = out.pop(SEGMENT_STARTS).to(torch.int64)
    attention, token_type = masks(ids.shape[1], lengths, starts)
    out.update(input_ids=ids, attention_mask=attention, token_type_ids=token_type)
    return out


def assemble(batch: Mapping[str, Any], resident: ResidentTokens) -> dict[str, Any]:
    """The model inputs of a rows batch built on the resident tokens' device, equal to the
    collator's wide batch. The batch's other entries are moved there as they are.

    Raises:
        ValueError: ``resident`` holds the tokens of another store than the batch's (both
            content ids known): its rows would gather other documents.
    """
    device = resident.device
    out = to(batch, device)
    made_of, held = out.pop(STORE, None), resident.content
    if made_of is not None and held is not None and made_of != held:
        raise ValueError(
            f"a rows batch of the store whose content is {made_of[:12]}…, and resident tokens "
            f"of {held[:12]}…: its rows are another store's rows (the wrong documents, or "
            "rows past the end); pass lading.device.to_device(the collator's store)"
        )
    rows = out.pop(DOC_ROWS).to(torch.int64)
    d_len = out.pop(DOC_LENGTHS).to(torch.int64)
    query = widen(out.pop(QUERY_IDS))
    groups = query.shape[0]
    cls_id, sep_id, pad_id = out.pop(SPECIAL)
    per_group = len(rows) // max(1, groups)
    q_len = out.pop(QUERY_LENGTHS).to(torch.int64).repeat_interleave(per_group)
    query = query.repeat_interleave(per_group, dim=0)
    lengths = q_len + d_len + 3
    width = int(out.pop(WIDTH))
    cols = torch.arange(width, device=device)[None, :]
    q, d, end = q_len[:, None], d_len[:, None], lengths[:, None]
    ids = torch.full((len(rows), width), pad_id, dtype=torch.int64, device=device)
    if query.shape[1]:
        q_part = query.gather(1, (cols - 1).clamp(0, query.shape[1] - 1).expand(len(rows), -1))
        ids = torch.where((cols >= 1) & (cols <= q), q_part, ids)
    starts = resident.offsets[rows][:, None]
    d_part = resident.take(starts + cols - q - 2)
    ids = torch.where((cols >= q + 2) & (cols < q + 2 + d), d_part, ids)
    ids = torch.where(cols == 0, cls_id, ids)
    ids = torch.where((cols == q + 1) | (cols == end - 1), sep_id, ids)
    attention, token_type = masks(width, lengths, q_len + 2)
    out.update(input_ids=ids, attention_mask=attention, token_type_ids=token_type)
    return out


def model_inputs(
    batch: Mapping[str, Any], device: torch.device | str, resident: ResidentTokens | None = None
) -> dict[str, Any]:
    """``batch``, in any layout, on ``device`` with the model's int64 inputs.

    Raises:
        ValueError: a rows batch without ``resident`` (the store's tokens on the device).
    """
    if layout(batch) != "rows":
        return expand(batch, device)
    if resident is None:
        raise ValueError(
            "a rows batch (CrossEncoderCollator(emit='rows')) needs the store's tokens on the "
            "device: pass resident=lading.device.to_device(store, device)"
        )
    return assemble(batch, resident)
