"""A source edited in place, with its size kept, is seen: stores, token corpora, loader states.

The repro of the independent test: 20,000 lines ``i<TAB>document number i``, built, then 8
bytes of line 10,000 overwritten in place. The size and the first and last 64 KiB are as
before; only the modification time says the file changed.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import lading


def edited_in_place(path: Path) -> None:
    """Overwrite 8 bytes of line 10,000's text, keeping the size (mtime moves on)."""
    data = path.read_bytes()
    at = data.index(b"10000\tdocument number 10000") + len(b"10000\t")
    stat = path.stat()
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(b"EDITED!!")
    # a filesystem with coarse timestamps may keep the old mtime within the same tick
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "docs.tsv"
    path.write_text("".join(f"{i}\tdocument number {i}\n" for i in range(20_000)))
    return path


def test_same_size_edit_makes_the_store_stale_and_rebuilt(source: Path, tmp_path: Path) -> None:
    lading.build_store(source, tmp_path / "s")
    edited_in_place(source)
    with pytest.warns(lading.StaleStoreWarning, match="modified"):
        store = lading.open_store(tmp_path / "s")
    assert store.stale is not None and "docs.tsv" in store.stale
    rebuilt = lading.build_store(source, tmp_path / "s")
    assert rebuilt["10000"] == "EDITED!! number 10000"
    assert rebuilt.stale is None


def test_same_size_edit_makes_the_offset_store_refuse(source: Path, tmp_path: Path) -> None:
    lading.OffsetStore.build(source, tmp_path / "o")
    edited_in_place(source)
    with pytest.raises(lading.StoreFormatError, match="stale"):
        lading.OffsetStore(tmp_path / "o")["1"]


def test_token_corpus_is_rebuilt_after_its_source_changed(source: Path, tmp_path: Path) -> None:
    from conftest import word_tokenizer
    from lading.lm import TokenCorpus

    words = ["document", "number", "EDITED!!", *(str(i) for i in range(20_000))]
    tok = word_tokenizer(words, tmp_path / "t.json")
    first = TokenCorpus.build(source, tmp_path / "c", tok, split="line")
    before = first.document(10_000).tolist()
    edited_in_place(source)
    again = TokenCorpus.build(source, tmp_path / "c", tok, split="line")
    assert again.document(10_000).tolist() != before  # tokenized again, not reused
    # unchanged: reused (the same files, not a new build)
    built_at = (tmp_path / "c" / "meta.json").stat().st_mtime_ns
    TokenCorpus.build(source, tmp_path / "c", tok, split="line")
    assert (tmp_path / "c" / "meta.json").stat().st_mtime_ns == built_at
