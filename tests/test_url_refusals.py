"""Workloads without a remote route refuse an object-store URL instead of writing a folder
named ``s3:`` (``TokenCorpus.build(src, "s3://...")`` returned without error and wrote
``./s3:/bucket/...``) or calling the URL a missing file."""

from __future__ import annotations

from pathlib import Path

import pytest

from lading.errors import LadingError


def test_token_corpus_build_and_open_refuse_a_scheme_no_client_reaches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """s3:// has its route now (tests/lm/test_lm_remote.py); a scheme nothing reaches is still
    refused in one line, before a folder named after it is written."""
    tokenizers = pytest.importorskip("tokenizers")
    from lading.lm import TokenCorpus
    from lading.stores.tokens import train_tokenizer

    monkeypatch.chdir(tmp_path)
    src = tmp_path / "wiki.txt"
    src.write_text("one document here\n\nand another one there\n")
    tok = train_tokenizer(["one document here", "and another one there"], "bpe", 300)
    assert isinstance(tok, tokenizers.Tokenizer)
    with pytest.raises(LadingError, match=r"cannot reach nosuch://corpora/wiki: no client"):
        TokenCorpus.build(src, "nosuch://corpora/wiki", tok)
    assert not (tmp_path / "nosuch:").exists()
    with pytest.raises(LadingError, match=r"cannot reach nosuch://corpora/wiki: no client"):
        TokenCorpus.open("nosuch://corpora/wiki")
