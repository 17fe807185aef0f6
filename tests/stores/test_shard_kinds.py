"""A sharded build, its merge or a Ray sink never replaces a document store with a token corpus
(nor the reverse): refused as a one-process build refuses it (``holds a lading store
(lading.packed); refusing to replace it with a token corpus``), at the shard's claim (before
any tokenizing) and again at the merge, in a folder and in a bucket. The store stays readable.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

import lading
from conftest import word_tokenizer, write
from lading.cli import main
from lading.lm import TokenCorpus
from lading.testing import LocalS3

pytest.importorskip("tokenizers")
WORDS = [f"w{i}" for i in range(40)]
TO_CORPUS = r"holds a lading store \(lading\.packed\); refusing to replace it with a token corpus"
TO_STORE = r"holds a lading token corpus \(lading\.tokens\); refusing to replace it with a store"


def source(tmp_path: Path) -> tuple[Path, Path]:
    lines = [
        json.dumps({"id": f"d{i}", "text": " ".join(WORDS[i % 7 : i % 7 + 5])}) for i in range(60)
    ]
    return write(tmp_path / "src.jsonl", "\n".join(lines) + "\n"), word_tokenizer(
        WORDS, tmp_path / "t.json"
    )


def test_token_shards_and_their_merge_refuse_a_store_folder(tmp_path: Path) -> None:
    src, tok = source(tmp_path)
    store = tmp_path / "store"
    lading.build_store(src, store, progress=False)
    with pytest.raises(FileExistsError, match=TO_CORPUS):
        TokenCorpus.build_shard(src, store, (0, 2), tok, progress=False)
    assert not list(store.glob("build-*")), "refused before the shard was claimed"
    # shards built before the store came: the merge refuses
    other = tmp_path / "other"
    for i in range(2):
        TokenCorpus.build_shard(src, other, (i, 2), tok, progress=False)
    lading.build_store(src, other, progress=False)
    with pytest.raises(FileExistsError, match=TO_CORPUS):
        TokenCorpus.merge(other)
    assert main(["lm", "merge", str(other)]) != 0
    assert len(lading.open_store(other)) == 60 and len(lading.open_store(store)) == 60


def test_store_shards_and_their_merge_refuse_a_token_corpus_folder(tmp_path: Path) -> None:
    src, tok = source(tmp_path)
    corpus = tmp_path / "corpus"
    TokenCorpus.build(src, corpus, tok, progress=False)
    with pytest.raises(FileExistsError, match=TO_STORE):
        lading.build_shard(src, corpus, (0, 2), progress=False)
    assert not list(corpus.glob("build-*"))
    other = tmp_path / "other"
    for i in range(2):
        lading.build_shard(src, other, (i, 2), progress=False)
    TokenCorpus.build(src, other, tok, progress=False)
    with pytest.raises(FileExistsError, match=TO_STORE):
        lading.merge_store(other)
    assert main(["merge", str(other)]) != 0
    assert len(TokenCorpus.open(other)) == 60 and len(TokenCorpus.open(corpus)) == 60


def test_a_merge_leaves_what_a_user_put_beside_the_shards(tmp_path: Path) -> None:
    """The folder became lading's when its shards were claimed: a file or link a user puts
    beside them later is left alone by the merges, not a reason to refuse ("is not a lading
    store"), as the merges were before they checked the kind there."""
    src, tok = source(tmp_path)
    store, corpus = tmp_path / "store", tmp_path / "corpus"
    for i in range(2):
        lading.build_shard(src, store, (i, 2), progress=False)
        TokenCorpus.build_shard(src, corpus, (i, 2), tok, progress=False)
    for dest in (store, corpus):
        (dest / "notes.txt").write_text("mine")
        (dest / "lnk").symlink_to(tmp_path)
    assert len(lading.merge_store(store)) == 60
    assert len(TokenCorpus.merge(corpus)) == 60
    assert (store / "notes.txt").read_text() == "mine" and (corpus / "lnk").is_symlink()


def test_the_ray_token_sink_refuses_a_store_folder(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    import pyarrow as pa

    from lading.integrations.ray_tokens import LadingTokenDatasink

    src, tok = source(tmp_path)
    store = tmp_path / "store"
    lading.build_store(src, store, progress=False)
    with pytest.raises(FileExistsError, match=TO_CORPUS):
        LadingTokenDatasink(store, tok).on_write_start()
    # a store committed while the job ran: the commit refuses
    late = tmp_path / "late"
    sink = LadingTokenDatasink(late, tok)
    sink.on_write_start()
    ret = sink.write([pa.table({"text": ["w1 w2"] * 5})], SimpleNamespace(task_idx=0))
    lading.build_store(src, late, progress=False)
    with pytest.raises(FileExistsError, match=TO_CORPUS):
        sink.on_write_complete(SimpleNamespace(write_returns=[ret]))
    assert len(lading.open_store(late)) == 60 and len(lading.open_store(store)) == 60


@pytest.mark.slow  # builds in the local S3: ~3 s
def test_a_bucket_holding_a_store_refuses_a_token_corpus(
    s3: LocalS3, bucket: str, tmp_path: Path
) -> None:
    src, tok = source(tmp_path)
    url = f"s3://{bucket}/docs"
    lading.build_store(src, url, progress=False, cache=tmp_path / "c0")
    with pytest.raises(FileExistsError, match=TO_CORPUS):
        TokenCorpus.build(src, url, tok, cache=tmp_path / "c1", progress=False)
    with pytest.raises(FileExistsError, match=TO_CORPUS):
        TokenCorpus.build_shard(src, url, (0, 1), tok, cache=tmp_path / "c2", progress=False)
    # shards uploaded before the store was: the merge refuses
    late = f"s3://{bucket}/late"
    TokenCorpus.build_shard(src, late, (0, 1), tok, cache=tmp_path / "c3", progress=False)
    lading.build_store(src, late, progress=False, cache=tmp_path / "c4")
    with pytest.raises(FileExistsError, match=TO_CORPUS):
        TokenCorpus.merge(late, cache=tmp_path / "c5")
    for where in (url, late):
        assert len(lading.open_store(where, cache=tmp_path / "r")) == 60


@pytest.mark.slow  # builds in the local S3: ~3 s
def test_a_bucket_holding_a_token_corpus_refuses_store_shards(
    s3: LocalS3, bucket: str, tmp_path: Path
) -> None:
    src, tok = source(tmp_path)
    url = f"s3://{bucket}/tokens"
    TokenCorpus.build(src, url, tok, cache=tmp_path / "c0", progress=False)
    with pytest.raises(FileExistsError, match=TO_STORE):
        lading.build_shard(src, url, (0, 1), cache=tmp_path / "c1")
    late = f"s3://{bucket}/late"
    lading.build_shard(src, late, (0, 1), cache=tmp_path / "c2")
    TokenCorpus.build(src, late, tok, cache=tmp_path / "c3", progress=False)
    with pytest.raises(FileExistsError, match=TO_STORE):
        lading.merge_store(late, cache=tmp_path / "c4")
    for where in (url, late):
        assert len(TokenCorpus.open(where, cache=tmp_path / "r")) == 60
