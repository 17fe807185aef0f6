"""A tiny causal transformer (GPT) whose attention can stop at document boundaries.

Pre-norm blocks, learned position embeddings indexed by ``position_ids`` (so positions that
restart at each document mean something), attention through
:func:`torch.nn.functional.scaled_dot_product_attention`: plain causal, or with the
block-diagonal document mask of :func:`lading.lm.boundaries.attention_mask`.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional


class _Block(nn.Module):
    def __init__(self, dim: int, heads: int, dropout: float) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"model width {dim} is not a multiple of {heads} heads")
        self.heads, self.dropout = heads, dropout
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.out = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        b, length, dim = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, length, 3, self.heads, -1).unbind(2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B, heads, L, head_dim]
        p = self.dropout if self.training else 0.0
        if mask is None:
            att = functional.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        else:
            att = functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
        x = x + self.drop(self.out(att.transpose(1, 2).reshape(b, length, dim)))
        return x + self.drop(self.mlp(self.norm2(x)))


class GPTLanguageModel(nn.Module):
    """Token + position embeddings, ``layers`` transformer blocks, a tied decoder.

    ``forward(input_ids, position_ids=None, attn_mask=None)`` returns logits ``[B, L, vocab]``;
    ``attn_mask`` is a bool ``[B, 1, L, L]`` mask (``True``: may attend) that must already be
    causal; ``None`` means plain causal attention over the whole window.
    """

    def __init__(
        self,
        vocab_size: int,
        dim: int = 128,
        layers: int = 2,
        heads: int = 4,
        max_len: int = 512,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, dim)
        self.position = nn.Embedding(max_len, dim)
        self.blocks = nn.ModuleList(_Block(dim, heads, dropout) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.decoder = nn.Linear(dim, vocab_size, bias=False)
        self.decoder.weight = self.embedding.weight
        self.max_len = max_len
        for module in self.modules():  # GPT-2's small init: logits start near uniform
            if isinstance(module, nn.Linear | nn.Embedding):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

    def forward(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if position_ids is None:
            position_ids = torch.arange(input_ids.shape[1], device=input_ids.device)[None]
        x = self.embedding(input_ids) + self.position(position_ids)
        for block in self.blocks:
            x = block(x, attn_mask)
        return self.decoder(self.norm(x))
