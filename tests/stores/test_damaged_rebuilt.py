"""A damaged store, token corpus or shard is built again by the command its error names.

Found by a review (2026-12-07): a store whose ``text.bin`` was cut said "... is 1216478 bytes,
expected 1216488 ...; rebuild the store with `lading build`", and `lading build` with the same
source reused the damaged snapshot (the reuse read ``meta.json`` alone) and failed the same
way; a shard worker run again over a cut shard said "already built", and the merge then
refused the shard with no fix."""

from __future__ import annotations

from pathlib import Path

import pytest

import lading
from conftest import word_tokenizer, write
from lading.errors import StoreFormatError
from lading.lm import TokenCorpus

WORDS = ["alpha", "beta", "gamma", "delta"]


def _source(tmp_path: Path, docs: int = 200) -> Path:
    lines = (
        f"d{i}\t{' '.join(WORDS[(i + k) % 4] for k in range(i % 5 + 1))}\n" for i in range(docs)
    )
    return write(tmp_path / "c.tsv", "".join(lines))


def _cut(root: Path, name: str, by: int = 10) -> None:
    """Cut ``by`` bytes off the one file ``name`` under ``root`` (a damaged disk, a bad copy)."""
    (path,) = [p for p in root.rglob(name) if p.is_file()]
    data = path.read_bytes()
    path.write_bytes(data[:-by])


def test_a_store_built_again_over_its_damaged_snapshot_is_rebuilt(tmp_path: Path) -> None:
    src = _source(tmp_path)
    want = lading.build_store(src, tmp_path / "one", progress=False)
    ids = want.ids()
    lading.build_store(src, tmp_path / "s", progress=False)
    _cut(tmp_path / "s", "text.bin")
    with pytest.raises(StoreFormatError, match="rebuild"):
        lading.open_store(tmp_path / "s")
    again = lading.build_store(src, tmp_path / "s", progress=False)  # as the error says
    assert again.get_many(ids) == want.get_many(ids)


def test_a_token_corpus_built_again_over_its_damaged_snapshot_is_rebuilt(tmp_path: Path) -> None:
    src = write(tmp_path / "c.txt", "".join(f"{w} {w} beta\n\n" for w in WORDS * 20))
    tok = word_tokenizer(WORDS, tmp_path / "tok.json")
    want = TokenCorpus.build(src, tmp_path / "one", tok, progress=False)
    TokenCorpus.build(src, tmp_path / "c", tok, progress=False)
    _cut(tmp_path / "c", "tokens.bin", by=4)
    with pytest.raises(StoreFormatError):
        TokenCorpus.open(tmp_path / "c")
    again = TokenCorpus.build(src, tmp_path / "c", tok, progress=False)
    assert again.tokens[:].tolist() == want.tokens[:].tolist()


def test_a_damaged_shard_is_built_again_by_its_worker_run_again(tmp_path: Path) -> None:
    src = _source(tmp_path)
    want = lading.build_store(src, tmp_path / "one", progress=False)
    ids = want.ids()
    for i in range(2):
        lading.build_shard(src, tmp_path / "s", (i, 2), progress=False)
    (shard,) = [p for p in (tmp_path / "s").rglob("shard-00001-of-00002") if p.is_dir()]
    _cut(shard, "text.bin")
    with pytest.raises(StoreFormatError, match="build that shard again"):
        lading.merge_store(tmp_path / "s")
    report = lading.build_shard(src, tmp_path / "s", (1, 2), progress=False)
    assert not report.reused  # it was "already built" before
    assert lading.merge_store(tmp_path / "s").get_many(ids) == want.get_many(ids)


def test_a_damaged_token_shard_is_built_again_by_its_worker_run_again(tmp_path: Path) -> None:
    src = write(tmp_path / "c.jsonl", "".join(f'{{"text": "{w} beta {w}"}}\n' for w in WORDS * 30))
    tok = word_tokenizer(WORDS, tmp_path / "tok.json")
    want = TokenCorpus.build(src, tmp_path / "one", tok, progress=False)
    for i in range(2):
        TokenCorpus.build_shard(src, tmp_path / "c", (i, 2), tok, progress=False)
    (shard,) = [p for p in (tmp_path / "c").rglob("shard-00001-of-00002") if p.is_dir()]
    _cut(shard, "tokens.bin", by=4)
    report = TokenCorpus.build_shard(src, tmp_path / "c", (1, 2), tok, progress=False)
    assert not report.reused
    assert TokenCorpus.merge(tmp_path / "c").tokens[:].tolist() == want.tokens[:].tolist()


def test_a_shard_with_every_file_gone_is_built_again(tmp_path: Path) -> None:
    """Its ``shard.json`` alone left: the worker run again took it for whole (a bucket's
    record copied down looked the same) and the merge refused it again and again."""
    src = _source(tmp_path)
    want = lading.build_store(src, tmp_path / "one", progress=False)
    for i in range(2):
        lading.build_shard(src, tmp_path / "s", (i, 2), progress=False)
    (shard,) = [p for p in (tmp_path / "s").rglob("shard-00001-of-00002") if p.is_dir()]
    for path in shard.iterdir():
        if path.name != "shard.json":
            path.unlink()
    assert not lading.build_shard(src, tmp_path / "s", (1, 2), progress=False).reused
    assert lading.merge_store(tmp_path / "s").get_many(want.ids()) == want.get_many(want.ids())


@pytest.mark.slow  # shards built twice in the local S3: ~3 s
def test_a_shard_damaged_in_a_bucket_is_built_again(bucket: str, tmp_path: Path) -> None:
    """An object of a shard in a bucket deleted: the worker run again said "already built"
    (it judged the shard by its shard.json alone) and the merge refused it."""
    from lading.remote.clients import open_client

    src = _source(tmp_path)
    want = lading.build_store(src, tmp_path / "one", progress=False)
    url = f"s3://{bucket}/damaged"
    for i in range(2):
        lading.build_shard(src, url, (i, 2), cache=tmp_path / "w", progress=False)
    client = open_client(url)
    (key,) = [k for k in client.list() if "shard-00001-of-00002/text.bin" in k]
    client.delete(key)
    with pytest.raises(StoreFormatError):
        lading.merge_store(url, cache=tmp_path / "m")
    report = lading.build_shard(src, url, (1, 2), cache=tmp_path / "w2", progress=False)
    assert not report.reused
    merged = lading.merge_store(url, cache=tmp_path / "m2")
    assert merged.get_many(want.ids()) == want.get_many(want.ids())


def _zero(root: Path, name: str, at: float, size: int) -> None:
    """Zero ``size`` bytes of the one file ``name`` under ``root`` at ``at`` of its length."""
    (path,) = [p for p in root.rglob(name) if p.is_file()]
    data = bytearray(path.read_bytes())
    start = int(len(data) * at)
    data[start : start + size] = bytes(size)
    path.write_bytes(bytes(data))


def test_a_store_its_open_refuses_is_built_again_not_reused(tmp_path: Path) -> None:
    """Zeroed offsets in the middle of ``text.off`` (sizes and end pages intact): the open
    refused ("offsets out of order ... rebuild the store"), and a build with the same source
    reused the snapshot and failed the same way (a review, 2026-12-08)."""
    src = _source(tmp_path, docs=2_000)  # text.off of 16 KB: its middle is past the end pages
    want = lading.build_store(src, tmp_path / "one", progress=False)
    ids = want.ids()
    lading.build_store(src, tmp_path / "s", progress=False)
    _zero(tmp_path / "s", "text.off", 0.5, 24)
    with pytest.raises(StoreFormatError, match="rebuild"):
        lading.open_store(tmp_path / "s")
    again = lading.build_store(src, tmp_path / "s", progress=False)  # as the error says
    assert again.get_many(ids) == want.get_many(ids)


def test_damage_only_a_full_check_sees_names_the_rebuild_that_replaces_it(tmp_path: Path) -> None:
    """A flipped bit in the middle of ``text.bin`` opens (an open checks sizes and the end
    pages, not every byte), and a build of the same source reuses the snapshot: ``lading
    verify`` said "rebuild the store with `lading build`", which reused it (exit 0, the
    damaged text served on). The fix it names now is ``--overwrite``, which rebuilds."""
    from lading.stores import verify_store

    src = _source(tmp_path, docs=2_000)
    want = lading.build_store(src, tmp_path / "one", progress=False)
    ids = want.ids()
    lading.build_store(src, tmp_path / "s", progress=False)
    (text,) = [p for p in (tmp_path / "s").rglob("text.bin") if p.is_file()]
    data = bytearray(text.read_bytes())
    data[len(data) // 2] ^= 0x20
    text.write_bytes(bytes(data))
    problems = verify_store(tmp_path / "s")
    assert problems and all("--overwrite" in p for p in problems), problems
    again = lading.build_store(src, tmp_path / "s", progress=False, overwrite=True)
    assert again.get_many(ids) == want.get_many(ids) and not verify_store(tmp_path / "s")


def test_a_token_corpus_its_open_refuses_is_built_again_not_reused(tmp_path: Path) -> None:
    """As for a store: zeroed offsets in the middle of ``tokens.off`` (past the end pages an
    open checks the checksum of): the open refuses, so a build of the same source rebuilds."""
    src = write(tmp_path / "c.txt", "".join(f"{w} {w} beta\n\n" for w in WORDS * 800))
    tok = word_tokenizer(WORDS, tmp_path / "tok.json")
    want = TokenCorpus.build(src, tmp_path / "one", tok, progress=False)
    TokenCorpus.build(src, tmp_path / "c", tok, progress=False)
    _zero(tmp_path / "c", "tokens.off", 0.5, 24)
    with pytest.raises(StoreFormatError, match=r"(?i)rebuild"):
        TokenCorpus.open(tmp_path / "c")
    again = TokenCorpus.build(src, tmp_path / "c", tok, progress=False)
    assert again.tokens[:].tolist() == want.tokens[:].tolist()
