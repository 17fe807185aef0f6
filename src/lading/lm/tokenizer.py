"""Training a language-model tokenizer locally from any corpus source, so all runs offline."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

from lading.lm.texts import iter_texts
from lading.tokens import save_tokenizer
from lading.tokens import train_tokenizer as train_on_texts


def train_tokenizer(
    source: str | os.PathLike[str],
    out: str | os.PathLike[str],
    vocab_size: int = 8000,
    kind: str = "bpe",
    split: str = "blank",
    limit: int | None = None,
) -> Path:
    """Train a tokenizer on the documents of ``source`` and write it to ``out``.

    Args:
        source: anything :func:`lading.lm.texts.iter_texts` reads.
        out: the ``tokenizer.json`` to write (a folder gets ``tokenizer.json`` inside).
        vocab_size: entries, special tokens included (≤ 65,536 keeps corpora in uint16).
        kind: ``"bpe"`` (byte-level, no unknown tokens) or ``"wordpiece"`` (BERT-style).
        split: how plain text divides into documents.
        limit: train on at most this many documents.
    """
    texts = iter_texts(source, split)
    if limit is not None:
        texts = itertools.islice(texts, limit)
    tok = train_on_texts(texts, kind, vocab_size)
    path = Path(out)
    if path.is_dir() or path.suffix != ".json":
        path = path / "tokenizer.json"
    return save_tokenizer(tok, path)
