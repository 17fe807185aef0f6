"""``lading verify s3://...`` checks the build's records in the bucket, as it does in a folder.

A store or token corpus built in shards straight into a bucket keeps there what a local build
keeps beside its snapshot (``snap-<id>/manifest.json``, each shard's ``shard.json``, each
build's ``build.json``), which a rerun worker, a later merge and a reader pinned to the
snapshot read again. ``verify`` read the manifest's files only: a damaged record in a bucket
was found by none of them until that later reader failed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import lading
from conftest import write
from lading.lm import TokenCorpus
from lading.lm.corpus import verify_corpus
from lading.remote.clients import open_client
from lading.stores import verify_store
from lading.testing import LocalS3


def jsonl(path: Path, n: int) -> Path:
    lines = [json.dumps({"id": f"d{i}", "text": f"w{i % 50} w{i % 7} title"}) for i in range(n)]
    return write(path, "\n".join(lines) + "\n")


def word_tokenizer(path: Path) -> Path:
    """A word-level tokenizer of the documents' words (with an end of document), at ``path``."""
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import models, pre_tokenizers

    vocab = {"[UNK]": 0, **{f"w{i}": i + 1 for i in range(50)}, "title": 51, "</s>": 52}
    tok = tokenizers.Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(path))
    return path


def _sharded_store(url: str, tmp_path: Path) -> None:
    src = jsonl(tmp_path / "c.jsonl", 300)
    for i in range(3):
        lading.build_shard(src, url, (i, 3), cache=tmp_path / f"w{i}")
    lading.merge_store(url, cache=tmp_path / "m").close()


def _keys(url: str, name: str) -> list[str]:
    return sorted(k for k in open_client(url).list() if k.endswith(name))


def _bump(url: str, key: str, field: str, by: int) -> str:
    """Add ``by`` to ``field`` of the JSON record ``key`` in the bucket; ``key``."""
    client = open_client(url)
    record = json.loads(client.get(key))
    record[field] += by
    client.put(key, json.dumps(record).encode())
    return key


@pytest.mark.slow  # buckets on the local S3 (30 ms a request): ~5-11 s
def test_verify_of_a_bucket_finds_a_damaged_shard_record(
    s3: LocalS3, bucket: str, tmp_path: Path
) -> None:
    url = f"s3://{bucket}/stores/v"
    _sharded_store(url, tmp_path)
    assert verify_store(url) == []  # every record agrees
    shard = _bump(url, _keys(url, "/shard.json")[1], "rows", 1)
    problems = verify_store(url)
    assert len(problems) == 1, problems
    assert f"{url}/{shard} disagrees with {url}/meta.json: rows" in problems[0]
    assert "a later merge of its build reads again" in problems[0]


@pytest.mark.slow  # buckets on the local S3 (30 ms a request): ~5-11 s
def test_verify_of_a_bucket_finds_a_missing_build_record_and_a_changed_snapshot_copy(
    s3: LocalS3, bucket: str, tmp_path: Path
) -> None:
    url = f"s3://{bucket}/stores/w"
    _sharded_store(url, tmp_path)
    (build,) = _keys(url, "/build.json")
    open_client(url).delete(build)
    (manifest,) = [k for k in _keys(url, "/manifest.json") if k.startswith("snap-")]
    _bump(url, manifest, "count", 7)
    problems = verify_store(url)
    assert any(p.startswith(f"{url}/{build} is missing") for p in problems), problems
    (differs,) = [p for p in problems if p.startswith(f"{url}/{manifest} differs from")]
    assert f"differs from {url}/meta.json (it has other values of count)" in differs
    assert f"`aws s3 cp {url}/meta.json {url}/{manifest}`" in differs  # the fix, for a bucket


def test_verify_of_a_token_corpus_in_a_bucket_checks_its_parts_records(
    s3: LocalS3, bucket: str, tmp_path: Path
) -> None:
    src = jsonl(tmp_path / "c.jsonl", 200)
    tok = word_tokenizer(tmp_path / "tok.json")
    url = f"s3://{bucket}/corpora/c"
    for i in range(2):
        TokenCorpus.build_shard(src, url, (i, 2), tok, cache=tmp_path / f"w{i}")
    TokenCorpus.merge(url, cache=tmp_path / "m").close()
    assert verify_corpus(url) == []
    part = _bump(url, _keys(url, "/shard.json")[0], "tokens", 3)
    problems = verify_corpus(url)
    assert len(problems) == 1, problems
    assert f"{url}/{part} disagrees with {url}/meta.json: tokens" in problems[0]


def test_verify_of_stores_and_corpora_built_by_one_process_into_a_bucket_finds_nothing(
    s3: LocalS3, bucket: str, tmp_path: Path
) -> None:
    """A one-process build uploads its folder: the records there agree (none is missing)."""
    src = jsonl(tmp_path / "c.jsonl", 120)
    url = f"s3://{bucket}/stores/one"
    lading.build_store(src, url, cache=tmp_path / "b").close()
    assert verify_store(url) == []
    tok = word_tokenizer(tmp_path / "tok.json")
    corpus = f"s3://{bucket}/corpora/one"
    TokenCorpus.build(src, corpus, tok, cache=tmp_path / "c").close()
    assert verify_corpus(corpus) == []


@pytest.mark.slow  # buckets on the local S3 (30 ms a request): ~5-11 s
def test_a_bucket_record_naming_a_file_outside_its_shard_is_a_problem_not_a_read(
    s3: LocalS3, bucket: str, tmp_path: Path
) -> None:
    """A ``shard.json`` in a bucket listing ``../`` or ``/abs`` names: each refused by name,
    as in a folder (``check_name``), never looked up."""
    url = f"s3://{bucket}/stores/h"
    _sharded_store(url, tmp_path)
    client = open_client(url)
    shard = _keys(url, "/shard.json")[0]
    record = json.loads(client.get(shard))
    record["files"]["../../meta.json"] = {"size": 1, "crc32": 0}
    record["files"]["/etc/passwd"] = {"size": 1, "crc32": 0}
    client.put(shard, json.dumps(record).encode())
    problems = verify_store(url)
    assert len(problems) == 1, problems
    assert "'../../meta.json'" in problems[0] and "'/etc/passwd'" in problems[0], problems[0]
