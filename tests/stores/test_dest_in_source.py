"""A destination inside the source folder it is built from.

A folder source is read recursively, so a store or token corpus built into a folder below
it read its own output as input: `lading build data data/store` built once, then every
rebuild failed on `data/store/meta.json` ("cannot tell the format"); a token corpus's shard
workers each saw the others' finished shards as inputs (each worker a different build id,
a merge that could never line up) and a one-process build read its own lock file as JSONL.
Now each is refused before anything is read, naming both folders and the fix.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import lading
from conftest import word_tokenizer, write
from lading.cli import main


def source(tmp_path: Path) -> Path:
    folder = tmp_path / "data"
    lines = [json.dumps({"id": f"d{i}", "text": f"alpha beta {i}"}) for i in range(40)]
    write(folder / "x.jsonl", "\n".join(lines) + "\n")
    return folder


def refused(error: pytest.ExceptionInfo[BaseException], src: Path, dest: Path) -> None:
    message = str(error.value)
    assert f"{dest} is inside the source folder {src}" in message, message
    assert "outside" in message, message


@pytest.mark.parametrize("below", ["store", "a/b/store"])
def test_a_store_built_inside_its_source_folder_is_refused(tmp_path: Path, below: str) -> None:
    src = source(tmp_path)
    dest = src / below
    with pytest.raises(ValueError) as error:
        lading.build_store(src, dest, progress=False)
    refused(error, src, dest)
    with pytest.raises(ValueError) as error:
        lading.build_shard(src, dest, (0, 2), progress=False)
    refused(error, src, dest)
    assert not dest.exists()  # nothing written
    assert main(["build", str(src), str(dest)]) == 2
    outside = lading.build_store(src, tmp_path / "store", progress=False)
    assert len(outside) == 40  # a folder beside it: built as before


def test_a_token_corpus_built_inside_its_source_folder_is_refused(tmp_path: Path) -> None:
    pytest.importorskip("tokenizers")
    from lading.lm import TokenCorpus

    tok = word_tokenizer(["alpha", "beta"] + [str(i) for i in range(40)], tmp_path / "t.json")
    src = source(tmp_path)
    dest = src / "corpus"
    with pytest.raises(ValueError) as error:
        TokenCorpus.build(src, dest, tok, progress=False, text_field="text")
    refused(error, src, dest)
    for i in range(2):
        with pytest.raises(ValueError) as error:
            TokenCorpus.build_shard(src, dest, (i, 2), tok, progress=False, text_field="text")
        refused(error, src, dest)
    assert not dest.exists()
    assert main(["lm", "build", str(src), str(dest), "--tokenizer", str(tok)]) == 2
    corpus = TokenCorpus.build(src, tmp_path / "corpus", tok, progress=False, text_field="text")
    assert len(corpus) == 40


def test_a_store_used_as_a_source_may_hold_its_corpus_beside_it(tmp_path: Path) -> None:
    """A lading store as the source is read as a store (its snapshot), not as a folder of
    files: a corpus built into a folder beside its files is not refused for that."""
    pytest.importorskip("tokenizers")
    from lading.lm import TokenCorpus

    store = lading.build_store(source(tmp_path), tmp_path / "store", progress=False)
    tok = word_tokenizer(["alpha", "beta"] + [str(i) for i in range(40)], tmp_path / "t.json")
    corpus = TokenCorpus.build(store.path, tmp_path / "store" / "corpus", tok, progress=False)
    assert len(corpus) == 40


def test_a_store_inside_a_beir_folder_is_built(tmp_path: Path) -> None:
    """A BEIR folder is read as BEIR (its corpus file, nothing below it), so a store built
    inside it is no input of its rebuild: built, as before this check, and built again."""
    beir = tmp_path / "scifact"
    lines = [json.dumps({"_id": f"d{i}", "title": "", "text": f"alpha {i}"}) for i in range(10)]
    write(beir / "corpus.jsonl", "\n".join(lines) + "\n")
    write(beir / "queries.jsonl", json.dumps({"_id": "q1", "text": "alpha"}) + "\n")
    assert len(lading.build_store(beir, beir / "store", progress=False)) == 10
    assert len(lading.build_store(beir, beir / "store", progress=False)) == 10
    assert main(["build", str(beir), str(beir / "store2")]) == 0
