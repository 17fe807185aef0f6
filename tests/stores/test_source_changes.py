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


def _corpus(folder: Path, names: tuple[str, ...]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        write(folder / name, f"{Path(name).stem}\tdocument {name}\n")
    return folder


@pytest.mark.parametrize("given", ["folder", "glob"])
@pytest.mark.parametrize("first", [("1.tsv",), ("1.tsv", "2.tsv")], ids=["one-file", "two-files"])
def test_a_file_added_to_a_source_folder_or_glob_makes_the_store_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: str, first: tuple[str, ...]
) -> None:
    """A store built from a folder (or a glob) was never stale when a file was added to it:
    only the files recorded at build time were looked at again, while the next build listed
    the folder again and rebuilt. Opening sees what the build's reuse decision sees."""
    monkeypatch.chdir(tmp_path)  # a relative source, as typed at the command line
    _corpus(tmp_path / "corpus", first)
    source = "corpus" if given == "folder" else "corpus/*.tsv"
    store = lading.build_store(source, "s.store", progress=False)
    assert store.stale is None and len(store) == len(first)
    write(tmp_path / "corpus" / "3.tsv", "3\tdocument 3.tsv\n")
    monkeypatch.chdir(tmp_path / "corpus")  # opened from elsewhere: the same folder is listed
    reopened = lading.open_store(tmp_path / "s.store", on_stale="ignore")
    assert reopened.stale is not None and "3.tsv" in reopened.stale, reopened.stale
    with pytest.raises(StoreFormatError, match=r"is stale: .*3\.tsv"):
        lading.open_store(tmp_path / "s.store", on_stale="raise")
    monkeypatch.chdir(tmp_path)
    rebuilt = lading.build_store(source, "s.store", progress=False)
    assert len(rebuilt) == len(first) + 1 and rebuilt.stale is None
    # a removed file is a change too (the build would rebuild without it)
    (tmp_path / "corpus" / "1.tsv").unlink()
    gone = lading.open_store("s.store", on_stale="ignore").stale
    assert gone is not None and "1.tsv" in gone, gone


def test_a_file_the_build_would_not_read_is_no_change(tmp_path: Path) -> None:
    """What the build's listing skips (a hidden or ``_`` file in a folder, a name a glob does
    not match) leaves the store current: the next build would reuse it."""
    _corpus(tmp_path / "corpus", ("1.tsv", "2.tsv"))
    by_folder = lading.build_store(tmp_path / "corpus", tmp_path / "f.store", progress=False)
    by_glob = lading.build_store(f"{tmp_path}/corpus/*.tsv", tmp_path / "g.store", progress=False)
    write(tmp_path / "corpus" / "_SUCCESS", "")
    write(tmp_path / "corpus" / ".notes.tsv", "x\ty\n")
    assert lading.open_store(by_folder.path, on_stale="raise").stale is None
    write(tmp_path / "corpus" / "readme.txt", "not a corpus file\n")
    assert lading.open_store(by_glob.path, on_stale="raise").stale is None
    again = lading.build_store(f"{tmp_path}/corpus/*.tsv", tmp_path / "g.store", progress=False)
    assert again.snapshot == by_glob.snapshot  # the build reused it: the same rule


def test_the_files_of_hidden_and_underscore_folders_are_not_read(tmp_path: Path) -> None:
    """A folder's ``.git`` and ``_temporary`` (Spark's) are left out with all below them, as
    hidden and ``_`` files are: a review's build read a cloned repository's git files (only
    a file's own name was checked); a file added there later leaves the store current."""
    _corpus(tmp_path / "corpus", ("1.tsv", "sub/2.tsv"))
    write(tmp_path / "corpus" / ".git" / "x.tsv", "g1\tgit object\n")
    write(tmp_path / "corpus" / "_temporary" / "0" / "part.tsv", "t1\ttemporary\n")
    write(tmp_path / "corpus" / "sub" / ".cache" / "c.tsv", "c1\tcached\n")
    store = lading.build_store(tmp_path / "corpus", tmp_path / "s.store", progress=False)
    assert sorted(store.ids()) == ["1", "2"]
    write(tmp_path / "corpus" / ".git" / "y.tsv", "g2\tanother\n")
    assert lading.open_store(store.path, on_stale="raise").stale is None


def test_a_source_folder_that_is_not_here_is_no_change(tmp_path: Path) -> None:
    """A store copied to another machine (its folder not there) is not stale, as a missing
    source file is not: nothing can be compared."""
    _corpus(tmp_path / "corpus", ("1.tsv", "2.tsv"))
    store = lading.build_store(tmp_path / "corpus", tmp_path / "s.store", progress=False)
    os.rename(tmp_path / "corpus", tmp_path / "elsewhere")
    assert lading.open_store(store.path, on_stale="raise").stale is None


def test_a_folder_store_built_before_the_folder_was_recorded_opens_as_before(
    tmp_path: Path,
) -> None:
    """A manifest without the folder (a store built by an earlier lading) opens, and keeps
    its behaviour: only the files it recorded are compared."""
    import json

    _corpus(tmp_path / "corpus", ("1.tsv", "2.tsv"))
    store = lading.build_store(tmp_path / "corpus", tmp_path / "s.store", progress=False)
    meta_path = store.path / "meta.json"
    meta = json.loads(meta_path.read_text())
    assert "input" in meta["source"]  # what this lading records
    del meta["source"]["input"]
    meta_path.write_text(json.dumps(meta))
    write(tmp_path / "corpus" / "3.tsv", "3\tdocument 3\n")
    old = lading.open_store(store.path, on_stale="raise")
    assert len(old) == 2 and old.stale is None
    write(tmp_path / "corpus" / "1.tsv", "1\tchanged document, longer than before\n")
    assert "1.tsv" in str(lading.open_store(store.path, on_stale="ignore").stale)
