"""A node cache folder at its limits says so in one line naming the folder and the fix (issue 50
item 4): a full disk under the ledger, a second process asking for another cap."""

from __future__ import annotations

from pathlib import Path

import pytest

from lading.errors import LadingError, OutOfSpaceError
from lading.remote.cache.ledger import CacheSettingsError
from lading.remote.cache.node import node_of, release


def test_a_full_disk_under_the_ledger_names_the_folder_and_the_fix(tmp_path: Path) -> None:
    node = node_of(tmp_path / "cache", 1 << 20)
    try:
        ledger = node.ledger
        conn = ledger.connection()  # this thread's: SQLite's own "disk is full", at its size now
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {pages}")
        with pytest.raises(OutOfSpaceError) as caught:
            for i in range(100_000):
                ledger.object_id(f"s3://b/store@snap/{'x' * 200}-{i}")
        message = str(caught.value)
        assert str(tmp_path / "cache") in message and "\n" not in message
        assert "free" in message and "cache" in message
        assert not (tmp_path / "cache" / "ledger.sqlite.damaged").exists()  # not set aside
    finally:
        release(node)


def test_a_second_cap_that_differs_is_refused_naming_both(tmp_path: Path) -> None:
    node = node_of(tmp_path / "cache", 1 << 20)
    try:
        with pytest.raises(CacheSettingsError) as caught:
            node_of(tmp_path / "cache", 2 << 20)
        message = str(caught.value)
        assert "1,048,576" in message and "2,097,152" in message
        assert isinstance(caught.value, LadingError)  # one except catches lading's errors
        taken = node_of(tmp_path / "cache", 2 << 20, strict=False)  # no cap asked: the folder's
        assert taken.layout.size == 1 << 20
        release(taken)
    finally:
        release(node)
