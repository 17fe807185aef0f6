"""Shards and merges of a token corpus run again: a retried merge commits nothing new (never
an older build), shards rerun with another tokenizer are built again (the tokenizer is part of
the build's identity, as a one-process build's recipe), and a Ray sink's build is not taken
for a damaged one by ``lading lm merge``.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from test_lm_shards import WORDS, inputs

from conftest import word_tokenizer
from lading.cli import main
from lading.lm import TokenCorpus
from lading.testing import LocalS3

pytest.importorskip("tokenizers")


def shards(src: Path, dest: Path | str, n: int, tok: Path, **kw: object) -> list[object]:
    return [TokenCorpus.build_shard(src, dest, (i, n), tok, progress=False, **kw) for i in range(n)]


def test_a_retried_merge_keeps_the_newest_build(tmp_path: Path) -> None:
    src, tok, dest = inputs(tmp_path), tmp_path / "t.json", tmp_path / "c"
    shards(src, dest, 2, tok)
    x = TokenCorpus.merge(dest)
    shards(src, dest, 3, tok, append_eos=False)
    y = TokenCorpus.merge(dest)
    assert y.meta["build_id"] != x.meta["build_id"]
    assert TokenCorpus.merge(dest).snapshot == y.snapshot
    assert main(["lm", "merge", str(dest)]) == 0
    assert TokenCorpus.open(dest).snapshot == y.snapshot


@pytest.mark.slow  # buckets on the local S3 (30 ms a request): ~5-11 s
def test_a_retried_merge_in_a_bucket_keeps_the_newest_build(
    s3: LocalS3, bucket: str, tmp_path: Path
) -> None:
    src, tok, url = inputs(tmp_path), tmp_path / "t.json", f"s3://{bucket}/c"
    shards(src, url, 2, tok, cache=tmp_path / "w")
    TokenCorpus.merge(url, cache=tmp_path / "m1")
    shards(src, url, 2, tok, cache=tmp_path / "w", append_eos=False)
    y = TokenCorpus.merge(url, cache=tmp_path / "m2")
    assert TokenCorpus.merge(url, cache=tmp_path / "m3").snapshot == y.snapshot
    assert TokenCorpus.open(url, cache=tmp_path / "r").meta["build_id"] == y.meta["build_id"]


def test_shards_run_again_take_their_build_back(tmp_path: Path) -> None:
    """Back to earlier options: their shard workers run again ("already built") and the
    merge commits their build again, not the newer one it kept without a word."""
    src, tok, dest = inputs(tmp_path), tmp_path / "t.json", tmp_path / "c"
    shards(src, dest, 2, tok)
    x = TokenCorpus.merge(dest)
    shards(src, dest, 2, tok, append_eos=False)
    assert TokenCorpus.merge(dest).meta["build_id"] != x.meta["build_id"]
    shards(src, dest, 2, tok)
    back = TokenCorpus.merge(dest)
    assert back.meta["build_id"] == x.meta["build_id"] and back.snapshot != x.snapshot
    assert np.array_equal(np.asarray(back.tokens), np.asarray(x.tokens))
    assert TokenCorpus.merge(dest).snapshot == back.snapshot


def other_tokenizer(tmp_path: Path) -> Path:
    return word_tokenizer(list(reversed(WORDS)), tmp_path / "B.json")  # same words, other ids


def test_shards_rerun_with_another_tokenizer_are_built_again(tmp_path: Path) -> None:
    src, a, dest = inputs(tmp_path), tmp_path / "t.json", tmp_path / "c"
    b = other_tokenizer(tmp_path)
    one = TokenCorpus.build(src, tmp_path / "one", b, progress=False)
    shards(src, dest, 2, a)
    TokenCorpus.merge(dest)
    again = shards(src, dest, 2, b)
    assert not any(r.reused for r in again)  # type: ignore[attr-defined]
    merged = TokenCorpus.merge(dest)
    assert merged.meta["recipe"]["tokenizer"] == one.meta["recipe"]["tokenizer"]
    assert np.array_equal(merged.document(0), one.document(0))


def test_a_shard_switched_to_another_tokenizer_midway_is_not_stuck(tmp_path: Path) -> None:
    src, a, dest = inputs(tmp_path), tmp_path / "t.json", tmp_path / "c"
    b = other_tokenizer(tmp_path)
    TokenCorpus.build_shard(src, dest, (0, 2), a, progress=False)
    assert not TokenCorpus.build_shard(src, dest, (0, 2), b, progress=False).reused
    TokenCorpus.build_shard(src, dest, (1, 2), b, progress=False)
    one = TokenCorpus.build(src, tmp_path / "one", b, progress=False)
    merged = TokenCorpus.merge(dest)
    assert np.array_equal(merged.document(0), one.document(0))
    # retried: nothing new, and the half build of the first tokenizer is no error
    assert TokenCorpus.merge(dest).snapshot == merged.snapshot
    assert main(["lm", "merge", str(dest)]) == 0


@pytest.mark.slow  # shards built twice in the local S3: ~4 s
def test_shards_rerun_in_a_bucket_with_another_tokenizer_are_built_again(
    s3: LocalS3, bucket: str, tmp_path: Path
) -> None:
    src, a, url = inputs(tmp_path), tmp_path / "t.json", f"s3://{bucket}/c"
    b = other_tokenizer(tmp_path)
    shards(src, url, 2, a, cache=tmp_path / "w")
    TokenCorpus.merge(url, cache=tmp_path / "m1")
    again = shards(src, url, 2, b, cache=tmp_path / "w")
    assert not any(r.reused for r in again)  # type: ignore[attr-defined]
    merged = TokenCorpus.merge(url, cache=tmp_path / "m2")
    one = TokenCorpus.build(src, tmp_path / "one", b, progress=False)
    assert np.array_equal(merged.document(0), one.document(0))


def test_lm_merge_after_a_ray_sink_commit_is_no_error(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    import pyarrow as pa

    from lading.integrations.ray_tokens import LadingTokenDatasink

    tok = word_tokenizer(WORDS, tmp_path / "t.json")
    texts = [" ".join(WORDS[i : i + 9]) for i in range(100)]
    sink = LadingTokenDatasink(tmp_path / "c", tok)
    sink.on_write_start()
    returns = [
        sink.write([pa.table({"text": texts[:50]})], SimpleNamespace(task_idx=0)),
        sink.write([pa.table({"text": texts[50:]})], SimpleNamespace(task_idx=1)),
    ]
    sink.on_write_complete(SimpleNamespace(write_returns=returns))
    assert main(["lm", "merge", str(tmp_path / "c")]) == 0
    assert TokenCorpus.open(tmp_path / "c").snapshot == sink.snapshot
    # a job that failed leaves a build no merge takes: "no shards to merge", not "damaged"
    failed = LadingTokenDatasink(tmp_path / "f", tok)
    failed.on_write_start()
    failed.write([pa.table({"text": texts[:50]})], SimpleNamespace(task_idx=0))
    (tmp_path / "f" / failed.build_id / "build.json").touch()  # as a bucket's copy stays
    with pytest.raises(Exception, match="no shards to merge") as caught:
        TokenCorpus.merge(tmp_path / "f")
    assert "damaged" not in str(caught.value)


def test_one_build_id_given_two_tokenizers_is_refused_at_the_claim(tmp_path: Path) -> None:
    src, a, dest = inputs(tmp_path), tmp_path / "t.json", tmp_path / "c"
    b = other_tokenizer(tmp_path)
    TokenCorpus.build_shard(src, dest, (0, 2), a, build_id="build-mine", progress=False)
    with pytest.raises(Exception, match=r"other options than build build-mine .*tokenizer="):
        TokenCorpus.build_shard(src, dest, (0, 2), b, build_id="build-mine", progress=False)
    with pytest.raises(Exception, match=r"other options than build build-mine .*tokenizer="):
        TokenCorpus.build_shard(src, dest, (1, 2), b, build_id="build-mine", progress=False)


def _age(folder: Path, seconds: float) -> None:
    """Every file and folder under ``folder`` last changed ``seconds`` ago."""
    import os
    import time

    then = time.time() - seconds
    for p in [folder, *folder.rglob("*")]:
        os.utime(p, (then, then))


def test_a_merge_keeps_the_build_it_merges_however_old(tmp_path: Path) -> None:
    """Shards built on Friday and merged on Monday, into a folder that holds a corpus: the
    merge commits them (it collected the build as abandoned before it chose one: data lost,
    and without ``build_id`` the old snapshot came back as if it were the new one)."""
    src, tok, dest = inputs(tmp_path), tmp_path / "t.json", tmp_path / "c"
    before = TokenCorpus.build(src, dest, tok, progress=False, append_eos=False)
    built = shards(src, dest, 2, tok)
    bid = built[0].build_id  # type: ignore[attr-defined]
    _age(dest / bid, 25 * 3600)
    merged = TokenCorpus.merge(dest)
    assert merged.meta["build_id"] == bid and merged.snapshot != before.snapshot
    one = TokenCorpus.build(src, tmp_path / "one", tok, progress=False)
    assert np.array_equal(np.asarray(merged.tokens), np.asarray(one.tokens))
    assert (dest / bid).is_dir()  # the snapshot's build stays


def test_shards_run_again_after_the_grace_take_their_build_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Back to earlier options once the snapshot that used them is past its grace: the
    shards run again are merged (the merge collected that build, a replaced snapshot's, as
    it took its lock, before it chose one, and kept the newer snapshot without a word)."""
    import time

    monkeypatch.setenv("LADING_SNAPSHOT_GRACE_S", "1")
    src, tok, dest = inputs(tmp_path), tmp_path / "t.json", tmp_path / "c"
    x = shards(src, dest, 2, tok)
    first = TokenCorpus.merge(dest)
    shards(src, dest, 2, tok, append_eos=False)
    TokenCorpus.merge(dest)
    time.sleep(1.5)  # past the grace: the first snapshot's folders may go
    again = shards(src, dest, 2, tok)
    assert again[0].build_id == x[0].build_id  # type: ignore[attr-defined]
    back = TokenCorpus.merge(dest)
    assert back.meta["build_id"] == first.meta["build_id"]
    assert np.array_equal(np.asarray(back.tokens), np.asarray(first.tokens))


def test_a_half_built_build_names_its_own_kinds_commands(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A token corpus's build with a shard missing, merged by `lading merge` (the stores'),
    said "Build each with `lading build SOURCE half --shard 1/2`": following it wrote a store's
    shard under another build. The message now names the commands of the build's own kind,
    whichever merge met it (and a store's half build, met by `lading lm merge`, the stores')."""
    src, tok = inputs(tmp_path), tmp_path / "t.json"
    half = tmp_path / "half"
    TokenCorpus.build_shard(src, half, (0, 2), tok, progress=False)
    import lading

    store = tmp_path / "store"
    lading.build_shard(src / "a.jsonl", store, (1, 3), progress=False)
    for dest, kind, missing in (
        (half, "lading lm", "1/2`"),
        (store, "lading", "I/3` for I in 0, 2"),
    ):
        for merge in (["merge"], ["lm", "merge"]):
            capsys.readouterr()
            assert main([*merge, str(dest)]) == 2
            said = capsys.readouterr().err
            assert f"`{kind} build SOURCE {dest} --shard {missing}" in said, said
            assert f"`{kind} merge {dest}`" in said, said


def test_a_build_missing_several_shards_names_the_command_for_each(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Shards 1 and 2 of 3 missing: the merge said "missing 1, 2. Build each with `... --shard
    1/3`", a command for the first alone; it now names the command with ``I`` and the shards
    ``I`` stands for."""
    src, tok = inputs(tmp_path), tmp_path / "t.json"
    dest = tmp_path / "third"
    TokenCorpus.build_shard(src, dest, (0, 3), tok, progress=False)
    assert main(["lm", "merge", str(dest)]) == 2
    said = capsys.readouterr().err
    assert "missing 1, 2" in said, said
    assert f"`lading lm build SOURCE {dest} --shard I/3` for I in 1, 2" in said, said
