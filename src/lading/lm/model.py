"""A small LSTM language model whose hidden state carries across batches (BPTT)."""

from __future__ import annotations

import torch
from torch import nn

State = tuple[torch.Tensor, torch.Tensor]


class LSTMLanguageModel(nn.Module):
    """Embedding → LSTM → linear decoder (weights tied to the embedding when sizes match).

    ``forward(x, state)`` returns logits ``[batch, seq, vocab]`` and the new state; pass the
    state (detached) with the next batch so row r keeps reading its own stream.
    """

    def __init__(
        self,
        vocab_size: int,
        emb: int = 256,
        hidden: int = 256,
        layers: int = 2,
        dropout: float = 0.2,
    ) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, emb)
        self.lstm = nn.LSTM(
            emb, hidden, layers, batch_first=True, dropout=dropout if layers > 1 else 0.0
        )
        self.drop = nn.Dropout(dropout)
        self.project = nn.Linear(hidden, emb) if hidden != emb else nn.Identity()
        self.decoder = nn.Linear(emb, vocab_size)
        self.decoder.weight = self.embedding.weight  # tied: fewer parameters, better ppl
        self.layers, self.hidden = layers, hidden

    def init_state(self, batch: int, device: torch.device | str = "cpu") -> State:
        """Zeros: the state at the start of an epoch."""
        zeros = torch.zeros(self.layers, batch, self.hidden, device=device)
        return zeros, zeros.clone()

    def forward(self, x: torch.Tensor, state: State | None = None) -> tuple[torch.Tensor, State]:
        out, new_state = self.lstm(self.drop(self.embedding(x)), state)
        return self.decoder(self.project(self.drop(out))), new_state


def detach(state: State) -> State:
    """Keep the values, cut the graph: gradients stop at the batch boundary (truncated BPTT)."""
    return state[0].detach(), state[1].detach()
