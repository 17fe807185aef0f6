"""Workloads without a remote route refuse an object-store URL instead of writing a folder
named ``s3:`` (``TokenCorpus.build(src, "s3://...")`` returned without error and wrote
``./s3:/bucket/...``) or calling the URL a missing file."""

from __future__ import annotations

from pathlib import Path

import pytest

from lading.errors import LadingError


def test_token_corpus_build_and_open_refuse_a_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tokenizers = pytest.importorskip("tokenizers")
    from lading.lm import TokenCorpus
    from lading.stores.tokens import train_tokenizer

    monkeypatch.chdir(tmp_path)
    src = tmp_path / "wiki.txt"
    src.write_text("one document here\n\nand another one there\n")
    tok = train_tokenizer(["one document here", "and another one there"], "bpe", 300)
    assert isinstance(tok, tokenizers.Tokenizer)
    with pytest.raises(LadingError, match=r"local folder, not the URL s3://corpora/wiki"):
        TokenCorpus.build(src, "s3://corpora/wiki", tok)
    assert not (tmp_path / "s3:").exists()
    with pytest.raises(LadingError, match=r"local folder, not the URL s3://corpora/wiki"):
        TokenCorpus.open("s3://corpora/wiki")

