"""A local parquet file rewritten after PartitionedParquet planned its rows from the footers.

The batches are planned from the footers read when the loader opens; the files are opened
again, lazily, in each process (and DataLoader worker) that reads them. A file rewritten in
between (an ETL job re-exporting a day while a run trains on it) used to give empty or short
batches and lose rows without a word, or fail saying the file was damaged. It must be refused
by name instead, saying that it changed and what to do.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lading.tabular import PartitionedParquet
from lading.tabular.read import RowReader
from lading.world import World

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

ONE = World(0, 1)


def write(path: Path, rows: int, row_group_size: int, start: int = 0) -> Path:
    """``rows`` session ids from ``start`` in row groups of ``row_group_size`` rows."""
    table = pa.table({"session_id": pa.array(np.arange(start, start + rows), pa.int64())})
    pq.write_table(table, path, row_group_size=row_group_size)
    return path


def loader(path: Path, **kwargs: Any) -> PartitionedParquet:
    return PartitionedParquet(path.parent, 50, shuffle=False, world=ONE, buffer_rows=100, **kwargs)


def assert_says_changed(message: str, path: Path) -> None:
    assert str(path) in message
    assert "changed since the loader opened it" in message
    assert "PartitionedParquet again" in message  # the fix
    assert "damaged" not in message  # it is not


# the two re-exports of the review's repro: fewer row groups (the planned row group 4 is gone),
# and as many row groups of other sizes (every index still exists: 700 rows went missing)
REWRITES = {
    "fewer_row_groups": (600, 150),  # 4 row groups, 5 planned
    "same_count_other_sizes": (900, 180),  # 5 row groups of 180 rows, 5 of 200 planned
}


@pytest.mark.parametrize("rewrite", list(REWRITES))
@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_file_rewritten_after_the_loader_opened_is_refused_by_name(
    tmp_path: Path, rewrite: str, num_workers: int
) -> None:
    path = write(tmp_path / "a.parquet", 1000, 200)  # 5 row groups
    ds = loader(path, num_workers=num_workers)
    assert ds.total_rows == 1000
    rows, size = REWRITES[rewrite]
    write(path, rows, size)  # re-exported: same name, other row groups
    sizes: list[int] = []
    with pytest.raises(ValueError) as e:
        for batch in ds:
            sizes.append(len(batch["session_id"]))
        pytest.fail(f"read {sum(sizes)} of 1000 rows in batches of {sorted(set(sizes))}")
    assert_says_changed(str(e.value), path)
    assert all(s == 50 for s in sizes)  # no short or empty batch came before the error
    ds.close()


def test_a_file_rewritten_in_place_while_open_is_refused_not_read_under_the_old_footer(
    tmp_path: Path,
) -> None:
    path = write(tmp_path / "a.parquet", 1000, 200)
    ds = loader(path)
    it = iter(ds)
    first = next(it)  # the file is open in this process now, its old footer in hand
    assert first["session_id"].tolist() == list(range(50))
    # the same layout, other values: the old footer's offsets would read the new bytes
    write(path, 1000, 200, start=10_000)
    with pytest.raises(ValueError) as e:
        got = [int(i) for b in it for i in b["session_id"]]
        pytest.fail(f"read on without a word: {len(got)} rows, {sum(i >= 10_000 for i in got)} new")
    assert_says_changed(str(e.value), path)
    ds.close()


def test_an_unchanged_file_reads_every_row_once_after_its_handle_was_closed(
    tmp_path: Path,
) -> None:
    path = write(tmp_path / "a.parquet", 1000, 200)
    ds = loader(path)
    assert sorted(int(i) for b in ds for i in b["session_id"]) == list(range(1000))
    ds.close()  # handles closed: the next epoch opens the file again and finds it as planned
    assert sorted(int(i) for b in ds for i in b["session_id"]) == list(range(1000))
    ds.close()


def test_a_row_group_decoding_to_other_rows_than_planned_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last guard: whatever the footer said, the rows decoded must be the rows planned."""
    path = write(tmp_path / "a.parquet", 1000, 200)
    ds = loader(path)
    decode = RowReader._decode

    def short(self: RowReader, file: str, index: int) -> Any:
        table = decode(self, file, index)
        return table.slice(0, table.num_rows - 1) if index == 2 else table

    monkeypatch.setattr(RowReader, "_decode", short)
    with pytest.raises(ValueError) as e:
        list(ds)
    message = str(e.value)
    assert_says_changed(message, path)
    assert "row group 2" in message and "199 rows" in message and "200" in message
    ds.close()


def test_a_rewrite_of_the_same_row_group_sizes_before_any_read_is_refused(tmp_path: Path) -> None:
    """Rewritten before any process opened it, with rows of other values in row groups of the
    same sizes: its footer matches the plan, so only the file's size, inode and modification
    time as the loader planned it tell; they are checked at every open."""
    import os

    path = write(tmp_path / "a.parquet", 1000, 200)
    ds = loader(path)
    write(tmp_path / "b.parquet", 1000, 200, start=5000).replace(path)  # another inode
    os.utime(path, ns=(os.stat(path).st_atime_ns, os.stat(path).st_mtime_ns + 10**9))
    with pytest.raises(ValueError) as e:
        next(iter(ds))
    assert_says_changed(str(e.value), path)
