"""Tokenizers for pre-tokenized stores: loading, fingerprinting, batched encoding, token dtype.

Documents are encoded without special tokens (no ``[CLS]``/``[SEP]``): whoever builds model
inputs adds them, so one store serves any pairing (cross-encoder, bi-encoder, LM).
"""

from __future__ import annotations

import hashlib
import itertools
import json
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


# Under max_length, a text longer than twice this many characters a kept token is encoded from
# a prefix cut at a space, kept where it gives PREFIX_MARGIN tokens past max_length (else the
# whole text is encoded): a 15 MB line cost 11.4 s and 1.24 GB to keep 512 tokens.
PREFIX_CHARS_A_TOKEN = 8
PREFIX_MARGIN = 32
# what may run before a space-splitting pre-tokenizer: each changes a character by what is
# next to it at most (Replace: a plain string with no space in it)
_LOCAL_NORMALIZERS = {"NFC", "NFD", "NFKC", "NFKD", "Lowercase", "StripAccents", "Strip"}
_LOCAL_NORMALIZERS |= {"BertNormalizer", "Prepend"}
# pre-tokenizers that end a pre-token at every space, and what may follow one in a Sequence
_SPLITS_AT_SPACES = {"Whitespace", "WhitespaceSplit", "BertPreTokenizer"}
_LOCAL_AFTER = {"Punctuation", "Digits", "ByteLevel", "Metaspace"}


def cuts_at_spaces(tok: Any) -> bool:
    """Whether ``tok``'s ids of a text's prefix cut before a space are the whole text's, but
    for the tokens of the prefix's last word: its normalizer changes characters one by one
    (no regex ``Replace``), its pre-tokenizer ends a pre-token at every space before
    anything else runs (``Whitespace``, ``BertPreTokenizer``, ``ByteLevel`` with its regex,
    ``Metaspace`` splitting), and its model is not BPE with dropout (random ids). Where it is
    not (a Unigram over ``Metaspace(split=False)`` segments a run by its whole length; a regex
    ``Replace`` or ``Split`` may match across the cut), every text is encoded whole."""
    try:
        config = json.loads(tok.to_str())
    except Exception:  # (not a tokenizers.Tokenizer: nothing known of it)
        return False
    model = config.get("model") or {}
    if model.get("type") == "BPE" and model.get("dropout"):
        return False
    return _local_normalizer(config.get("normalizer")) and _splits_first(
        config.get("pre_tokenizer")
    )


def _local_normalizer(node: Any) -> bool:
    if node is None:
        return True
    kind = node.get("type")
    if kind == "Sequence":
        return all(_local_normalizer(n) for n in node.get("normalizers", []))
    if kind == "Replace":
        pattern = node.get("pattern") or {}
        return isinstance(pattern.get("String"), str) and " " not in pattern["String"]
    return kind in _LOCAL_NORMALIZERS


def _splits_first(node: Any) -> bool:
    if node is None:
        return False
    kind = node.get("type")
    if kind == "Sequence":
        steps = node.get("pretokenizers", [])
        rest = all(step.get("type") in _LOCAL_AFTER for step in steps[1:])
        return bool(steps) and _splits_first(steps[0]) and rest
    if kind == "ByteLevel":
        return bool(node.get("use_regex", True))
    if kind == "Metaspace":
        return bool(node.get("split", True))
    return kind in _SPLITS_AT_SPACES


def encode_first(
    encode: Any, texts: list[str], max_length: int, prefixes: bool = True
) -> list[Any]:
    """``encode(texts, add_special_tokens=False)``, each encoding holding at least its text's
    first ``max_length`` tokens: with ``prefixes`` (:func:`cuts_at_spaces`), a text past twice
    ``PREFIX_CHARS_A_TOKEN * (max_length + PREFIX_MARGIN)`` characters is encoded from a
    prefix of about that many, cut before a space. Its first ``max_length`` tokens are the
    whole text's where it gives :data:`PREFIX_MARGIN` more (what the cut changes, the last
    word's tokens, lies past them); a prefix that gives fewer (digits, code: a few characters
    a token) and a text with no space where it would be cut are encoded whole, as every text
    is without ``prefixes``. A text's cost is then bounded by ``max_length``, not its length."""
    size = PREFIX_CHARS_A_TOKEN * (max_length + PREFIX_MARGIN)
    cut: dict[int, str] = {}
    for i, text in enumerate(texts if prefixes else ()):
        if len(text) > 2 * size:
            end = text.rfind(" ", size // 2, size)
            if end > 0:
                cut[i] = text[:end]
    if not cut:
        return list(encode(texts, add_special_tokens=False))
    out = list(encode([cut.get(i, t) for i, t in enumerate(texts)], add_special_tokens=False))
    short = [i for i in cut if len(out[i].ids) < max_length + PREFIX_MARGIN]
    if short:
        whole = encode([texts[i] for i in short], add_special_tokens=False)
        for i, encoding in zip(short, whole):
            out[i] = encoding
    return out


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
