"""Tokenizers for pre-tokenized stores: loading, fingerprinting, batched encoding, token dtype.

Documents are encoded without special tokens (no ``[CLS]``/``[SEP]``): whoever builds model
inputs adds them, so one store serves any pairing (cross-encoder, bi-encoder, LM).
"""

from __future__ import annotations

import hashlib
import itertools
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from lading.disk import native

UINT16_VOCAB = 1 << 16  # ids 0..65535 fit uint16: 2 bytes a token instead of 4
EOS = "<|endoftext|>"
TRAINABLE: tuple[str, ...] = ("bpe", "wordpiece")
BERT_SPECIAL: tuple[str, ...] = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def _import_tokenizers() -> Any:
    try:
        import tokenizers
    except ImportError:
        raise ImportError(
            "pre-tokenizing needs the tokenizers package. To install:\n  pip install 'lading[hf]'"
        ) from None
    return tokenizers


def load_tokenizer(spec: Any) -> Any:
    """A ``tokenizers.Tokenizer`` from a Tokenizer, a HF fast tokenizer, a tokenizer.json path
    or a local HF model directory holding ``tokenizer.json``.

    The result is a private copy with padding and truncation switched off, so encoding a batch
    never pads documents to each other's length. One read from a file is private already; a
    caller's object is copied (through its JSON: ~40 ms for a vocabulary of 8,000, paid once
    a shard before), never changed.
    """
    tokenizers = _import_tokenizers()
    if isinstance(spec, (str, os.PathLike)):
        tok = _read_tokenizer(tokenizers, Path(spec))
    elif isinstance(spec, tokenizers.Tokenizer):
        tok = tokenizers.Tokenizer.from_str(spec.to_str())
    elif hasattr(spec, "backend_tokenizer"):
        tok = tokenizers.Tokenizer.from_str(spec.backend_tokenizer.to_str())
    else:
        raise TypeError(
            f"cannot make a tokenizer from {type(spec).__name__}; pass a path or Tokenizer"
        )
    tok.no_padding()
    tok.no_truncation()
    return tok


def tokenizer_from_json(text: str) -> Any:
    """A private ``tokenizers.Tokenizer`` from a tokenizer.json's text, padding and truncation
    off as :func:`load_tokenizer` leaves them: what a remote reader read at its open (its staged
    copy of the file may be evicted while it is open)."""
    tok = _import_tokenizers().Tokenizer.from_str(text)
    tok.no_padding()
    tok.no_truncation()
    return tok


def _read_tokenizer(tokenizers: Any, path: Path) -> Any:
    """The tokenizer saved at ``path`` (a tokenizer.json, or a folder holding one)."""
    if path.is_dir():
        path = path / "tokenizer.json"
    if not path.is_file():
        raise FileNotFoundError(
            f"no tokenizer at {path}: pass a tokenizer.json file or a folder that holds one "
            "(save one with tokenizer.save_pretrained(DIR) or Tokenizer.save(PATH))"
        )
    try:
        return tokenizers.Tokenizer.from_file(str(path))
    except Exception as e:  # tokenizers raises a bare Exception with a serde message
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ValueError(
            f"{path} is not a tokenizer ({reason}): pass a tokenizer.json written by "
            "Tokenizer.save(PATH) or tokenizer.save_pretrained(DIR), or that folder"
        ) from None


def describe_tokenizer(tok: Any) -> dict[str, Any]:
    """What a store records of its tokenizer: its vocabulary size, the number of ids it may
    give (its largest id + 1, or its entry count where that is more: a vocabulary with gaps,
    ``{"[UNK]": 0, "hello": 1, "world": 70000}``, gives ids up to 70,000 from 3 entries), which
    sizes the token dtype and an embedding; and a hash of its definition (its identity)."""
    definition = tok.to_str().encode("utf-8")
    return {
        "vocab_size": id_count(tok),
        "sha256": hashlib.sha256(definition).hexdigest(),
    }


def id_count(tok: Any) -> int:
    """How many ids ``tok`` may give: its largest id + 1 (added tokens included), at least its
    entry count (``get_vocab_size``, the count, is less than the largest id + 1 where the ids
    have gaps; sized by the count, a store's uint16 tokens would not hold an id past 65,535)."""
    count = int(tok.get_vocab_size(with_added_tokens=True))
    ids = tok.get_vocab(with_added_tokens=True).values()
    return max(count, max(ids, default=-1) + 1)


def token_dtype(vocab_size: int) -> np.dtype[Any]:
    """uint16 when every id fits (``vocab_size``, the ids a tokenizer may give, at most 65,536,
    e.g. BERT's 30,522: :func:`describe_tokenizer`), else uint32."""
    return np.dtype("<u2") if vocab_size <= UINT16_VOCAB else np.dtype("<u4")


def flat_ids(
    ids: list[list[int]], dtype: np.dtype[Any], eos: int | None
) -> tuple[bytes, npt.NDArray[np.int64]]:
    """The id lists back to back in ``dtype`` (each followed by ``eos`` where given), and each
    one's length in ids: what a token corpus's and a tokenized store's builds write of a batch
    of encodings. By the C helper where built (~4 ns a token), else ``np.fromiter`` over
    ``itertools.chain`` (~40 ns a token, the fastest of the numpy ways measured: 2 % of a BPE
    build's CPU, benchmarks/bench_shard_tokenize.py)."""
    c = native.NATIVE
    if c is not None:
        data, lengths = c.flat_ids(ids, dtype.itemsize, -1 if eos is None else eos)
        return data, np.frombuffer(lengths, np.int64)
    if eos is not None:
        ids = [[*one, eos] for one in ids]
    counts = np.fromiter(map(len, ids), np.int64, len(ids))
    # chain walks the lists in C: no Python frame a token (a generator took ~10 % of CPU)
    flat = np.fromiter(itertools.chain.from_iterable(ids), dtype, int(counts.sum()))
    return flat.tobytes(), counts


def train_tokenizer(texts: Iterable[str], kind: str = "wordpiece", vocab_size: int = 8000) -> Any:
    """Train a tokenizer here, offline, on ``texts``.

    ``"wordpiece"``: BERT-style (lower-cased, ``[CLS] a [SEP] b [SEP]`` pair template, the
    special tokens ``[PAD] [UNK] [CLS] [SEP] [MASK]``), for cross-encoders. ``"bpe"``: GPT-2
    style byte-level BPE with an ``<|endoftext|>`` token, for language models.
    """
    tokenizers = _import_tokenizers()
    from tokenizers import decoders, models, normalizers, pre_tokenizers, processors, trainers

    if kind not in TRAINABLE:
        raise ValueError(f"unknown kind {kind!r}; choose from {sorted(TRAINABLE)}")
    trainer: Any
    if kind == "bpe":
        tok = tokenizers.Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=[EOS],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,  # (a blank line on stdout when it is no terminal)
        )
        tok.train_from_iterator(texts, trainer)
        return tok
    tok = tokenizers.Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size, special_tokens=list(BERT_SPECIAL), show_progress=False
    )
    tok.train_from_iterator(texts, trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", tok.token_to_id("[CLS]")), ("[SEP]", tok.token_to_id("[SEP]"))],
    )
    return tok


def save_tokenizer(tok: Any, path: str | os.PathLike[str]) -> Path:
    """Write ``tok`` to ``path`` atomically (a concurrent reader never sees half a file)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + f".tmp-{os.getpid()}")
    tok.save(str(tmp))
    tmp.replace(target)
    return target
