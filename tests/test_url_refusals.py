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


def test_a_file_url_is_refused_naming_the_path_not_written_to_a_folder_named_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``file:///x`` counted as local and went on as ``Path("file:///x")``: a store or corpus
    built there landed in ``./file:/x`` under the working directory (on a Ray cluster, under
    each worker's), nothing said. It is refused in one line naming the path to pass."""
    import lading
    from lading.errors import RemoteURLError

    monkeypatch.chdir(tmp_path)
    src = tmp_path / "docs.tsv"
    src.write_text("1\tone document\n2\tanother one\n")
    url = f"file://{tmp_path / 'store'}"
    with pytest.raises(RemoteURLError, match=rf"{url}: .*pass the path {tmp_path / 'store'}"):
        lading.build_store(src, url, progress=False)
    with pytest.raises(RemoteURLError, match=r"pass the path"):
        lading.open_store(url)
    assert not (tmp_path / "file:").exists()
    assert not (tmp_path / "store").exists()


def test_a_file_url_still_stages(tmp_path: Path) -> None:
    """Staging reads ``file://`` as the path it names (:mod:`lading.disk.stage`): kept."""
    import lading

    src = tmp_path / "docs.tsv"
    src.write_text("1\tone document\n2\tanother one\n")
    lading.build_store(src, tmp_path / "store", progress=False)
    staged = lading.open_store(f"file://{tmp_path / 'store'}", stage_to=tmp_path / "copies")
    assert staged.get("2") == "another one"
