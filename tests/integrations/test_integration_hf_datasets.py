"""HF datasets in and out: stores from a Dataset, a split, parquet and Arrow; groups exported."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

datasets = pytest.importorskip("datasets")

from integration_data import adi  # noqa: E402

pytestmark = pytest.mark.e2e  # a whole user path: see the e2e marker in pyproject.toml


def test_stores_from_a_dataset_a_split_parquet_and_arrow_agree(
    data_dir: Path, tmp_path: Path
) -> None:
    import lading
    from lading.integrations.hf_datasets import build_store

    docs = data_dir / "ir/normalized/vaswani/docs.jsonl"
    if not docs.is_file():
        pytest.skip(f"{docs} not found")
    data = datasets.Dataset.from_json(str(docs), cache_dir=str(tmp_path / "hf"))
    reference = lading.build_store(
        docs, tmp_path / "from-jsonl", parse=lading.ParseOptions(id_field="doc_id")
    )
    split = build_store(datasets.DatasetDict(train=data), tmp_path / "split", id_column="doc_id")
    data.to_parquet(str(tmp_path / "docs.parquet"))
    parquet = build_store(tmp_path / "docs.parquet", tmp_path / "parquet", id_column="doc_id")
    arrow_file = data.cache_files[0]["filename"]  # datasets' own cache: the Arrow stream format
    arrow = lading.build_store(
        arrow_file, tmp_path / "arrow", format="arrow", parse=lading.ParseOptions(id_field="doc_id")
    )
    assert len(reference) == 11429
    for store in (split, parquet, arrow):
        assert store.ids() == reference.ids()
        assert store.get_many(["1", "5000", "11429"]) == reference.get_many(["1", "5000", "11429"])
    # the same dataset again is reused, not rebuilt
    before = (tmp_path / "split" / "meta.json").stat().st_mtime_ns
    build_store(data, tmp_path / "split", id_column="doc_id")
    assert (tmp_path / "split" / "meta.json").stat().st_mtime_ns == before


def test_bad_columns_and_rows_are_named(tmp_path: Path) -> None:
    from lading.errors import SourceError
    from lading.integrations.hf_datasets import build_store

    data = datasets.Dataset.from_dict({"pid": ["a", None, "c"], "body": ["x", "y", "z"]})
    with pytest.raises(ValueError, match=r"no column 'id'.*\['pid', 'body'\]"):
        build_store(data, tmp_path / "s")
    with pytest.raises(SourceError, match="record 2: null id"):
        build_store(data, tmp_path / "s", id_column="pid", text_column="body")
    with pytest.warns(UserWarning, match="skipped 1"):
        store = build_store(
            data, tmp_path / "s", id_column="pid", text_column="body", on_error="skip"
        )
    assert store.ids() == ["a", "c"]
    with pytest.raises(ValueError, match="pass split="):
        build_store(datasets.DatasetDict(a=data, b=data), tmp_path / "t", id_column="pid")


@pytest.mark.parametrize("fmt", ["n-tuple", "triplet", "labeled-pair", "labeled-list"])
def test_groups_export_in_sentence_transformers_formats(
    fmt: str, data_dir: Path, tmp_path: Path
) -> None:
    from lading.integrations.hf_datasets import groups_to_dataset
    from lading.loading.map_workload import EpochIndex

    data = adi(data_dir, tmp_path)
    groups = data.groups(group_size=3)
    out = groups_to_dataset(groups, fmt, epoch=2, cache_dir=str(tmp_path / "hf"))
    rows_per_group = {"n-tuple": 1, "labeled-list": 1, "triplet": 2, "labeled-pair": 3}[fmt]
    assert len(out) == len(groups) * rows_per_group
    first = groups[EpochIndex(2, 0)]
    texts = data.store.get_many(first["doc_ids"])
    row = out[0]
    expected = {
        "n-tuple": {
            "query": first["query"],
            "positive": texts[0],
            "negative_1": texts[1],
            "negative_2": texts[2],
        },
        "triplet": {"anchor": first["query"], "positive": texts[0], "negative": texts[1]},
        "labeled-pair": {"query": first["query"], "passage": texts[0], "label": 1.0},
        "labeled-list": {"query": first["query"], "docs": texts, "labels": [1, 0, 0]},
    }[fmt]
    assert row == expected
    assert list(out.column_names) == list(expected)  # the order sentence-transformers reads


def test_a_store_exports_as_a_dataset_and_a_rebuild_is_seen(tmp_path: Path) -> None:
    """Ids, texts, fields and token ids in row order; the store's source rewritten and the
    store rebuilt, the export gives the new texts (not datasets' cached Arrow file)."""
    import lading
    from lading.integrations.hf_datasets import store_to_dataset
    from lading.stores.tokens import save_tokenizer, train_tokenizer

    source = tmp_path / "docs.jsonl"
    rows = [
        {"doc_id": f"d{i}", "title": f"title {i}", "text": f"text of doc {i}"} for i in range(2500)
    ]
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    texts = [r["text"] for r in rows]
    save_tokenizer(train_tokenizer(texts, "wordpiece", 200), tmp_path / "tok.json")
    store = lading.build_store(
        source,
        tmp_path / "store",
        parse=lading.ParseOptions(id_field="doc_id"),
        tokenizer=tmp_path / "tok.json",
    )
    cache = str(tmp_path / "hf")
    data = store_to_dataset(store, tokens=True, cache_dir=cache)
    assert data.column_names == ["id", "text", "title", "input_ids"]
    assert data["id"] == [r["doc_id"] for r in rows] and data["text"] == texts
    assert data[1234]["title"] == "title 1234"
    assert data[7]["input_ids"] == store.tokens("d7").tolist()
    assert store_to_dataset(store, cache_dir=cache).column_names == ["id", "text", "title"]

    rows[5]["text"] = "a new text"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    store = lading.build_store(
        source, tmp_path / "store", parse=lading.ParseOptions(id_field="doc_id")
    )
    assert store_to_dataset(store, cache_dir=cache)[5]["text"] == "a new text"
    with pytest.raises(ValueError, match="has no tokens"):
        store_to_dataset(store, tokens=True, cache_dir=cache)
