"""A token corpus given where a store is read. Before, `lading inspect CORPUS` and `lading get
CORPUS ID` (and ``lading.open_store(CORPUS)``) said "meta.json: format is 'lading.tokens',
expected 'lading.packed'", exit 2, no fix, where `lading verify CORPUS` accepted it. Now inspect
reports a corpus as it reports a store, and what cannot read one names what the folder is and
what reads it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import lading
from lading.cli import main
from lading.errors import StoreFormatError

pytest.importorskip("tokenizers")


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    from conftest import word_corpus

    word_corpus(tmp_path, docs=7, lengths=(3, 9), words=20, seed=0)
    return tmp_path / "corpus"


def test_inspect_reports_a_token_corpus(corpus: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from lading.lm import TokenCorpus

    opened = TokenCorpus.open(corpus)
    assert main(["inspect", str(corpus)]) == 0
    out = capsys.readouterr().out
    assert f"corpus     {corpus} (lading.tokens v2, a token corpus)" in out, out
    assert "documents  7\n" in out and f"tokens     {opened.n_tokens:,} as uint16" in out, out
    assert f"source     {corpus.parent / 'docs.txt'}" in out and "stale      no" in out, out
    assert main(["inspect", str(corpus), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["documents"] == 7 and info["tokens"] == opened.n_tokens
    assert info["format"] == "lading.tokens v2" and info["snapshot"] == opened.snapshot
    listed = opened.meta["files"]
    assert info["bytes"] == sum(int(f["size"]) for f in listed.values()) > 0
    assert info["files"] == len(listed) and isinstance(info["bytes"], int)


def test_get_on_a_token_corpus_names_what_it_is_and_what_reads_it(
    corpus: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["get", str(corpus), "0"]) == 2
    line = capsys.readouterr().err.strip()
    assert line.startswith(f"lading get: {corpus}"), line
    assert "is a lading token corpus, not a store" in line, line
    assert "TokenCorpus.open" in line and "`lading inspect`" in line, line
    assert "expected 'lading.packed'" not in line, line


def test_each_reader_names_the_format_it_was_given(corpus: Path, tmp_path: Path) -> None:
    from lading.lm import TokenCorpus

    with pytest.raises(StoreFormatError, match=r"token corpus, not a store.*TokenCorpus\.open"):
        lading.open_store(corpus)
    (tmp_path / "d.tsv").write_text("1\tone\n")
    store = lading.build_store(tmp_path / "d.tsv", tmp_path / "store", progress=False)
    with pytest.raises(StoreFormatError, match=r"a lading store, not a token corpus.*open_store"):
        TokenCorpus.open(store.path)
