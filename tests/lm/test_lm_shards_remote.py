"""A token corpus built in shards straight into object storage (the local S3), merged there.

Each shard is uploaded once whole (its ``shard.json`` last); the merge commits the manifest in
the bucket, ``meta.json`` last. Compared with a one-process local build: documents, offsets
and the batches of windows and packed reads through the node cache. A reader that opened
before the merge keeps its snapshot; one opening meanwhile sees the last snapshot.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_lm_shards import inputs

from lading.errors import StoreFormatError
from lading.lm import LanguageModelLoader, Packed, TokenCorpus, Windows
from lading.remote.objects import RemoteWriteError
from lading.testing import LocalS3
from lading.world import World

pytest.importorskip("tokenizers")


def batches(corpus: TokenCorpus, sequence: object) -> list[list[object]]:
    loader = LanguageModelLoader(corpus, 3, sequence, seed=4, world=World(0, 2))
    return [[np.asarray(t).tolist() for t in batch] for batch in loader]


@pytest.mark.slow  # three shards and a merge in the bucket, read back three ways: ~22 s
def test_shards_upload_as_they_finish_and_the_merge_commits_in_the_bucket(
    s3: LocalS3, bucket: str, tmp_path: Path
) -> None:
    src, tok = inputs(tmp_path), tmp_path / "t.json"
    url = f"s3://{bucket}/corpora/wiki"
    one = TokenCorpus.build(src, tmp_path / "one", tok, progress=False)
    old = TokenCorpus.build(src / "b.txt", url, tok, cache=tmp_path / "c0", progress=False)
    reports = [
        TokenCorpus.build_shard(src, url, (i, 3), tok, cache=tmp_path / f"w{i}", progress=False)
        for i in (2, 0, 1)
    ]
    assert not any(r.reused for r in reports)
    assert not list((tmp_path / "w0").glob("shard-*")), "the worker's scratch copy stays"
    # shards in the bucket, not merged: a reader opening now sees the last snapshot
    meanwhile = TokenCorpus.open(url, cache=tmp_path / "r1")
    assert meanwhile.snapshot == old.snapshot and len(meanwhile) == len(old)
    merged = TokenCorpus.merge(url, cache=tmp_path / "m")
    assert merged.remote is not None and len(merged.meta["parts"]) == 3
    assert merged.snapshot != old.snapshot
    assert merged.content_id == one.content_id  # a state of one resumes on the other
    assert len(merged) == len(one) and merged.n_tokens == one.n_tokens
    assert np.array_equal(np.asarray(merged.offsets), np.asarray(one.offsets))
    for x, y in zip(one.token_arrays(), merged.token_arrays()):
        assert np.array_equal(x, y)
    for i in (0, len(one) // 2, len(one) - 1):
        assert np.array_equal(merged.document(i), one.document(i))
    reader = TokenCorpus.open(url, cache=tmp_path / "r2", cache_bytes="4M")
    # the stored order's windows are one range each, planned (not recorded): a window over a
    # shard's end is cut into a range of each file
    stored = Windows(16, shuffle_documents=False)
    for sequence in (Windows(16), Packed(24), stored):
        assert batches(reader, sequence) == batches(one, sequence)
    # the reader that opened before the merge still reads its own snapshot
    assert np.array_equal(meanwhile.document(0), old.document(0))
    # a retried merge commits nothing new
    assert TokenCorpus.merge(url, cache=tmp_path / "m2").snapshot == merged.snapshot


def test_a_rerun_skips_uploaded_shards_and_a_missing_one_is_named(
    s3: LocalS3, bucket: str, tmp_path: Path
) -> None:
    src, tok = inputs(tmp_path), tmp_path / "t.json"
    url = f"s3://{bucket}/c"
    TokenCorpus.build_shard(src, url, (0, 2), tok, cache=tmp_path / "w", progress=False)
    with pytest.raises(StoreFormatError, match=rf"{url}: build build-\w+ has 1 of its 2 shards"):
        TokenCorpus.merge(url, cache=tmp_path / "m")
    again = TokenCorpus.build_shard(src, url, (0, 2), tok, cache=tmp_path / "w", progress=False)
    assert again.reused
    TokenCorpus.build_shard(src, url, (1, 2), tok, cache=tmp_path / "w", progress=False)
    assert len(TokenCorpus.merge(url, cache=tmp_path / "m")) == 800


def test_a_bucket_that_refuses_writes_fails_before_any_tokenizing(
    s3: LocalS3, tmp_path: Path
) -> None:
    with pytest.raises(RemoteWriteError) as caught:  # the source does not even exist
        TokenCorpus.build_shard(
            tmp_path / "nothing", "s3://no-such-bucket-49/c", (0, 2), tmp_path / "t.json",
            cache=tmp_path / "w",
        )  # fmt: skip
    message = str(caught.value)
    assert "bucket 'no-such-bucket-49' does not exist" in message and "\n" not in message
    assert message.startswith("cannot write the token corpus to s3://no-such-bucket-49/c"), message


@pytest.mark.slow  # shards in the local S3 with a failing PUT: ~6 s
def test_a_shard_whose_put_fails_says_what_is_unchanged_and_that_a_rerun_goes_on(
    s3: LocalS3, bucket: str, tmp_path: Path
) -> None:
    """A PUT refused while a token corpus's shard uploads: the error said "the store there is
    unchanged" (of a corpus) and no fix; it now says nothing there is committed and that the
    same command run again goes on, which it does."""
    src, tok = inputs(tmp_path), tmp_path / "t.json"
    url = f"s3://{bucket}/c"
    s3.fault("shard-00001-of-00002/tokens.bin", 50, "error", op="put")
    try:
        with pytest.raises(RemoteWriteError) as caught:
            TokenCorpus.build_shard(src, url, (1, 2), tok, cache=tmp_path / "w", progress=False)
    finally:
        s3.reset()
    message = str(caught.value)
    assert "store" not in message, message
    assert "run the same command again" in message, message
    for i in (1, 0):
        TokenCorpus.build_shard(src, url, (i, 2), tok, cache=tmp_path / "w", progress=False)
    assert len(TokenCorpus.merge(url, cache=tmp_path / "m")) == 800
