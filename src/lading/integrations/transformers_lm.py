"""A lading LM batch as the keyword arguments a transformers causal LM expects, per attention.

:class:`~lading.lm.DocumentBatch` (``boundaries=True``) carries lading's own convention: labels
are the *next* token of each input (already shifted) with a ``loss_mask``, and documents are
kept apart by ``document_ids``. A transformers model (``LlamaForCausalLM`` and the like) expects
its own: ``labels`` aligned with ``input_ids`` (the model shifts them), ``-100`` where nothing
is scored, and a mask in the form its attention implementation reads. Getting either wrong is
silent: the model trains, on the wrong labels or across document boundaries. So
:func:`to_hf_kwargs` gives each implementation what it needs and refuses what would be wrong:

- ``labels``: what ``DataCollatorWithFlattening`` gives for the same documents: the input ids,
  ``-100`` at the first token of every document (nothing predicts it from another document)
  and on padding. The transition "end of one document -> start of the next" is thus never
  scored, as in transformers (lading's loader default, ``eod_mask_loss=True``, agrees). As in
  every transformers causal-LM batch, the last input of a row has no label.
- ``position_ids``: restarting at 0 at every document.
- the attention, per ``attn_implementation``:

  ``"sdpa"``: a ``[B, 1, L, L]`` bool mask (``True``: may attend), block-diagonal causal;
  ``"eager"``: the same as an additive float mask (0 or the dtype's minimum), since eager
  attention *adds* the mask to the scores (a bool mask there adds 1s and 0s: wrong logits);
  ``"flex_attention"``: a FlexAttention ``BlockMask`` of the same rule;
  ``"flash_attention_2"``/``"flash_attention_3"``: the batch flattened to one row with
  ``cu_seq_lens_q/k`` and ``max_length_q/k`` (flash-attention's varlen kwargs, as
  ``DataCollatorWithFlattening(return_flash_attn_kwargs=True)`` gives them).

- a model whose attention slides over a window (``config.sliding_window``: Mistral; with
  ``layer_types``, Gemma 2/3, GPT-OSS, some layers only) gets the window cut into the mask
  (``config=`` given), a ``{"full_attention": ..., "sliding_attention": ...}`` mapping where
  its layers differ, as transformers builds them: a 4D mask or ``BlockMask`` is used as
  given, so the block-diagonal one alone let every token attend to its whole document.
  Flash attention applies the window itself.
- ``use_cache=False``: a cache built from packed rows would let later tokens attend across
  documents; a ``use_cache=True`` request is refused.

What ``LadingTrainer`` hands a ``compute_loss`` is such keyword arguments as a
:class:`ModelInputs`, which remembers its DocumentBatch: a ``compute_loss`` written when the
trainer handed the DocumentBatch itself (``model(**to_hf_kwargs(inputs, attn))``,
``inputs.loss_mask``) works on it unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from lading.lm.boundaries import IGNORE_INDEX, DocumentBatch, document_mask_mod

IMPLEMENTATIONS = ("sdpa", "eager", "flex_attention", "flash_attention_2", "flash_attention_3")


def hf_labels(batch: DocumentBatch) -> torch.Tensor:
    """Labels aligned with ``input_ids`` (transformers shifts them): ``labels[t]`` is input
    ``t`` where the prediction of it from input ``t - 1`` is scored, else ``IGNORE_INDEX``."""
    labels = torch.full_like(batch.input_ids, IGNORE_INDEX)
    scored = batch.loss_mask[:, :-1].bool()
    labels[:, 1:] = torch.where(scored, batch.labels[:, :-1], labels[:, 1:])
    return labels


class ModelInputs(dict[str, Any]):
    """A transformers model's keyword arguments for a DocumentBatch (what :func:`to_hf_kwargs`
    gives), which remember the batch: both routes of a ``compute_loss`` read it.

    ``inputs["labels"]`` and the other keys are the model's arguments (``model(**inputs)``);
    ``inputs.labels``, ``inputs.loss_mask`` and the batch's other attributes are the
    DocumentBatch's, in lading's convention (labels already shifted), and
    ``to_hf_kwargs(inputs, attn)`` converts that batch (for any attention implementation).

    Attributes:
        document_batch: the batch the arguments were made from, on the same device.
    """

    def __init__(self, kwargs: Mapping[str, Any], document_batch: DocumentBatch) -> None:
        super().__init__(kwargs)
        self.document_batch = document_batch

    def __getattr__(self, name: str) -> Any:
        """The DocumentBatch's attribute (``input_ids``, ``loss_mask``, ``to``...)."""
        if name.startswith("__") or name == "document_batch":  # copying, unpickling
            raise AttributeError(name)
        return getattr(self.document_batch, name)


def to_hf_kwargs(
    batch: DocumentBatch | ModelInputs,
    attn_implementation: str,
    *,
    dtype: torch.dtype = torch.float32,
    use_cache: bool = False,
    config: Any = None,
) -> dict[str, Any]:
    """``model(**to_hf_kwargs(batch, model.config._attn_implementation, config=model.config))``:
    see the module doc.

    Args:
        batch: a :class:`~lading.lm.DocumentBatch` (a loader's with ``Packed(..., boundaries=
            True)`` or ``Windows(..., boundaries=True)``), on the model's device, or the
            :class:`ModelInputs` made from one (its batch is converted).
        attn_implementation: the model's (``model.config._attn_implementation``).
        dtype: the model's dtype, for the additive mask of ``"eager"``.
        use_cache: must stay False (refused otherwise: see the module doc).
        config: the model's config, where its attention slides over a window
            (``sliding_window``, ``layer_types``): the masks keep the window. None: every
            layer attends to the whole of each document (a model without a window).

    Raises:
        ValueError: an attention implementation this function does not know,
            ``use_cache=True``, a layer type of ``config`` it cannot mask, or a Bloom model
            (its ALiBi bias is built from a 2D padding mask).
    """
    if isinstance(batch, ModelInputs):
        batch = batch.document_batch
    if use_cache:
        raise ValueError(
            "to_hf_kwargs(use_cache=True): packed rows hold several documents, and a cache "
            "built from them lets later tokens attend across documents; train with "
            "use_cache=False (generate from one document at a time)"
        )
    kwargs: dict[str, Any] = {
        "input_ids": batch.input_ids,
        "labels": hf_labels(batch),
        "position_ids": batch.position_ids,
        "use_cache": False,
    }
    window, layers = _window(config)
    if attn_implementation in ("sdpa", "eager"):
        allowed = batch.attention_mask()

        def form(mask: torch.Tensor) -> torch.Tensor:
            if attn_implementation == "sdpa":
                return mask
            additive = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
            return additive.masked_fill(~mask, torch.finfo(dtype).min)

        slid: torch.Tensor | None = None
        if window is not None:
            at = torch.arange(allowed.shape[-1], device=allowed.device)
            slid = form(allowed & (at[None, :] > at[:, None] - window))
        kwargs["attention_mask"] = _per_layer(form(allowed), slid, layers)
    elif attn_implementation == "flex_attention":
        from torch.nn.attention.flex_attention import create_block_mask

        b, length = batch.document_ids.shape
        mask_mod = document_mask_mod(batch.document_ids)
        device = batch.document_ids.device
        whole = create_block_mask(mask_mod, b, None, length, length, device)
        banded = None
        if window is not None:
            reach = window

            def windowed(b: Any, h: Any, q: Any, kv: Any) -> Any:
                return mask_mod(b, h, q, kv) & (kv > q - reach)

            banded = create_block_mask(windowed, b, None, length, length, device)
        kwargs["attention_mask"] = _per_layer(whole, banded, layers)
    elif attn_implementation in ("flash_attention_2", "flash_attention_3"):
        kwargs = {key: value.reshape(1, -1) for key, value in kwargs.items() if key != "use_cache"}
        cu = batch.cu_seqlens.to(torch.int32)
        kwargs.update(
            use_cache=False,
            cu_seq_lens_q=cu,
            cu_seq_lens_k=cu,
            max_length_q=batch.max_seqlen,
            max_length_k=batch.max_seqlen,
        )
    else:
        raise ValueError(
            f"attn_implementation {attn_implementation!r}: to_hf_kwargs knows "
            f"{', '.join(IMPLEMENTATIONS)}; for another, build its mask from "
            "batch.document_ids (each document attends causally to itself only)"
        )
    return kwargs


_LAYER_TYPES = ("full_attention", "sliding_attention")


def _window(config: Any) -> tuple[int | None, tuple[str, ...]]:
    """The window ``config``'s attention slides over (None: none, or its layers never
    slide) and its ``layer_types`` (empty where every layer is alike).

    Raises:
        ValueError: a Bloom model, or a layer type other than full and sliding attention.
    """
    if config is None:
        return None, ()
    if getattr(config, "model_type", None) == "bloom":
        raise ValueError(
            "Bloom builds its ALiBi bias from a 2D padding mask, and a batch of several "
            "documents a row needs a 4D one: train Bloom on Windows(seq_len) batches without "
            "boundaries, or train a model of rotary or learned positions"
        )
    layers = tuple(getattr(config, "layer_types", None) or ())
    other = sorted(set(layers) - set(_LAYER_TYPES))
    if other:
        raise ValueError(
            f"layer_types {other} of {type(config).__name__}: to_hf_kwargs masks full and "
            "sliding attention only; build this model's masks from batch.document_ids"
        )
    window = getattr(config, "sliding_window", None)
    if window is None or getattr(config, "use_sliding_window", True) is False:
        return None, layers
    if layers and "sliding_attention" not in layers:
        return None, layers  # (Qwen2's window set, used by no layer)
    return int(window), layers


def _per_layer(full: Any, slid: Any, layers: tuple[str, ...]) -> Any:
    """The mask a model takes: ``full`` where no layer slides (``slid`` None), ``slid`` where
    every layer does (no ``layer_types``), else the mapping by layer type."""
    if slid is None:
        return full
    if not layers:
        return slid
    return {"full_attention": full, "sliding_attention": slid}


def model_inputs(batch: DocumentBatch, model: Any, device: torch.device | str) -> Any:
    """What the HF ``Trainer`` hands ``model`` for ``batch``: :func:`to_hf_kwargs` by the
    model's ``config._attn_implementation`` (on ``device``, where a FlexAttention mask must
    be made), as ``DataCollatorWithFlattening``'s batches reach a transformers model, as
    :class:`ModelInputs` (a ``compute_loss`` of the DocumentBatch still reads it); for a
    model without one (not a transformers model), the batch itself on ``device``, for a
    ``compute_loss`` that reads lading's convention (labels already shifted, ``loss_mask``)."""
    moved = batch.to(device)
    implementation = getattr(getattr(model, "config", None), "_attn_implementation", None)
    if implementation is None:
        return moved
    dtype = getattr(model, "dtype", torch.float32)
    kwargs = to_hf_kwargs(moved, str(implementation), dtype=dtype, config=model.config)
    return ModelInputs(kwargs, moved)
