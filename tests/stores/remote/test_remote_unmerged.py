"""A bucket holding only the shards of a parallel build, not merged yet, is said to be that,
with the merge that commits it, as a folder in that state is (a review: `lading inspect`,
`verify` and `get` of such a bucket said "no store at URL ... build a store there with
`lading build SOURCE URL`", a full rebuild, to a user whose workers had built every shard)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import lading
from conftest import word_tokenizer, write
from lading.cli import main
from lading.errors import StoreNotFoundError
from lading.lm import TokenCorpus


def _jsonl(path: Path, n: int) -> Path:
    lines = (json.dumps({"id": f"d{i}", "text": f"alpha beta {i}"}) for i in range(n))
    return write(path, "\n".join(lines) + "\n")


def test_a_bucket_of_shards_not_merged_names_the_merge(
    bucket: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = _jsonl(tmp_path / "c.jsonl", 40)
    url = f"s3://{bucket}/pending"
    bid = lading.build_shard(src, url, (0, 2), cache=tmp_path / "w", progress=False).build_id
    with pytest.raises(StoreNotFoundError) as refused:
        lading.open_store(url, cache=tmp_path / "r")
    said = str(refused.value)
    assert f"{url} is not a lading store yet" in said and bid in said, said
    assert f"`lading merge {url}`" in said and "lading build" not in said, said
    assert main(["verify", url]) == 2  # nothing to check yet, not damage
    assert f"`lading merge {url}`" in capsys.readouterr().err

    corpus = f"s3://{bucket}/pending-tokens"
    tok = word_tokenizer(["alpha", "beta"], tmp_path / "tok.json")
    TokenCorpus.build_shard(src, corpus, (1, 2), tok, cache=tmp_path / "w2", progress=False)
    with pytest.raises(
        StoreNotFoundError, match=f"not a lading token corpus yet.*lading lm merge {corpus}"
    ):
        TokenCorpus.open(corpus, cache=tmp_path / "r2")


def test_no_store_in_a_bucket_whose_name_holds_bucket_is_said_so(
    bucket: str, tmp_path: Path
) -> None:
    """A missing store in a bucket named ``bucket-...`` was taken for a missing bucket (the
    error's text was searched for the word): the raw "meta.json does not exist" came out,
    not "no store at URL" with its fix."""
    assert "bucket" in bucket
    with pytest.raises(StoreNotFoundError, match=f"no store at s3://{bucket}/nothing"):
        lading.open_store(f"s3://{bucket}/nothing", cache=tmp_path / "r")
