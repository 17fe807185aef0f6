"""CrossEncoder: a transformer backbone with dropout and a linear layer over the [CLS] token.

The study's model. Losses: pointwise binary cross-entropy on each (query, document) row, or
listwise cross-entropy over each group (relevant document first).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

MODEL_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
LOSSES: tuple[str, ...] = ("bce", "listwise")


def _transformers() -> Any:
    try:
        import transformers
    except ImportError:
        raise ImportError(
            "CrossEncoder needs transformers. To install:\n  pip install 'lading[hf]'"
        ) from None
    return transformers


def tiny_bert_config(vocab_size: int, max_position: int = 512) -> Any:
    """A 2-layer, 64-wide BERT: trains on a CPU in seconds, for tests and offline demos."""
    return _transformers().BertConfig(
        vocab_size=vocab_size,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        max_position_embeddings=max_position,
        type_vocab_size=2,
    )


def _backbone(make: Any, source: Any) -> nn.Module:
    """A backbone without BERT's pooler where the architecture has one: the [CLS] vector is read
    from the last hidden state, and a pooler nobody uses would make DDP wait for its gradients."""
    try:
        return make(source, add_pooling_layer=False)
    except TypeError:  # architectures without a pooler do not take the argument
        return make(source)


class CrossEncoder(nn.Module):
    """Scores (query, document) rows: ``logits = W · dropout(h_[CLS]) + b``.

    Args:
        backbone: any HF ``AutoModel``-like module returning ``last_hidden_state``.
        dropout: dropout on the [CLS] vector.
    """

    def __init__(self, backbone: nn.Module, dropout: float = 0.1) -> None:
        super().__init__()
        self.backbone = backbone
        self.dropout = nn.Dropout(dropout)
        config: Any = backbone.config  # HF models carry their configuration
        hidden = int(config.hidden_size)
        self.classifier = nn.Linear(hidden, 1)

    @classmethod
    def from_config(cls, config: Any, dropout: float = 0.1) -> CrossEncoder:
        """A randomly initialised model of this backbone configuration."""
        return cls(_backbone(_transformers().AutoModel.from_config, config), dropout)

    @classmethod
    def from_pretrained(
        cls, name_or_path: str | os.PathLike[str], dropout: float = 0.1
    ) -> CrossEncoder:
        """A model saved by :meth:`save`, or a HF backbone (local path, or a name when online)
        under a new classifier head, drawn from torch's global RNG as ``nn.Linear`` draws: call
        ``torch.manual_seed`` first for the same head in every run and rank (as ``lading train
        cross-encoder --seed`` does, and the HF Trainer before ``model_init``)."""
        path = Path(name_or_path)
        if (path / MODEL_FILE).is_file() and (path / "lading.json").is_file():
            meta = json.loads((path / "lading.json").read_text())
            config = _transformers().AutoConfig.from_pretrained(path)
            model = cls.from_config(config, meta.get("dropout", dropout))
            from safetensors.torch import load_file

            model.load_state_dict(load_file(str(path / MODEL_FILE)))
            return model
        return cls(_backbone(_transformers().AutoModel.from_pretrained, name_or_path), dropout)

    def save(
        self, directory: str | os.PathLike[str], inputs: Mapping[str, int | bool] | None = None
    ) -> None:
        """Write ``config.json``, ``model.safetensors`` and ``lading.json`` (no pickle), which
        keeps ``inputs``: how the training cut its rows (``max_length``,
        ``max_query_length``) and whether it read the store's token ids or tokenized its
        text (``use_tokens``), what reranking with it does by default
        (:func:`trained_inputs`)."""
        from safetensors.torch import save_file

        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        config: Any = self.backbone.config
        config.save_pretrained(out)
        state = {k: v.detach().contiguous().cpu() for k, v in self.state_dict().items()}
        save_file(state, str(out / MODEL_FILE))
        (out / "lading.json").write_text(
            json.dumps({"kind": "cross-encoder", "dropout": self.dropout.p, **(inputs or {})})
        )

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """One logit per row."""
        out = self.backbone(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        )
        cls_vector = out.last_hidden_state[:, 0, :]
        return self.classifier(self.dropout(cls_vector)).view(-1)


def ranking_loss(
    logits: torch.Tensor, labels: torch.Tensor, group_size: int, kind: str = "bce"
) -> torch.Tensor:
    """``"bce"``: pointwise BCE with the labels; ``"listwise"``: CE over each group (target 0)."""
    if kind == "bce":
        return nn.functional.binary_cross_entropy_with_logits(logits, labels)
    if kind == "listwise":
        grouped = logits.view(-1, group_size)
        target = torch.zeros(grouped.shape[0], dtype=torch.long, device=logits.device)
        return nn.functional.cross_entropy(grouped, target)
    raise ValueError(f"unknown loss {kind!r}; choose from {sorted(LOSSES)}")


def check_positions(model: CrossEncoder, max_length: int, name: str | None = None) -> None:
    """Refuse ``max_length`` past the positions ``model`` has (a model of 128 positions given
    the default 512 failed deep in its embeddings on the first long pair), naming both;
    ``name`` is the model's (default: its config's ``name_or_path``). Models whose config
    does not say how many positions they have are taken as they are."""
    config = getattr(model.backbone, "config", None)
    positions = getattr(config, "max_position_embeddings", None)
    if not isinstance(positions, int):
        return
    if getattr(config, "model_type", "") in ("roberta", "xlm-roberta", "camembert"):
        positions -= 2  # (their position ids start after the padding index)
    if max_length > positions:
        name = name or getattr(config, "name_or_path", "") or "given"
        raise ValueError(
            f"max_length={max_length} is longer than the {positions} positions of model "
            f"{name}: pass max_length={positions} (or less)"
        )


def trained_inputs(path: str | os.PathLike[str]) -> dict[str, int | bool]:
    """The ``max_length`` and ``max_query_length`` a model saved by :meth:`CrossEncoder.save`
    was trained with, and ``use_tokens`` (True: it read the store's token ids; False: it
    tokenized the documents' text), those its ``lading.json`` keeps (none for another
    model folder)."""
    meta_path = Path(path) / "lading.json"
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(meta, dict):
        return {}
    lengths = ("max_length", "max_query_length")
    kept: dict[str, int | bool] = {
        k: int(meta[k])
        for k in lengths
        if isinstance(meta.get(k), int) and not isinstance(meta[k], bool)
    }
    if isinstance(meta.get("use_tokens"), bool):
        kept["use_tokens"] = meta["use_tokens"]
    return kept
