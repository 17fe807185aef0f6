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
        assert "this process uses it" in message, message
        assert isinstance(caught.value, LadingError)  # one except catches lading's errors
        taken = node_of(tmp_path / "cache", 2 << 20, strict=False)  # no cap asked: the folder's
        assert taken.layout.size == 1 << 20
        release(taken)
    finally:
        release(node)


def test_another_cap_is_refused_with_a_fix_that_fits_who_uses_the_folder(tmp_path: Path) -> None:
    """A build or an inspect made the folder at the default cap and ended; the training run
    that asked for its own cap was told to "delete this one when no process uses it", with no
    word that none did (a review: the guide's own order, build then train with
    LADING_REMOTE_CACHE_BYTES). The refusal says who uses the folder, and the fix for that."""
    from lading.remote.cache.owners import Owner

    folder = tmp_path / "cache"
    release(node_of(folder, 8 << 20))  # (a build's, at a default cap, gone)
    with pytest.raises(CacheSettingsError) as caught:
        node_of(folder, 1 << 20)
    said = str(caught.value)
    assert "no process uses it now" in said and f"rm -r {folder}" in said, said
    assert "cache_bytes=8388608" in said and "\n" not in said, said
    other = Owner(folder)  # another process, alive
    _ = other.token
    try:
        with pytest.raises(CacheSettingsError, match="another process uses it at that cap"):
            node_of(folder, 1 << 20)
    finally:
        other.close()


def test_the_node_figures_drop_processes_long_gone(tmp_path: Path) -> None:
    """A newcomer against a healthy server read ``retried: 55`` summed over every process that
    ever used the folder: the node's figures are those of the processes since the folder was
    last idle (no live process), and a live one's are kept."""
    from lading.remote.cache.owners import Owner

    folder = tmp_path / "cache"
    node = node_of(folder, 1 << 20)
    node.figures["retried"] += 55  # a process that met a bad endpoint
    release(node)  # ... and ended
    node = node_of(folder, 1 << 20)
    node.figures["retried"] += 1
    node.count(force=True)
    assert node.ledger.node()["retried"] == 1  # the one gone: dropped; this one's counted
    other = Owner(folder)  # another process, alive: holds its token's lock
    _ = other.token
    release(node)
    node = node_of(folder, 1 << 20)
    assert node.ledger.node()["retried"] == 1  # the other lives: nothing dropped
    assert node.ledger.node()["since"] > 0
    release(node)
    other.close()
    node = node_of(folder, 1 << 20)
    assert "retried" not in node.ledger.node()
    release(node)


def test_a_token_looked_at_while_it_is_made_stays_alive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process asks about every token in the folder just as this one makes its own,
    between the file's making and its lock: the maker stays alive to every later asker
    (was: the asker was granted the lock, removed the file, and the maker was dead to
    everyone for good, so its claims were taken over and its late fills wrote over others'
    blocks: wrong documents, found by a review with 12 processes opening one folder)."""
    import fcntl
    import os

    from lading.remote.cache import owners

    maker, asker = owners.Owner(tmp_path), owners.Owner(tmp_path)
    real, looked = fcntl.flock, []

    def flock(fd: int, operation: int) -> None:
        if operation == fcntl.LOCK_EX and not looked:  # the maker, before its lock
            looked.append([asker.alive(name) for name in os.listdir(tmp_path / owners.DIR)])
        real(fd, operation)

    monkeypatch.setattr(owners.fcntl, "flock", flock)
    token = maker.token
    monkeypatch.undo()
    assert looked == [[False]]  # the asker saw a file then (a token being made: no claim's)
    assert asker.alive(token) and (tmp_path / owners.DIR / token).exists()
    assert asker.others_alive()
    maker.close()
    assert not asker.alive(token)


def test_an_empty_cap_variable_asks_for_no_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``LADING_REMOTE_CACHE_BYTES=""`` (a template's blank) is no cap asked, as the variable
    unset is: an open takes the folder's cap (it asked for the 8 GiB default and was refused
    against a folder made with 2 MiB)."""
    from lading.remote.settings import RemoteSettings

    monkeypatch.setenv("LADING_REMOTE_CACHE_BYTES", "")
    settings = RemoteSettings.of(tmp_path / "cache", None)
    assert not settings.cap_given
    node = node_of(tmp_path / "cache", 2 << 20)
    try:
        taken = node_of(tmp_path / "cache", settings.cache_bytes, strict=settings.cap_given)
        assert taken.layout.size == 2 << 20
        release(taken)
    finally:
        release(node)
    monkeypatch.setenv("LADING_REMOTE_CACHE_BYTES", "3M")
    assert RemoteSettings.of(tmp_path / "cache", None).cap_given
