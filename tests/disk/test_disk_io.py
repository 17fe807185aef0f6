"""Disk I/O helpers: early writeback while a build writes, read-ahead while a batch reads."""

from __future__ import annotations

import itertools
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from lading.disk import files, ragged
from lading.disk.files import MappedFile
from lading.disk.ragged import RaggedColumn, RaggedWriter, column_paths


def test_start_writeback_is_available_on_linux_and_harmless(tmp_path: Path) -> None:
    path = tmp_path / "f.bin"
    with open(path, "wb") as f:
        f.write(b"x" * (1 << 20))
        f.flush()
        files.start_writeback(f.fileno(), 0, 1 << 20)  # starts the disk; must not fail
    assert path.read_bytes() == b"x" * (1 << 20)
    if sys.platform.startswith("linux"):  # else a silent no-op would hide a slower build
        assert files._sync_file_range is not None


def _column(tmp_path: Path, seed: int) -> tuple[RaggedColumn, list[bytes]]:
    """A column of rows of 0..20,000 bytes: many cross page boundaries, some are empty."""
    rng = np.random.default_rng(seed)
    rows = [os.urandom(int(n)).hex().encode()[: int(n)] for n in rng.integers(0, 20_000, 300)]
    writer = RaggedWriter(tmp_path, "text")
    for row in rows:
        writer.append(row)
    writer.finish()
    return RaggedColumn(*column_paths(tmp_path, "text"), random_access=True), rows


def test_read_ahead_returns_the_same_rows_cold_or_warm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seed = int(os.environ.get("LADING_TEST_SEED", "7"))
    print(f"seed {seed} (LADING_TEST_SEED replays it)")
    column, rows = _column(tmp_path, seed)
    rng = np.random.default_rng(seed)
    batches = [rng.integers(0, len(rows), int(k)) for k in rng.integers(2, 80, 30)]
    expected = [[rows[r].decode() for r in batch.tolist()] for batch in batches]
    faults = itertools.count(1 << 40)  # each look finds a new wait on the device
    monkeypatch.setattr(ragged, "_major_faults", lambda: next(faults))
    monkeypatch.setattr(ragged, "_COLD_SECONDS", 0.0)  # every batch looks cold: read ahead
    assert [column.texts(b) for b in batches] == expected
    assert column._read_ahead
    monkeypatch.setattr(ragged, "_COLD_SECONDS", 1.0)  # every batch looks warm: no read-ahead
    assert [column.texts(b) for b in batches] == expected
    assert not column._read_ahead
    assert column.texts(np.array([3])) == [rows[3].decode()]  # one row: never asks ahead
    monkeypatch.setattr(ragged, "_COLD_SECONDS", 0.0)
    monkeypatch.setattr(ragged, "_READ_AHEAD_ROWS", 10)
    asked: list[int] = []
    monkeypatch.setattr(column.data, "will_need", lambda s, e: asked.append(len(s)))
    assert column.texts(np.arange(len(rows))) == [r.decode() for r in rows]  # all: no syscalls
    assert asked == []
    column.texts(np.arange(10))  # was warm: no read-ahead, but this batch looks cold
    column.texts(np.arange(10))
    assert asked == [10]


def test_read_ahead_asks_for_every_page_of_every_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    column, _ = _column(tmp_path, 3)
    asked: list[tuple[int, int]] = []

    def spy(option: int, start: int, length: int) -> None:
        assert option == files.mmap.MADV_WILLNEED
        assert start % files.mmap.PAGESIZE == 0, "madvise needs page-aligned starts"
        asked.append((start, start + length))

    monkeypatch.setattr(column.data, "advise", spy)
    page = files.mmap.PAGESIZE
    starts = [5, page * 3 + 1, 100]
    ends = [9000, page * 3 + 2, 100]  # the last is empty: nothing to read
    column.data.will_need(starts, ends)
    assert asked == [(0, 9000), (page * 3, page * 3 + 2)]


def test_will_need_on_an_empty_file_does_nothing(tmp_path: Path) -> None:
    (tmp_path / "empty").write_bytes(b"")
    MappedFile(tmp_path / "empty", random_access=True).will_need([0], [10])
