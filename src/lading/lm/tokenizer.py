"""Training a tokenizer locally (the ``tokenizers`` library), so everything runs offline."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from lading.lm.texts import iter_texts

EOS = "<|endoftext|>"
KINDS: tuple[str, ...] = ("bpe", "wordpiece")


def train_tokenizer(
    source: str | os.PathLike[str],
    out: str | os.PathLike[str],
    vocab_size: int = 8000,
    kind: str = "bpe",
    split: str = "blank",
    limit: int | None = None,
) -> Path:
    """Train a byte-level BPE (GPT-2 style) or a WordPiece tokenizer on ``source``.

    Args:
        source: anything :func:`lading.lm.texts.iter_texts` reads.
        out: the ``tokenizer.json`` to write (a folder gets ``tokenizer.json`` inside).
        vocab_size: entries, special tokens included (≤ 65,536 keeps corpora in uint16).
        kind: ``"bpe"`` (byte-level, no unknown tokens) or ``"wordpiece"`` (BERT-style).
        split: how plain text divides into documents.
        limit: train on at most this many documents.
    """
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; choose from {sorted(KINDS)}")
    texts = iter_texts(source, split)
    if limit is not None:
        texts = (t for i, t in enumerate(texts) if i < limit)
    trainer: Any
    if kind == "bpe":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=[EOS],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        )
    else:
        tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tok.normalizer = normalizers.BertNormalizer(lowercase=True)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        trainer = trainers.WordPieceTrainer(
            vocab_size=vocab_size, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        )
    tok.train_from_iterator(texts, trainer)
    path = Path(out)
    if path.is_dir() or path.suffix != ".json":
        path = path / "tokenizer.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tok.save(str(path))
    return path
