"""A source that changes while a build reads it fails the build, naming the file; nothing is
committed. Its identity (device, inode, size, mtime, head/tail hash) is taken from the opened
descriptor before reading and compared after. On the version 1 format the fingerprint was
taken after the rows streamed: the store held the old texts under the new file's identity,
``stale`` was None, and the next build reused it."""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import lading
from conftest import word_tokenizer, write
from lading.errors import SourceError, StoreFormatError


def _texts(letter: str, n: int = 300) -> str:
    return "".join(f"{letter.lower()}{i}\t{letter} text {i}\n" for i in range(n))


def _replace(path: Path, content: str) -> None:
    """Another file renamed over ``path`` (what a download or an ``mv`` does)."""
    fresh = path.with_name(path.name + ".new")
    fresh.write_text(content)
    os.replace(fresh, path)


def _after_reading(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, act: Any) -> None:
    """Run ``act()`` once the iterator ``owner.name`` is exhausted: between read and commit."""
    original = getattr(owner, name)

    def wrapped(*args: Any, **kwargs: Any) -> Iterator[Any]:
        yield from original(*args, **kwargs)
        act()

    monkeypatch.setattr(owner, name, wrapped)


def test_a_source_replaced_while_build_store_reads_it_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lading.sources import SourceReader

    src = write(tmp_path / "c.tsv", _texts("A"))
    dest = tmp_path / "store"
    _after_reading(monkeypatch, SourceReader, "iter_bulk", lambda: _replace(src, _texts("B")))
    with pytest.raises(SourceError, match=r"c\.tsv.*replaced by another file while it was read"):
        lading.build_store(src, dest, progress=False)
    monkeypatch.undo()
    with pytest.raises(StoreFormatError, match="not a lading store"):
        lading.open_store(dest)  # nothing was committed
    store = lading.build_store(src, dest, progress=False)  # the next build reads B, whole
    assert store["b7"] == "B text 7" and "a7" not in store and store.stale is None


def test_a_source_edited_in_place_while_read_fails_and_keeps_the_old_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fp = importlib.import_module("lading.sources.fingerprint")
    src = write(tmp_path / "c.tsv", _texts("A"))
    dest = tmp_path / "store"
    first = lading.build_store(src, dest, progress=False)
    write(src, _texts("B"))  # a new version: rebuilt, and edited once more while read

    def edit(before: Any) -> None:
        with open(src, "r+b") as f:
            f.seek(3)
            f.write(b"X")
        os.utime(src, ns=(0, before["mtime_ns"] + 10**9))

    monkeypatch.setattr(fp, "AFTER_READ", edit)
    with pytest.raises(SourceError, match=r"c\.tsv changed while it was read"):
        lading.build_store(src, dest, progress=False)
    assert lading.open_store(dest, on_stale="ignore").snapshot == first.snapshot


def test_offset_and_corpus_builds_check_their_source_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("tokenizers")
    from lading.lm import TokenCorpus

    fp = importlib.import_module("lading.sources.fingerprint")
    src = write(tmp_path / "c.tsv", _texts("A"))
    monkeypatch.setattr(fp, "AFTER_READ", lambda before: _replace(src, _texts("B")))
    with pytest.raises(SourceError, match="replaced by another file"):
        lading.OffsetStore.build(src, tmp_path / "offsets")
    text = write(tmp_path / "t.txt", "alpha beta\n\ngamma\n")
    tok = word_tokenizer(["alpha", "beta", "gamma"], tmp_path / "tok.json")
    monkeypatch.setattr(fp, "AFTER_READ", lambda before: _replace(text, "beta\n\nbeta\n"))
    with pytest.raises(SourceError, match=r"t\.txt was replaced by another file"):
        TokenCorpus.build(text, tmp_path / "corpus", tok, progress=False)
    monkeypatch.setattr(fp, "AFTER_READ", None)
    assert len(TokenCorpus.build(text, tmp_path / "corpus", tok, progress=False)) == 2


def test_a_recorded_source_this_system_cannot_look_at_is_not_a_change(tmp_path: Path) -> None:
    """A manifest is input and staleness advice: a recorded source path the file system
    refuses to look at (a name longer than it allows) leaves the corpus opening, not stale.
    It raised ``OSError: File name too long`` (found by the hostile-manifest fuzz)."""
    pytest.importorskip("tokenizers")
    import json

    from lading.lm import TokenCorpus

    text = write(tmp_path / "t.txt", "alpha beta\n\ngamma\n")
    tok = word_tokenizer(["alpha", "beta", "gamma"], tmp_path / "tok.json")
    TokenCorpus.build(text, tmp_path / "corpus", tok, progress=False)
    meta_path = tmp_path / "corpus" / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["recipe"]["source"] = "x" * 5000
    meta_path.write_text(json.dumps(meta))
    corpus = TokenCorpus.open(tmp_path / "corpus")
    assert corpus.stale is None and len(corpus) == 2


def test_token_corpus_open_reports_a_changed_source(tmp_path: Path) -> None:
    """RELIABILITY.md promises that every open compares its source; a corpus said nothing."""
    pytest.importorskip("tokenizers")
    from lading.errors import StaleStoreWarning
    from lading.lm import TokenCorpus

    text = write(tmp_path / "t.txt", "alpha beta\n\ngamma\n")
    tok = word_tokenizer(["alpha", "beta", "gamma"], tmp_path / "tok.json")
    TokenCorpus.build(text, tmp_path / "corpus", tok, progress=False)
    assert TokenCorpus.open(tmp_path / "corpus").stale is None
    write(text, "alpha beta\n\ngamma\n\nbeta\n")
    with pytest.warns(StaleStoreWarning, match=r"t\.txt is now \d+ bytes"):
        corpus = TokenCorpus.open(tmp_path / "corpus")
    assert corpus.stale is not None and len(corpus) == 2
    with pytest.raises(StoreFormatError, match="is stale"):
        TokenCorpus.open(tmp_path / "corpus", on_stale="raise")
    assert len(TokenCorpus.build(text, tmp_path / "corpus", tok, progress=False)) == 3
