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


def test_a_table_with_two_id_columns_is_read_only_where_they_agree(tmp_path: Path) -> None:
    """MS MARCO v2's passages in a table: ``docid`` (their document's, shared) and ``pid``
    (their own). The first default present was taken silently: every passage of a document
    got its document's id. Now a row where they differ is refused naming both and the fix;
    columns that say the same id read as one."""
    v2 = parquet(tmp_path / "v2.parquet", docid=["D1", "D1"], pid=["P1", "P2"], text=["a", "b"])
    with pytest.raises(
        SourceError,
        match=r"v2\.parquet: row 1: two id fields differ: 'docid' is 'D1' "
        r"and 'pid' is 'P1'; .*id_field='pid'",
    ):
        lading.build_store(v2, tmp_path / "s", progress=False)
    named = lading.build_store(
        v2, tmp_path / "p", parse=lading.ParseOptions(id_field="pid"), progress=False
    )
    assert named.get_many(["P1", "P2"]) == ["a", "b"]
    same = parquet(tmp_path / "same.parquet", id=[1, 2], docid=["1", "2"], text=["a", "b"])
    assert lading.build_store(same, tmp_path / "q", progress=False).get_many(["1", "2"]) == [
        "a",
        "b",
    ]


def test_an_id_column_also_kept_as_a_field_is_compared_by_its_name(tmp_path: Path) -> None:
    """Parquet reads a column asked for twice once: with ``docid`` kept as a field too, the
    check of the other id columns paired names with the wrong values (a row of ``id`` P1
    and ``docid`` D1 read silently; another named the wrong column in its fix)."""
    v2 = parquet(tmp_path / "v2.parquet", id=["P1"], docid=["D1"], text=["a"])
    with pytest.raises(SourceError, match=r"'id' is 'P1' and 'docid' is 'D1'"):
        lading.build_store(
            v2, tmp_path / "s", parse=lading.ParseOptions(keep_fields=("docid",)), progress=False
        )
    three = parquet(tmp_path / "t.parquet", id=["a"], docid=["a"], pid=["Z"], text=["x"])
    with pytest.raises(SourceError, match=r"'id' is 'a' and 'pid' is 'Z'; .*id_field='pid'"):
        lading.build_store(
            three, tmp_path / "t", parse=lading.ParseOptions(keep_fields=("docid",)), progress=False
        )
