"""Acceptance: every document of real collections round-trips exactly through every store."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import lading
from lading.sources import read_records
from lading.stores.layout import column_bytes

pytestmark = pytest.mark.data

COLLECTIONS = [
    "ir/normalized/msmarco-passage-trecdl1920-pool/docs.tsv",
    "ir/normalized/vaswani/docs.jsonl",
    "ir/raw/vaswani/doc-text.trec",
]


@pytest.mark.parametrize("relative", COLLECTIONS)
def test_round_trip_through_every_store(data_dir: Path, tmp_path: Path, relative: str) -> None:
    source = data_dir / relative
    expected = {r.id: r.text for r in read_records(source)}
    assert len(expected) > 10_000
    stores: list[lading.DocStore] = [
        lading.build_store(source, tmp_path / "packed", progress=False),
        lading.InMemoryStore.from_source(source),
        lading.OffsetStore.build(source, tmp_path / "offsets"),
    ]
    if source.suffix == ".tsv":
        pytest.importorskip("ir_datasets")
        copy = shutil.copy(source, tmp_path / "docs.tsv")  # ir_datasets writes beside its file
        stores.append(lading.IrDatasetsStore.from_tsv(copy))
    ids = list(expected)
    for store in stores:
        assert len(store) == len(expected), store
        assert sorted(store.ids()) == sorted(ids), store
        for lo in range(0, len(ids), 1000):
            chunk = ids[lo : lo + 1000]
            assert store.get_many(chunk) == [expected[i] for i in chunk], store


def test_msmarco_pool_index_and_sizes(data_dir: Path, tmp_path: Path) -> None:
    source = data_dir / COLLECTIONS[0]
    store = lading.build_store(source, tmp_path / "s", progress=False)
    assert store.meta["index"]["kind"] == "sorted-int"  # 28,606 ids spread over 0..8.8M
    assert column_bytes(store.meta, "text") + len(store) * 8 < source.stat().st_size
    assert "Wi-Fi or WiFi" in store["421"]


def test_real_qrels_ids_are_found(data_dir: Path, tmp_path: Path) -> None:
    pool = data_dir / "ir/normalized/msmarco-passage-trecdl1920-pool"
    store = lading.build_store(pool / "docs.tsv", tmp_path / "s", progress=False)
    judged = [line.split()[2] for line in (pool / "qrels.in_pool.txt").read_text().splitlines()]
    assert len(judged) > 9000
    assert len(store.get_many(judged)) == len(judged)


@pytest.mark.slow  # tokenizes the real passages: ~12 s
def test_pretokenized_real_passages(data_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("tokenizers")
    from lading.stores.tokens import train_tokenizer

    source = data_dir / COLLECTIONS[0]
    tok = train_tokenizer([r.text for r in read_records(source)], "wordpiece", 8000)
    store = lading.build_store(
        source, tmp_path / "s", tokenizer=tok, max_length=256, progress=False
    )
    ids = store.ids()[::97]
    want = [e.ids[:256] for e in tok.encode_batch(store.get_many(ids), add_special_tokens=False)]
    assert [t.tolist() for t in store.tokens_many(ids)] == want
