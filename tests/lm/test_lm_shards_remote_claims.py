"""Shards of one token corpus build into object storage claim their build as a local dest does.

A worker compares its recipe (inputs, options, N) with the ``build.json`` already in the bucket
before it tokenizes, and refuses another N or another source under one explicit build id with
the local wording, naming the URL (it used to be accepted, and the merge kept the old data). The
bucket's ``build.json`` is PUT by the first worker only. The report prints the URL as given.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_lm_shards import inputs

from lading.errors import StoreFormatError
from lading.lm import TokenCorpus
from lading.remote.clients import open_client
from lading.testing import LocalS3

pytest.importorskip("tokenizers")


@pytest.mark.slow  # shard builds over the local S3: ~4 s
def test_an_explicit_build_id_given_another_n_or_source_is_refused_before_tokenizing(
    s3: LocalS3, bucket: str, tmp_path: Path
) -> None:
    src, tok = inputs(tmp_path), tmp_path / "t.json"
    url = f"s3://{bucket}/c"
    for i in range(2):
        report = TokenCorpus.build_shard(
            src, url, (i, 2), tok, build_id="build-job42", cache=tmp_path / "w", progress=False
        )
    assert str(report).startswith(f"{url}: shard 1/2 of build-job42: ")
    said = f"once all 2 are built: lading lm merge {url} --build-id {report.build_id}"
    assert str(report).endswith(said)
    first = TokenCorpus.merge(url, cache=tmp_path / "m1")
    with pytest.raises(StoreFormatError, match="records 2 shards") as e:
        TokenCorpus.build_shard(
            src, url, (0, 3), tok, build_id="build-job42", cache=tmp_path / "w", progress=False
        )
    assert f"{url}/build-job42" in str(e.value) and str(tmp_path) not in str(e.value)
    other = tmp_path / "other"
    other.mkdir()
    (other / "x.jsonl").write_text("".join(f'{{"text": "w{i} w2"}}\n' for i in range(30)))
    for i in range(2):  # the same N, another source: "already built" before
        with pytest.raises(StoreFormatError, match="reads other inputs than the shards") as e:
            TokenCorpus.build_shard(
                other, url, (i, 2), tok, build_id="build-job42", cache=tmp_path / "w",
                progress=False,
            )  # fmt: skip
        assert f"{url}/build-job42" in str(e.value)
    again = TokenCorpus.build_shard(
        src, url, (0, 2), tok, build_id="build-job42", cache=tmp_path / "w", progress=False
    )
    assert again.reused
    assert TokenCorpus.merge(url, cache=tmp_path / "m2").snapshot == first.snapshot


def test_the_bucket_build_json_is_put_by_the_first_shard_only(
    s3: LocalS3, bucket: str, tmp_path: Path
) -> None:
    src, tok = inputs(tmp_path), tmp_path / "t.json"
    url = f"s3://{bucket}/c"
    report = TokenCorpus.build_shard(src, url, (0, 2), tok, cache=tmp_path / "w", progress=False)
    client = open_client(url)
    key = f"{report.build_id}/build.json"
    recorded = json.loads(client.get(key))
    client.put(key, json.dumps({**recorded, "first": True}).encode())
    TokenCorpus.build_shard(src, url, (1, 2), tok, cache=tmp_path / "w", progress=False)
    assert json.loads(client.get(key)).get("first") is True, "build.json was PUT again"
    assert len(TokenCorpus.merge(url, cache=tmp_path / "m")) == 800


def test_a_merge_of_no_documents_names_the_url_not_its_deleted_mirror(
    s3: LocalS3, bucket: str, tmp_path: Path
) -> None:
    from lading.errors import SourceError

    inputs(tmp_path)  # the tokenizer
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    url = f"s3://{bucket}/c"
    TokenCorpus.build_shard([empty], url, (0, 1), tmp_path / "t.json", cache=tmp_path / "w")
    with pytest.raises(SourceError, match="no documents in any shard") as e:
        TokenCorpus.merge(url, cache=tmp_path / "m")
    assert e.value.path == url and str(tmp_path) not in str(e.value)
