"""Fixes from a review of stores: a merge after its own shards ran again never commits another
pipeline's leftover build (and the shard line names the build to merge), and a tokenizer whose
ids run past its entry count is stored in a dtype its ids fit."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

import lading
from conftest import write
from lading.cli import main
from lading.errors import StoreFormatError


def tsv(path: Path, tag: str, n: int = 40) -> Path:
    return write(path, "".join(f"{i}\t{tag}{i}\n" for i in range(n)))


def shards(src: Path, dest: Path, n: int = 2) -> str:
    reports = [lading.build_shard(src, dest, (i, n), progress=False) for i in range(n)]
    return reports[0].build_id


def test_a_pipeline_run_again_never_merges_another_pipelines_leftover_build(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Pipeline A (shards, merge), pipeline B (shards; its merge never ran), pipeline A
    again: A's shards are found whole, and its merge must not commit B's build. Two builds
    whose shards ran since the current commit: the merge refuses, naming both; naming A's
    build (as the shard line says) commits nothing new."""
    dest, a_src, b_src = (
        tmp_path / "store",
        tsv(tmp_path / "a.tsv", "A"),
        tsv(tmp_path / "b.tsv", "B"),
    )
    a = shards(a_src, dest)
    first = lading.merge_store(dest)
    assert first["0"] == "A0"
    b = shards(b_src, dest)  # its merge never runs (cancelled, failed)
    assert shards(a_src, dest) == a  # A's workers again: "already built"
    with pytest.raises(StoreFormatError) as caught:
        lading.merge_store(dest)
    said = str(caught.value)
    assert a in said and b in said and "--build-id" in said, said
    assert lading.open_store(dest).snapshot == first.snapshot  # nothing committed
    kept = lading.merge_store(dest, build_id=a)  # the pipeline names its own build
    assert kept.snapshot == first.snapshot and kept["0"] == "A0"
    assert main(["merge", str(dest)]) != 0  # the command refuses too
    assert b in capsys.readouterr().err
    # B named: committed; A's pipeline run again then takes A back (its shards ran after)
    assert lading.merge_store(dest, build_id=b)["0"] == "B0"
    shards(a_src, dest)
    assert lading.merge_store(dest)["0"] == "A0"


def test_shards_of_the_current_build_run_again_merge_as_nothing_new(tmp_path: Path) -> None:
    """Only the current build's shards ran again (a retried pipeline): the merge is a no-op."""
    dest, src = tmp_path / "store", tsv(tmp_path / "a.tsv", "A")
    a = shards(src, dest)
    first = lading.merge_store(dest)
    assert shards(src, dest) == a
    again = lading.merge_store(dest)
    assert again.snapshot == first.snapshot and again.meta["build_id"] == a


def test_the_shard_line_names_the_build_to_merge(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``lading build ... --shard i/N`` ends with the merge that commits this build (and no
    other one left in the folder): ``lading merge DEST --build-id <bid>``."""
    dest, src = tmp_path / "store", tsv(tmp_path / "a.tsv", "A")
    assert main(["build", str(src), str(dest), "--shard", "0/2", "--quiet"]) == 0
    out = capsys.readouterr().out.strip()
    bid = lading.build_shard(src, dest, (1, 2), progress=False).build_id
    assert out.endswith(f"once all 2 are built: lading merge {dest} --build-id {bid}"), out


@pytest.fixture
def gap_tokenizer(tmp_path: Path) -> Path:
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import models, pre_tokenizers

    vocab = {"[UNK]": 0, "hello": 1, "world": 70000}
    tok = tokenizers.Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    path = tmp_path / "tok.json"
    tok.save(str(path))
    return path


def test_a_tokenizer_with_ids_past_its_entry_count_gets_a_dtype_they_fit(
    tmp_path: Path, gap_tokenizer: Path
) -> None:
    """Three entries, an id of 70,000: uint32, not uint16 (which failed: "id 70000 of list 0
    does not fit 2 bytes"); its vocab_size is what an embedding needs (largest id + 1)."""
    src = write(tmp_path / "d.tsv", "1\thello world\n2\tworld\n")
    store = lading.build_store(src, tmp_path / "s", tokenizer=gap_tokenizer, progress=False)
    assert store.token_info is not None
    assert store.token_info["dtype"] == "<u4" and store.token_info["vocab_size"] == 70001
    assert store.tokens("1").tolist() == [1, 70000] and store.tokens("2").tolist() == [70000]
    for i in range(2):
        lading.build_shard(src, tmp_path / "sh", (i, 2), tokenizer=gap_tokenizer, progress=False)
    assert lading.merge_store(tmp_path / "sh").tokens("1").tolist() == [1, 70000]


def test_describe_tokenizer_keeps_a_plain_tokenizers_record(tmp_path: Path) -> None:
    """A tokenizer without gaps records what it did (its sha256 of its definition, its entry
    count): stores built with it keep their identity."""
    pytest.importorskip("tokenizers")
    from lading.stores.tokens import describe_tokenizer, train_tokenizer

    tok = train_tokenizer([f"doc {i} words here" for i in range(50)], "wordpiece", 200)
    info = describe_tokenizer(tok)
    assert info == {
        "vocab_size": tok.get_vocab_size(with_added_tokens=True),
        "sha256": hashlib.sha256(tok.to_str().encode("utf-8")).hexdigest(),
    }
