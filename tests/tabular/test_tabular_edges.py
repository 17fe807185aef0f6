"""Bad parquet and bad paths: nulls, differing schemas, empty inputs, repartition into itself.

Each case must fail when the dataset opens (or the command starts), with a message naming the
file, the place and the fix, instead of a KeyError mid-epoch or a silent change of dtype/rows.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from lading.cli import main
from lading.tabular import PartitionedParquet, repartition
from lading.world import World

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

ONE = World(0, 1)


def write(path: Path, columns: dict[str, Any], row_group_size: int | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), path, row_group_size=row_group_size)
    return path


def sessions(rows: int, start: int = 0) -> dict[str, Any]:
    ids = np.arange(start, start + rows)
    return {
        "session_id": pa.array(ids, pa.int64()),
        "items": pa.array([[int(i), int(i) + 1] for i in ids], pa.list_(pa.int64())),
    }


def read_all(ds: PartitionedParquet) -> list[dict[str, Any]]:
    return list(ds)


# ---------------------------------------------------------------- 1. nulls


def test_a_null_item_inside_an_int_list_is_refused_not_turned_into_nan(tmp_path: Path) -> None:
    items = pa.array([[1, 2], [3, 4], [5, None], [7]], pa.list_(pa.int64()))
    path = write(
        tmp_path / "s.parquet",
        {"session_id": pa.array([0, 1, 2, 3], pa.int64()), "items": items},
        row_group_size=2,
    )
    ds = PartitionedParquet(path, batch_size=4, list_columns={"items": 3}, world=ONE)
    with pytest.raises(ValueError) as e:
        got = read_all(ds)
        # what the old code did: the whole column became float64 with a NaN
        pytest.fail(f"read {[b['items'].dtype for b in got]} instead of refusing")
    message = str(e.value)
    assert str(path) in message and "row group 1" in message and "'items'" in message
    assert "row 2 of the file" in message  # the third row: [5, None]
    assert "fill_null" in message


def test_a_null_int_is_refused_when_the_dataset_opens(tmp_path: Path) -> None:
    path = write(
        tmp_path / "s.parquet",
        {"session_id": pa.array([0, 1, 2, None, 4, 5], pa.int64())},
        row_group_size=3,
    )
    # the footer's statistics count the null: refused before the first batch, not mid-epoch
    with pytest.raises(ValueError) as e:
        PartitionedParquet(path, batch_size=6, shuffle=False, world=ONE)
    message = str(e.value)
    assert str(path) in message and "row group 1" in message and "'session_id'" in message
    assert "row 3 of the file" in message and "fill_null" in message


def test_a_null_int_without_statistics_is_refused_when_read(tmp_path: Path) -> None:
    path = tmp_path / "s.parquet"
    table = pa.table({"session_id": pa.array([0, 1, 2, None, 4, 5], pa.int64())})
    pq.write_table(table, path, row_group_size=3, write_statistics=False)
    ds = PartitionedParquet(path, batch_size=6, shuffle=False, world=ONE)
    with pytest.raises(ValueError, match=r"row group 1, row 0 of it \(row 3 of the file\)"):
        read_all(ds)


def test_empty_lists_are_not_nulls(tmp_path: Path) -> None:
    items = pa.array([[1], [], [2, 3]], pa.list_(pa.int64()))
    path = write(tmp_path / "s.parquet", {"items": items})
    ds = PartitionedParquet(path, batch_size=3, list_columns={"items": 2}, shuffle=False, world=ONE)
    (batch,) = read_all(ds)
    assert batch["items"].dtype == torch.int64 and batch["items_lengths"].tolist() == [1, 0, 2]


def test_a_null_list_is_refused(tmp_path: Path) -> None:
    items = pa.array([[1], None, [3]], pa.list_(pa.int64()))
    path = write(tmp_path / "s.parquet", {"items": items})
    ds = PartitionedParquet(path, batch_size=3, list_columns={"items": 2}, world=ONE)
    with pytest.raises(ValueError, match=r"row 1 of the file.*'items'"):
        read_all(ds)


def test_nulls_in_a_column_not_read_are_fine(tmp_path: Path) -> None:
    path = write(
        tmp_path / "s.parquet",
        {**sessions(4), "other": pa.array([1, None, 3, None], pa.int64())},
    )
    ds = PartitionedParquet(path, columns=["session_id"], batch_size=4, shuffle=False, world=ONE)
    (batch,) = read_all(ds)
    assert batch["session_id"].dtype == torch.int64
    assert batch["session_id"].tolist() == [0, 1, 2, 3]


# ---------------------------------------------------------------- 2. schemas


def test_files_with_different_columns_are_refused_when_the_dataset_opens(tmp_path: Path) -> None:
    first = write(tmp_path / "d" / "a.parquet", {"a": pa.array([1, 2], pa.int64())})
    other = write(
        tmp_path / "d" / "b.parquet",
        {"a": pa.array([3], pa.int64()), "b": pa.array([4], pa.int64())},
    )
    # the old code read the columns of a.parquet, then failed mid-epoch with a KeyError
    with pytest.raises(ValueError) as e:
        PartitionedParquet(tmp_path / "d", columns=["a", "b"], batch_size=1, world=ONE)
    message = str(e.value)
    assert str(first) in message and str(other) in message and "'b'" in message
    assert "columns=" in message


def test_files_with_a_different_type_are_refused_naming_both_types(tmp_path: Path) -> None:
    first = write(tmp_path / "d" / "a.parquet", {"a": pa.array([1, 2], pa.int64())})
    other = write(tmp_path / "d" / "b.parquet", {"a": pa.array([1.5], pa.float64())})
    with pytest.raises(ValueError) as e:
        PartitionedParquet(tmp_path / "d", batch_size=1, world=ONE)
    message = str(e.value)
    assert str(first) in message and str(other) in message
    assert "'a'" in message and "int64" in message and "double" in message


def test_a_column_missing_from_a_later_file_is_refused(tmp_path: Path) -> None:
    write(tmp_path / "d" / "a.parquet", {"a": pa.array([1], pa.int64()), "b": pa.array([2])})
    write(tmp_path / "d" / "b.parquet", {"a": pa.array([3], pa.int64())})
    with pytest.raises(ValueError, match=r"b\.parquet.*'b'"):
        PartitionedParquet(tmp_path / "d", batch_size=1, world=ONE)


def test_only_the_columns_read_must_agree(tmp_path: Path) -> None:
    write(tmp_path / "d" / "a.parquet", {"a": pa.array([1, 2], pa.int64()), "x": ["s", "t"]})
    write(tmp_path / "d" / "b.parquet", {"a": pa.array([3], pa.int64()), "y": [1.0]})
    ds = PartitionedParquet(tmp_path / "d", columns=["a"], batch_size=3, shuffle=False, world=ONE)
    assert sorted(int(v) for b in ds for v in b["a"]) == [1, 2, 3]


def test_repartition_names_the_differing_column(tmp_path: Path) -> None:
    write(tmp_path / "d" / "a.parquet", {"a": pa.array([1], pa.int64())})
    write(tmp_path / "d" / "b.parquet", {"a": pa.array([1], pa.int32())})
    with pytest.raises(ValueError, match=r"b\.parquet.*'a'.*int32"):
        repartition(tmp_path / "d", tmp_path / "out")


def test_repartition_names_no_columns_option_it_does_not_have(tmp_path: Path) -> None:
    """`lading repartition` of files whose columns differ advised "or read only the columns
    they share (columns=[...])": repartition has no such option (it keeps every column)."""
    write(tmp_path / "d" / "a.parquet", {"a": pa.array([1], pa.int64()), "b": [2]})
    write(tmp_path / "d" / "b.parquet", {"a": pa.array([1], pa.int64())})
    with pytest.raises(ValueError, match=r"b\.parquet.*'b' is missing") as refused:
        repartition(tmp_path / "d", tmp_path / "out")
    assert "columns=" not in str(refused.value), refused.value
    with pytest.raises(ValueError, match=r"columns=\[\.\.\.\]"):  # the loader has it
        PartitionedParquet(tmp_path / "d", 4, world=ONE)


@pytest.mark.parametrize(
    ("kind", "listed", "says"),
    [
        (pa.list_(pa.list_(pa.int64())), False, r"items \(list<\w+: int64>\) are not numbers"),
        (pa.list_(pa.list_(pa.int64())), True, r"items \(list<\w+: int64>\) are not numbers"),
        (pa.list_(pa.int64(), 2), False, r"a fixed-size list"),
        (pa.list_(pa.int64(), 2), True, r"a fixed-size list"),
    ],
)
def test_a_list_column_no_tensor_holds_is_refused_once_in_words(
    tmp_path: Path, kind: Any, listed: bool, says: str
) -> None:
    """A list of lists was told "give its max_len in list_columns={...}", then, given it,
    "... are not numbers or bools, so it and cannot become a tensor"; a fixed-size list in
    list_columns was "not a list; drop it from list_columns", then, dropped, "cannot become
    a tensor". Each is refused once, in a sentence, whatever list_columns says."""
    values = [[[1], [2, 3]], [[4], [5]]] if pa.types.is_list(kind.value_type) else [[1, 2], [3, 4]]
    write(tmp_path / "d" / "a.parquet", {"nn": pa.array(values, kind), "id": [1, 2]})
    with pytest.raises(ValueError, match=says) as refused:
        PartitionedParquet(tmp_path / "d", 2, list_columns={"nn": 3} if listed else None, world=ONE)
    said = str(refused.value)
    assert "list_columns=" not in said and "so it and" not in said, said
    assert "leave it out of columns=" in said, said


def test_a_bool_pad_value_for_an_int_list_is_refused(tmp_path: Path) -> None:
    """pad_value=True padded an int list with 1, unsaid (-1.5 is refused)."""
    write(tmp_path / "d" / "a.parquet", sessions(3))
    with pytest.raises(ValueError, match=r"pad_value=True does not fit list column 'items'"):
        PartitionedParquet(tmp_path / "d", 2, list_columns={"items": 3}, pad_value=True, world=ONE)


# ---------------------------------------------------------------- empty inputs


def test_a_folder_without_parquet_is_named(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "notes.txt").write_text("not parquet")
    with pytest.raises(ValueError, match=rf"no \*\.parquet files in {tmp_path / 'd'}\b"):
        PartitionedParquet(tmp_path / "d", 4, world=ONE)


def test_parquet_files_without_rows_are_a_clear_error(tmp_path: Path) -> None:
    """loaders.md names an empty source among the settings that raise EmptyEpochError: a
    folder of files without rows raised a ParquetError only, which an ``except
    EmptyEpochError`` missed (a review's find). It is both."""
    from lading.errors import EmptyEpochError, ParquetError

    write(tmp_path / "d" / "a.parquet", sessions(0))
    with pytest.raises(EmptyEpochError, match=r"no rows.*a\.parquet") as caught:
        PartitionedParquet(tmp_path / "d", 4, list_columns={"items": 2}, world=ONE)
    assert isinstance(caught.value, ParquetError)
    with pytest.raises(ValueError, match=r"no rows.*a\.parquet"):
        repartition(tmp_path / "d", tmp_path / "out")


def test_an_empty_file_beside_full_ones_is_skipped(tmp_path: Path) -> None:
    write(tmp_path / "d" / "a.parquet", sessions(0))
    write(tmp_path / "d" / "b.parquet", sessions(3))
    ds = PartitionedParquet(tmp_path / "d", list_columns={"items": 2}, batch_size=3, world=ONE)
    assert sorted(int(v) for b in ds for v in b["session_id"]) == [0, 1, 2]


def test_a_zero_byte_parquet_file_is_named(tmp_path: Path) -> None:
    write(tmp_path / "d" / "a.parquet", sessions(3))
    (tmp_path / "d" / "b.parquet").write_bytes(b"")
    with pytest.raises(ValueError, match=r"b\.parquet.*not a parquet file"):
        PartitionedParquet(tmp_path / "d", 4, list_columns={"items": 2}, world=ONE)


def test_a_damaged_data_page_is_named_with_its_file_and_row_group(tmp_path: Path) -> None:
    """A file whose footer is whole but one data page is not fails mid-epoch naming the file,
    the row group and the fix, as the same bytes from a bucket do (was: pyarrow's bare
    "Couldn't deserialize thrift")."""
    folder = tmp_path / "d"
    path = write(folder / "b.parquet", {"session_id": np.arange(200)}, row_group_size=50)
    data = bytearray(path.read_bytes())
    start = pq.ParquetFile(path).metadata.row_group(2).column(0).data_page_offset
    data[start + 20 : start + 60] = bytes(b ^ 0xFF for b in data[start + 20 : start + 60])
    path.write_bytes(bytes(data))
    ds = PartitionedParquet(folder, 32, shuffle=False, world=ONE)
    with pytest.raises(ValueError) as caught:
        for _ in ds:
            pass
    text = str(caught.value)
    assert "b.parquet, row group 2" in text and "write it again" in text, text


def _flip(path: Path, group: int, at: float = 0.5) -> None:
    """One bit flipped at fraction ``at`` of row group ``group``'s first column chunk: a page
    that still decodes reads as other values."""
    data = bytearray(path.read_bytes())
    chunk = pq.ParquetFile(path).metadata.row_group(group).column(0)
    start = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
    data[start + 16 + int((chunk.total_compressed_size - 32) * at)] ^= 0x04
    path.write_bytes(bytes(data))


def _read_all_ids(folder: Path, **kw: Any) -> None:
    for _ in PartitionedParquet(folder, 50, shuffle=False, world=ONE, **kw):
        pass


def test_a_flipped_byte_in_a_page_with_a_checksum_is_named_not_read_as_other_values(
    tmp_path: Path,
) -> None:
    """A file written with page checksums (``write_page_checksum=True``, as ``lading
    repartition`` writes them) whose page lost a bit: the read checks the CRC and names the
    file and row group (was: the page decoded, another session id handed out, no error)."""
    path = tmp_path / "d" / "a.parquet"
    path.parent.mkdir()
    table = pa.table({"session_id": np.arange(400, dtype=np.int64)})
    pq.write_table(table, path, row_group_size=100, compression="none", write_page_checksum=True)
    _flip(path, 1)
    with pytest.raises(ValueError) as caught:
        _read_all_ids(path.parent)
    text = str(caught.value)
    assert "a.parquet, row group 1" in text and "write it again" in text, text


def test_lading_repartition_writes_page_checksums(tmp_path: Path) -> None:
    """Its output is checked at every read: a bit lost anywhere in a page is refused (was: 6
    of 30 such flips in a review read as other session ids, without an error)."""
    write(tmp_path / "d" / "a.parquet", {"session_id": np.arange(3000, dtype=np.int64)})
    repartition(tmp_path / "d", tmp_path / "out", row_group_size=1000)
    (written,) = sorted((tmp_path / "out").rglob("*.parquet"))
    whole = written.read_bytes()
    silent = []
    for k in range(20):
        written.write_bytes(whole)
        _flip(written, 1, k / 20)
        try:
            _read_all_ids(written.parent)
        except ValueError as e:
            assert "row group 1" in str(e)
        else:
            silent.append(k)
    assert not silent, f"flips at {silent} (of 20 places in the page) read without an error"


def test_a_file_gone_since_the_open_is_a_missing_file_not_a_damaged_one(tmp_path: Path) -> None:
    """Another job rewrote the folder after the dataset was made: the read raises the
    FileNotFoundError it is (was, after the damaged-page fix: "its bytes do not decode ... the
    file is damaged: write it again")."""
    for k in range(2):
        write(tmp_path / "d" / f"part-{k}.parquet", {"x": np.arange(k * 100, k * 100 + 100)}, 25)
    ds = PartitionedParquet(tmp_path / "d", 10, shuffle=False, world=ONE)
    (tmp_path / "d" / "part-1.parquet").unlink()
    with pytest.raises(FileNotFoundError, match=r"part-1\.parquet"):
        for _ in ds:
            pass


# ---------------------------------------------------------------- 3. repartition into itself


def test_repartition_into_a_folder_inside_its_input_twice_keeps_the_rows(tmp_path: Path) -> None:
    day = tmp_path / "day"
    write(day / "a.parquet", sessions(10))
    write(day / "b.parquet", sessions(7, start=10))
    for _ in range(2):
        assert main(["repartition", str(day), str(day / "rep"), "--world-size", "2"]) == 0
        report = repartition(day, day / "rep", world_size=2)
        assert report.rows == 17 and report.source_files == 2
    assert sorted(pq.read_table(day / "rep").column("session_id").to_pylist()) == list(range(17))


def test_repartition_ignores_a_dead_builds_temp_folder_inside_its_input(tmp_path: Path) -> None:
    day = tmp_path / "day"
    write(day / "a.parquet", sessions(10))
    write(day / "rep.tmp-999999999-abcd" / "part-0.parquet", sessions(10))  # a killed run's
    report = repartition(day, day / "rep")
    assert report.rows == 10


def test_reading_a_folder_that_holds_its_own_repartition_is_refused(tmp_path: Path) -> None:
    day = tmp_path / "day"
    write(day / "a.parquet", sessions(10))
    repartition(day, day / "rep", world_size=2)
    # day/*.parquet and day/rep/part-0.parquet are the same rows twice
    with pytest.raises(ValueError) as e:
        PartitionedParquet(day, 4, list_columns={"items": 2}, world=ONE)
    assert str(day / "rep") in str(e.value) and "_lading.json" in str(e.value)
    with pytest.raises(ValueError, match=str(day / "rep")):
        repartition(day, tmp_path / "elsewhere")
    ds = PartitionedParquet(day / "rep", list_columns={"items": 2}, batch_size=5, world=ONE)
    assert ds.total_rows == 10


def test_repartition_refuses_an_input_inside_its_output(tmp_path: Path) -> None:
    out = tmp_path / "out"
    write(tmp_path / "in" / "a.parquet", sessions(10))
    repartition(tmp_path / "in", out)
    write(out / "more" / "b.parquet", sessions(3))
    # publishing replaces the whole of out: the input under it would be deleted
    with pytest.raises(ValueError, match=r"inside the output"):
        repartition(out / "more", out)
    assert (out / "more" / "b.parquet").is_file()


@pytest.mark.parametrize(
    ("option", "value", "least"),
    [("row_group_size", 0, 1), ("row_group_size", -5, 1), ("world_size", 0, 1),
     ("world_size", -2, 1), ("workers", -1, 0)],
)  # fmt: skip
def test_repartition_refuses_counts_below_their_least(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, value: int, least: int
) -> None:
    """``--row-group-size 0`` was a ZeroDivisionError traceback, -5 a StopIteration; world
    size 0 or -2 and workers -1 were taken as 1 without a word. Each is refused naming the
    flag (the argument in the API) before anything is written; workers 0 (the main process
    reads: one reader a rank) stays valid."""
    write(tmp_path / "in" / "a.parquet", sessions(10))
    flag = "--" + option.replace("_", "-")
    with pytest.raises(SystemExit) as exit_:
        main(["repartition", str(tmp_path / "in"), str(tmp_path / "out"), flag, str(value)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and f"argument {flag}: must be at least {least}" in err, err
    with pytest.raises(ValueError, match=rf"{option}={value}: .*at least {least}"):
        repartition(tmp_path / "in", tmp_path / "out", **{option: value})
    assert not (tmp_path / "out").exists()
    assert repartition(tmp_path / "in", tmp_path / "out", world_size=2, workers=0).rows == 10


def test_repartition_over_its_earlier_output_replaces_it_whole(tmp_path: Path) -> None:
    write(tmp_path / "in" / "a.parquet", sessions(12))
    out = tmp_path / "out"
    repartition(tmp_path / "in", out, world_size=4)
    (tmp_path / "in" / "a.parquet").unlink()
    write(tmp_path / "in" / "b.parquet", sessions(5, start=100))
    repartition(tmp_path / "in", out, world_size=1)
    assert sorted(p.name for p in out.iterdir()) == ["_lading.json", "part-0.parquet"]
    assert pq.read_table(out).column("session_id").to_pylist() == list(range(100, 105))


def test_repartition_refuses_a_foreign_output_folder_before_reading(tmp_path: Path) -> None:
    write(tmp_path / "in" / "a.parquet", sessions(5))
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "mine.txt").write_text("the user's")
    assert main(["repartition", str(tmp_path / "in"), str(tmp_path / "out")]) == 2
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["mine.txt"]
    with pytest.raises(FileExistsError, match="not a lading directory"):
        repartition(tmp_path / "in", tmp_path / "out")


@pytest.mark.parametrize("case", ["nullability", "column order"])
def test_repartition_rewrites_files_the_loader_reads_as_one_schema(
    tmp_path: Path, case: str
) -> None:
    """Files that differ only in ``not null`` flags (pandas-written days beside a rewritten
    one) or in column order pass the schema check and the loader reads them; repartition
    failed midway with pyarrow's multi-line "Schema at index 0 was different"."""
    strict = pa.schema([pa.field("session_id", pa.int64(), nullable=False), ("n", pa.int64())])
    first = pa.table({"session_id": [0, 1, 2], "n": [5, 6, 7]}, schema=strict)
    second = pa.table({"session_id": [3, 4], "n": [8, 9]})
    if case == "column order":
        first = first.cast(pa.schema([("session_id", pa.int64()), ("n", pa.int64())]))
        second = second.select(["n", "session_id"])
    (tmp_path / "in").mkdir()
    pq.write_table(first, tmp_path / "in" / "a.parquet")
    pq.write_table(second, tmp_path / "in" / "b.parquet")
    repartition(tmp_path / "in", tmp_path / "out", row_group_size=2)
    back = pq.read_table(tmp_path / "out")
    assert back.column("session_id").to_pylist() == [0, 1, 2, 3, 4]
    assert back.column("n").to_pylist() == [5, 6, 7, 8, 9]
    assert back.schema.names == first.schema.names


def test_repartition_keeps_the_nulls_of_a_file_whose_column_may_hold_them(tmp_path: Path) -> None:
    """The first file declares ``not null``, a later one holds nulls there: the rewrite cast
    to the first's schema and failed with "Casting field 'x' with null values to
    non-nullable", naming no file. The written column is nullable where any file's is."""
    strict = pa.schema([pa.field("x", pa.int64(), nullable=False)])
    (tmp_path / "in").mkdir()
    pq.write_table(pa.table({"x": [1, 2]}, schema=strict), tmp_path / "in" / "a.parquet")
    pq.write_table(pa.table({"x": [3, None]}), tmp_path / "in" / "b.parquet")
    repartition(tmp_path / "in", tmp_path / "out", row_group_size=2)
    assert pq.read_table(tmp_path / "out").column("x").to_pylist() == [1, 2, 3, None]


def test_repartition_keeps_a_null_item_of_a_list_another_file_declares_not_null(
    tmp_path: Path,
) -> None:
    """The first file's list items ``not null`` (as pandas writes them), a later file's list
    holding a null item: the rewrite failed with "Column 'element' is declared non-nullable
    but contains nulls", naming no file, column or fix. Nested fields are made nullable where
    any file's is, as top-level ones are."""
    item = pa.field("element", pa.int64(), nullable=False)
    first = pa.schema([("session_id", pa.int64()), ("items", pa.list_(item))])
    (tmp_path / "in").mkdir()
    pq.write_table(
        pa.table({"session_id": [0, 1], "items": [[1, 2], [3]]}, schema=first),
        tmp_path / "in" / "a.parquet",
    )
    later = pa.table(
        {"session_id": [2, 3], "items": pa.array([[4, None], [5]], pa.list_(pa.int64()))}
    )
    pq.write_table(later, tmp_path / "in" / "b.parquet")
    repartition(tmp_path / "in", tmp_path / "out", row_group_size=2)
    back = pq.read_table(tmp_path / "out")
    assert back.column("items").to_pylist() == [[1, 2], [3], [4, None], [5]]


# ---------------------------------------------------------------- 4. many files


def _open_files() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts /proc/self/fd")
def test_many_files_hold_a_bounded_number_of_file_handles(tmp_path: Path) -> None:
    """A folder of more files than the open-file limit reads to its end: the reader keeps a
    few files open (the ones read last), never one a file read, and closes them with the
    loader."""
    for i in range(300):
        write(tmp_path / f"p{i:05d}.parquet", {"sid": pa.array(np.arange(20) + 20 * i, pa.int64())})
    loader = PartitionedParquet(tmp_path, 100, seed=0, world=ONE)
    before = _open_files()
    most, seen = before, []
    for batch in loader:
        most = max(most, _open_files())
        seen += batch["sid"].tolist()
    assert sorted(seen) == list(range(6000))
    assert most - before <= 16, f"{most - before} files held open by one pass"
    loader.close()
    assert _open_files() <= before


@pytest.mark.slow  # ~3-6 s over the local S3 (the default tier's 10 minutes)
def test_many_files_read_under_a_low_open_file_limit(tmp_path: Path) -> None:
    """1,200 files under a limit of 256 open files (the reviewer's case: 1,500 under 1,024)."""
    for i in range(1200):
        write(tmp_path / f"p{i:05d}.parquet", {"sid": pa.array(np.arange(5) + 5 * i, pa.int64())})
    code = (
        "import resource, sys\n"
        "from lading.tabular import PartitionedParquet\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))\n"
        "rows = sum(len(b['sid']) for b in PartitionedParquet(sys.argv[1], 100, seed=0))\n"
        "print('rows', rows)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0 and "rows 6000" in done.stdout, done.stderr[-2000:]


# ---------------------------------------------------------------- 5. options the files refuse


def test_a_column_named_like_a_list_columns_lengths_is_refused(tmp_path: Path) -> None:
    """``items_lengths`` beside list column ``items`` would silently replace the lengths the
    loader computes (or be replaced by them): refused when the dataset opens, naming both."""
    n = 8
    path = write(
        tmp_path / "a.parquet",
        {
            "items": pa.array([[1] * (i % 4) for i in range(n)], pa.list_(pa.int64())),
            "items_lengths": pa.array(np.full(n, 999), pa.int64()),
        },
    )
    with pytest.raises(ValueError) as caught:
        PartitionedParquet(tmp_path, n, list_columns={"items": 3}, world=ONE)
    text = str(caught.value)
    assert str(path) in text and "'items_lengths'" in text and "'items'" in text
    assert "columns=" in text and "rename" in text
    loader = PartitionedParquet(
        tmp_path, n, columns=["items"], list_columns={"items": 3}, shuffle=False, world=ONE
    )
    assert next(iter(loader))["items_lengths"].tolist() == [0, 1, 2, 3, 0, 1, 2, 3]


def test_no_columns_is_refused(tmp_path: Path) -> None:
    write(tmp_path / "a.parquet", sessions(8))
    with pytest.raises(ValueError) as caught:
        PartitionedParquet(tmp_path, 4, columns=[], world=ONE)
    text = str(caught.value)
    assert "columns=[]" in text and "session_id" in text and "leave columns= out" in text


@pytest.mark.parametrize(
    ("kind", "pad_value"),
    [(pa.int64(), -1.5), (pa.uint8(), -1), (pa.uint8(), 256), (pa.int8(), 1000), (pa.bool_(), 2)],
)
def test_a_pad_value_the_list_items_cannot_hold_is_refused(
    tmp_path: Path, kind: Any, pad_value: float
) -> None:
    """-1.5 would silently become -1 in an int list, -1 a bare OverflowError at the first
    batch of a uint8 one: refused when the dataset opens, naming column, dtype and value."""
    items = pa.array([[1], [0, 1]], pa.list_(pa.int8())).cast(pa.list_(kind))
    path = write(tmp_path / "a.parquet", {"items": items})
    with pytest.raises(ValueError) as caught:
        PartitionedParquet(tmp_path, 2, list_columns={"items": 3}, pad_value=pad_value, world=ONE)
    text = str(caught.value)
    assert str(path) in text and "'items'" in text and str(kind) in text
    assert f"pad_value={pad_value!r}" in text


@pytest.mark.parametrize(("kind", "pad_value"), [(pa.uint8(), 255), (pa.int64(), -1.0)])
def test_a_pad_value_the_items_hold_pads(tmp_path: Path, kind: Any, pad_value: float) -> None:
    write(tmp_path / "a.parquet", {"items": pa.array([[1], [0, 1]], pa.list_(kind))})
    loader = PartitionedParquet(
        tmp_path, 2, list_columns={"items": 3}, pad_value=pad_value, shuffle=False, world=ONE
    )
    assert next(iter(loader))["items"].tolist() == [[1, pad_value, pad_value], [0, 1, pad_value]]


def test_a_nested_list_is_refused_naming_the_columns_type(tmp_path: Path) -> None:
    nested = pa.array([[[1]], [[2, 3]]], pa.list_(pa.list_(pa.int64())))
    path = write(tmp_path / "a.parquet", {"nl": nested})
    with pytest.raises(ValueError) as caught:
        PartitionedParquet(tmp_path, 2, list_columns={"nl": 3}, world=ONE)
    text = str(caught.value)
    assert f"'nl' is {pq.read_schema(path).field('nl').type}" in text and "items" in text, text


@pytest.mark.parametrize("pad", ["right", "left"])
def test_lists_the_files_already_pad_are_stripped_of_it_with_padded_with(
    tmp_path: Path, pad: str
) -> None:
    """T4R's files pad every item list to 20 with 0 at its end. Read with list_columns alone,
    every session's ``_lengths`` was 20 and a cut to 10 kept the trailing zeros: 46,783 of
    48,960 sessions of days 178-179 came back with no item (a review's count). With
    ``padded_with=0`` a list's trailing run of 0 is not items: lengths are the sessions',
    the cut keeps their most recent items, and left padding puts the last item last."""
    items = [
        [5, 6, 7, 0, 0, 0],
        [9, 0, 0, 0, 0, 0],
        [1, 2, 3, 4, 5, 6],
        [0] * 6,
        [4, 0, 8, 0, 0, 0],
    ]
    path = write(
        tmp_path / "d" / "s.parquet",
        {"session_id": np.arange(5), "items": pa.array(items, pa.list_(pa.int64()))},
    )
    read = PartitionedParquet(
        path, 5, list_columns={"items": 4}, pad=pad, shuffle=False, world=ONE, padded_with=0
    )
    (batch,) = list(read)
    assert batch["items_lengths"].tolist() == [3, 1, 4, 0, 3]
    kept = [[5, 6, 7], [9], [3, 4, 5, 6], [], [4, 0, 8]]  # a 0 inside a list is an item
    rows = batch["items"].tolist()
    for row, want, n in zip(rows, kept, batch["items_lengths"].tolist()):
        assert (row[:n] if pad == "right" else row[len(row) - n :]) == want, rows
        assert (row[n:] if pad == "right" else row[: len(row) - n]) == [0] * (4 - n), rows
    plain = PartitionedParquet(path, 5, list_columns={"items": 4}, shuffle=False, world=ONE)
    (batch,) = list(plain)  # without it, the files' lists as they are (the padding is items)
    assert batch["items_lengths"].tolist() == [4] * 5


def test_padded_with_is_checked_like_pad_value_and_strips_nan(tmp_path: Path) -> None:
    """``padded_with=nan`` over NaN-padded float lists stripped nothing (NaN equals nothing),
    a value the items cannot hold (300 in uint8 lists) did nothing silently, and without list
    columns it was ignored (a diff review's finds)."""
    floats = pa.array([[0.5, 1.5, float("nan")], [2.5, float("nan"), float("nan")]])
    path = write(tmp_path / "f" / "s.parquet", {"v": floats})
    read = PartitionedParquet(
        path, 2, list_columns={"v": 3}, shuffle=False, world=ONE, padded_with=float("nan")
    )
    (batch,) = list(read)
    assert batch["v_lengths"].tolist() == [2, 1]
    small = pa.array([[1, 2, 0], [3, 0, 0]], pa.list_(pa.uint8()))
    path = write(tmp_path / "u" / "s.parquet", {"v": small})
    with pytest.raises(ValueError, match=r"padded_with=300 does not fit list column 'v'"):
        PartitionedParquet(path, 2, list_columns={"v": 3}, world=ONE, padded_with=300)
    with pytest.raises(ValueError, match=r"list_columns= names none"):
        PartitionedParquet(path, 2, columns=["v"], world=ONE, padded_with=0)
