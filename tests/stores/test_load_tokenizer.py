"""load_tokenizer: a private tokenizer, padding and truncation off, whatever it is given."""

from __future__ import annotations

from pathlib import Path

import pytest

from lading.stores.tokens import load_tokenizer, save_tokenizer, train_tokenizer

TEXTS = ["a short one", "a much longer document than the short one, with more words in it"]


def _padded(tmp_path: Path) -> tuple[object, Path]:
    tok = train_tokenizer(iter(TEXTS * 20), "bpe", 300)
    tok.enable_padding(length=64)
    tok.enable_truncation(max_length=3)
    return tok, save_tokenizer(tok, tmp_path / "tokenizer.json")


@pytest.mark.parametrize("given", ["file", "folder", "object"])
def test_padding_and_truncation_are_off_and_the_callers_object_unchanged(
    tmp_path: Path, given: str
) -> None:
    tok, path = _padded(tmp_path)
    spec = {"file": path, "folder": tmp_path, "object": tok}[given]
    loaded = load_tokenizer(spec)
    lengths = [len(e.ids) for e in loaded.encode_batch(TEXTS, add_special_tokens=False)]
    assert lengths[0] < lengths[1] and lengths[1] > 3, lengths  # neither padded nor cut
    assert loaded is not tok
    # the caller's own object still pads and cuts as it was set to
    assert [len(e.ids) for e in tok.encode_batch(TEXTS)] == [64, 64]  # type: ignore[attr-defined]
    assert tok.padding is not None and tok.truncation is not None  # type: ignore[attr-defined]


def test_two_loads_of_one_file_are_two_objects(tmp_path: Path) -> None:
    _, path = _padded(tmp_path)
    a, b = load_tokenizer(path), load_tokenizer(path)
    a.enable_padding(length=50)
    assert b.padding is None
