"""Bad parquet and bad paths: nulls, differing schemas, empty inputs, repartition into itself.

Each case must fail when the dataset opens (or the command starts), with a message naming the
file, the place and the fix, instead of a KeyError mid-epoch or a silent change of dtype/rows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from lading.tabular import PartitionedParquet
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


def test_a_null_int_is_refused_naming_file_row_group_row_and_column(tmp_path: Path) -> None:
    path = write(
        tmp_path / "s.parquet",
        {"session_id": pa.array([0, 1, 2, None, 4, 5], pa.int64())},
        row_group_size=3,
    )
    ds = PartitionedParquet(path, batch_size=6, shuffle=False, world=ONE)
    with pytest.raises(ValueError) as e:
        read_all(ds)
    message = str(e.value)
    assert str(path) in message and "row group 1" in message and "'session_id'" in message
    assert "row 3 of the file" in message and "fill_null" in message


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
