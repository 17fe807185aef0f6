"""Next-item prediction on sessions: a small causal transformer, its metrics and a baseline.

The model reads a session's item ids (right-padded, with lengths) and predicts, at every
position, the next item; training uses every position, evaluation the last one: given all but
the last item of each session, where does the true last item rank among all items? Recall@20
counts it in the top 20, NDCG@20 discounts by its rank. The baseline always proposes the 20
items most frequent in the training sessions.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
import numpy.typing as npt
import torch
from torch import nn


class NextItemTransformer(nn.Module):
    """Item + position embeddings, a causal transformer encoder, tied output layer."""

    def __init__(
        self,
        num_items: int,
        dim: int = 64,
        layers: int = 2,
        heads: int = 2,
        max_len: int = 20,
        dropout: float = 0.1,
    ) -> None:
        super().__init__()
        self.items = nn.Embedding(num_items, dim, padding_idx=0)
        self.positions = nn.Embedding(max_len, dim)
        block = nn.TransformerEncoderLayer(
            dim, heads, 4 * dim, dropout, batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.max_len = max_len
        # small, as GPT-2 and BERT start theirs: the item table is also the output layer, and
        # at nn.Embedding's N(0, 1) the first logits had a std of ~sqrt(dim) (a loss far above
        # uniform guessing's; an epoch of YOOCHOOSE ended at the most-popular baseline)
        for table in (self.items, self.positions):
            nn.init.normal_(table.weight, std=0.02)
        with torch.no_grad():
            self.items.weight[0].zero_()  # the padding item

    def forward(self, items: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Hidden states ``[batch, seq, dim]``; :meth:`scores` turns them into item logits."""
        seq = items.shape[1]
        positions = torch.arange(seq, device=items.device)
        hidden = self.items(items) + self.positions(positions)[None]
        causal = torch.triu(torch.ones(seq, seq, dtype=torch.bool, device=items.device), 1)
        padding = positions[None] >= lengths[:, None]
        return self.norm(self.encoder(hidden, mask=causal, src_key_padding_mask=padding))

    def scores(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits over all items (the output layer is the item embedding, tied)."""
        return hidden @ self.items.weight.T


def next_item_loss(
    model: NextItemTransformer,
    hidden: torch.Tensor,
    items: torch.Tensor,
    lengths: torch.Tensor,
    positions: int | None = None,
) -> torch.Tensor:
    """Cross-entropy of predicting ``items[:, t+1]`` at real positions ``t``.

    Projecting onto 50k items is the step's main cost, so only real positions are projected,
    and with ``positions`` only that many random real positions per session (every position
    with ``None``).
    """
    targets = items[:, 1:]
    valid = torch.arange(targets.shape[1], device=items.device)[None] < (lengths - 1)[:, None]
    if positions is not None:
        noise = torch.rand(valid.shape, device=items.device).masked_fill(~valid, 2.0)
        keep = noise.argsort(dim=1)[:, :positions]
        chosen = torch.zeros_like(valid)
        chosen.scatter_(1, keep, True)
        valid &= chosen
    return nn.functional.cross_entropy(model.scores(hidden[:, :-1][valid]), targets[valid])


def last_item_ranks(
    model: NextItemTransformer, items: torch.Tensor, lengths: torch.Tensor
) -> torch.Tensor:
    """1-based rank of each session's last item given the items before it, among the items
    proposed (every id but the padding, 0).

    Ties count against the model: the rank is the number of items scored above the target or
    tied with it, the target included, so a model scoring every item alike ranks each target
    last, not first. An item scored NaN counts as above the target, and a target scored NaN
    or infinite ranks last: a diverged model's NaN compares False with everything, and
    ranked every target first (Recall@20 = NDCG@20 = 1.0). Scores without ties rank as the
    items scored strictly higher, plus one.
    """
    prefix_len = lengths - 1
    hidden = model(items, prefix_len.clamp(min=1))
    rows = torch.arange(items.shape[0], device=items.device)
    scores = model.scores(hidden[rows, (prefix_len - 1).clamp(min=0)])
    target = items[rows, prefix_len]
    target_score = scores[rows, target]
    ahead = (scores >= target_score[:, None]) | scores.isnan()
    ahead[:, 0] = False  # the padding item is never proposed
    last = scores.shape[1] - 1
    return torch.where(target_score.isfinite(), ahead.sum(dim=1), last)


def metrics(ranks: npt.NDArray[np.int64], k: int = 20) -> dict[str, float]:
    """Recall@k and NDCG@k of 1-based ranks (one relevant item per session)."""
    if len(ranks) == 0:
        return {f"recall@{k}": math.nan, f"ndcg@{k}": math.nan, "sessions": 0}
    hit = ranks <= k
    ndcg = np.where(hit, 1.0 / np.log2(ranks + 1.0), 0.0)
    return {
        f"recall@{k}": float(hit.mean()),
        f"ndcg@{k}": float(ndcg.mean()),
        "sessions": len(ranks),
    }


def popularity_ranks(
    train_items: Iterable[npt.NDArray[np.int64]], eval_last: npt.NDArray[np.int64], num_items: int
) -> npt.NDArray[np.int64]:
    """Ranks of the evaluation sessions' last items under the most-popular-items baseline."""
    counts = np.zeros(num_items, dtype=np.int64)
    for chunk in train_items:
        counts += np.bincount(chunk[chunk > 0], minlength=num_items)[:num_items]
    counts[0] = -1  # padding is never proposed
    order = np.argsort(-counts, kind="stable")
    rank_of = np.empty(num_items, dtype=np.int64)
    rank_of[order] = np.arange(1, num_items + 1)
    return rank_of[eval_last]
