"""Parquet and Arrow sources keep the JSONL rules for the values they hold: an id is a string
or an integer, a kept field a string (or null: absent). Before, a float, bool or list id was
stored as its Python ``str()`` (``"1.0"``: ``get("1")`` and ``get(1)`` missed the document
pandas wrote for id 1 in a column that held a NaN), and a non-string field was dropped from
every row without a count."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import lading
from lading.errors import SourceError

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def parquet(path: Path, **columns: Any) -> Path:
    pq.write_table(pa.table(columns), path)
    return path


@pytest.mark.parametrize(
    "ids, shown",
    [([1.0, 2.0], "1.0"), ([True, False], "True"), ([[1, 2], [3]], r"\[1, 2\]")],
)
def test_an_id_that_is_neither_a_string_nor_an_integer_is_refused_or_counted(
    tmp_path: Path, ids: list[Any], shown: str
) -> None:
    src = parquet(tmp_path / "d.parquet", id=ids, text=["a", "b"])
    with pytest.raises(
        SourceError, match=rf"d\.parquet.*must be a string or an integer, found {shown}"
    ):
        lading.build_store(src, tmp_path / "s", progress=False)
    with pytest.raises(SourceError, match=r"every record was skipped \(2; "):
        lading.build_store(src, tmp_path / "k", on_error="skip", progress=False)


def test_integer_and_string_ids_are_kept(tmp_path: Path) -> None:
    store = lading.build_store(
        parquet(tmp_path / "d.parquet", id=[7, 8], text=["a", "b"]), tmp_path / "s", progress=False
    )
    assert store.get_many(["7", "8"]) == ["a", "b"]


def test_a_kept_field_that_is_not_a_string_is_refused_and_a_null_one_is_absent(
    tmp_path: Path,
) -> None:
    src = parquet(tmp_path / "d.parquet", id=["1", "2"], text=["a", "b"], title=[10, 20])
    with pytest.raises(SourceError, match=r"field 'title' must be a string, found 10"):
        lading.build_store(src, tmp_path / "s", progress=False)
    nulls = parquet(tmp_path / "n.parquet", id=["1", "2"], text=["a", "b"], title=["t", None])
    store = lading.build_store(nulls, tmp_path / "n", progress=False)
    assert store.record("1").fields == {"title": "t"}
    assert store.record("2").fields == {"title": ""}  # absent, as a JSONL line without it
