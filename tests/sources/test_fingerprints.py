"""A source edited in place, with its size kept, is seen: stores, token corpora, loader states.

The repro of the independent test: 20,000 lines ``i<TAB>document number i``, built, then 8
bytes of line 10,000 overwritten in place. The size and the first and last 64 KiB are as
before; only the modification time says the file changed.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import lading
from lading.errors import LoaderStateError


def edited_in_place(path: Path) -> None:
    """Overwrite 8 bytes of line 10,000's text, keeping the size (mtime moves on)."""
    data = path.read_bytes()
    at = data.index(b"10000\tdocument number 10000") + len(b"10000\t")
    stat = path.stat()
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(b"EDITED!!")
    # a filesystem with coarse timestamps may keep the old mtime within the same tick
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "docs.tsv"
    path.write_text("".join(f"{i}\tdocument number {i}\n" for i in range(20_000)))
    return path


def test_same_size_edit_makes_the_store_stale_and_rebuilt(source: Path, tmp_path: Path) -> None:
    lading.build_store(source, tmp_path / "s")
    edited_in_place(source)
    with pytest.warns(lading.StaleStoreWarning, match="modified"):
        store = lading.open_store(tmp_path / "s")
    assert store.stale is not None and "docs.tsv" in store.stale
    rebuilt = lading.build_store(source, tmp_path / "s")
    assert rebuilt["10000"] == "EDITED!! number 10000"
    assert rebuilt.stale is None


def test_same_size_edit_makes_the_offset_store_refuse(source: Path, tmp_path: Path) -> None:
    lading.OffsetStore.build(source, tmp_path / "o")
    edited_in_place(source)
    with pytest.raises(lading.StoreFormatError, match="stale"):
        lading.OffsetStore(tmp_path / "o")["1"]


def test_token_corpus_is_rebuilt_after_its_source_changed(source: Path, tmp_path: Path) -> None:
    from conftest import word_tokenizer
    from lading.lm import TokenCorpus

    words = ["document", "number", "EDITED!!", *(str(i) for i in range(20_000))]
    tok = word_tokenizer(words, tmp_path / "t.json")
    first = TokenCorpus.build(source, tmp_path / "c", tok, split="line")
    before = first.document(10_000).tolist()
    edited_in_place(source)
    again = TokenCorpus.build(source, tmp_path / "c", tok, split="line")
    assert again.document(10_000).tolist() != before  # tokenized again, not reused
    # unchanged: reused (the same files, not a new build)
    built_at = (tmp_path / "c" / "meta.json").stat().st_mtime_ns
    TokenCorpus.build(source, tmp_path / "c", tok, split="line")
    assert (tmp_path / "c" / "meta.json").stat().st_mtime_ns == built_at


def small_groups(tmp_path: Path, name: str, text: str) -> object:
    """Training groups over a 40-document store whose texts say ``text``."""
    from lading.ir import TrainingGroups

    src = tmp_path / f"{name}.tsv"
    src.write_text("".join(f"d{i}\t{text} {i}\n" for i in range(40)))
    store = lading.build_store(src, tmp_path / name)
    queries = {f"q{i}": f"query {i}" for i in range(20)}
    qrels = {f"q{i}": {f"d{i}": 1} for i in range(20)}
    return TrainingGroups(store, queries, qrels, group_size=3, sampling="random", seed=1)


def test_map_state_of_other_groups_of_the_same_length_is_refused(tmp_path: Path) -> None:
    from contracts import Numbers
    from lading.world import World

    first = lading.loader(small_groups(tmp_path, "a", "alpha"), 4, world=World(), collate_fn=list)
    next(iter(first))
    state = first.state_dict()
    other = lading.loader(small_groups(tmp_path, "b", "beta"), 4, world=World(), collate_fn=list)
    with pytest.raises(LoaderStateError, match=r"saved on the dataset .* this loader reads "):
        other.load_state_dict(state)
    same = lading.loader(small_groups(tmp_path, "c", "alpha"), 4, world=World(), collate_fn=list)
    same.load_state_dict(state)  # the same content in another directory resumes
    plain = lading.loader(Numbers(20), 4, world=World())  # no fingerprint: length only
    plain.load_state_dict(lading.loader(Numbers(20), 4, world=World()).state_dict())


def test_parquet_state_of_other_files_with_the_same_counts_is_refused(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from lading.tabular import PartitionedParquet
    from lading.world import World

    for name, offset in (("a", 0), ("b", 1000)):
        (tmp_path / name).mkdir()
        table = pa.table({"x": pa.array(range(offset, offset + 60), pa.int64())})
        pq.write_table(table, tmp_path / name / "part.parquet", row_group_size=20)

    def make(folder: str) -> object:
        return PartitionedParquet(tmp_path / folder, batch_size=4, world=World())

    state = make("a").state_dict()  # type: ignore[attr-defined]
    with pytest.raises(LoaderStateError, match="data="):
        make("b").load_state_dict(state)  # type: ignore[attr-defined]
    make("a").load_state_dict(state)  # type: ignore[attr-defined]


def test_groups_to_dataset_sees_a_rebuilt_store(tmp_path: Path) -> None:
    pytest.importorskip("datasets")
    from lading.integrations.hf_datasets import groups_to_dataset

    cache = str(tmp_path / "hf")
    old = groups_to_dataset(small_groups(tmp_path, "s", "alpha"), "triplet", cache_dir=cache)
    assert all("alpha" in row["positive"] for row in old)
    # the same path rebuilt with other texts: the cache must not hand back the old rows
    groups = small_groups(tmp_path, "s", "beta")
    new = groups_to_dataset(groups, "triplet", cache_dir=cache)
    assert all("beta" in row["positive"] for row in new)
    again = groups_to_dataset(groups, "triplet", cache_dir=cache)
    assert again.cache_files == new.cache_files  # the same snapshot: the cached file is reused


def test_a_hostile_recorded_size_is_said_in_one_line(tmp_path: Path) -> None:
    """A manifest whose recorded size was a newline made the stale store's refusal two lines
    (the hostile-manifest fuzz, LADING_FUZZ_SEED=3030156583, in a full run): the recorded
    value is quoted as Python writes it."""
    from lading.sources.fingerprint import fingerprint, fingerprint_changed

    path = tmp_path / "docs.tsv"
    path.write_text("1\ta\n")
    recorded = {**fingerprint(str(path)), "size": "\n"}
    said = fingerprint_changed(recorded)
    assert said is not None and "\n" not in said and "was '\\n' at build time" in said, said
