"""Staging while something else writes in the source folder: a builder's ``.tmp-*`` folder
that vanishes (renamed into place, or removed) while the stage lists the source is no error.

The race is made deterministic: ``os.scandir`` of such a folder removes it first, as the
builder's rename does when it lands between the listing of the parent and that of the folder
(what ``lading stage`` met as a bare FileNotFoundError naming ``store/.tmp-…``)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import write
from lading.disk import STAGE_MARK
from lading.disk.stage import stage
from lading.stores import build_store, open_store


def vanish_on_scandir(monkeypatch: pytest.MonkeyPatch, doomed: Callable[[str], bool]) -> list[str]:
    """Make ``os.scandir`` of a folder that ``doomed`` names remove that folder first; the
    names removed (to check the race was met where a walk happens)."""
    real, removed = os.scandir, []

    def scandir(path: Any = ".") -> Any:
        if isinstance(path, int):  # a directory's descriptor (shutil.rmtree's walk)
            return real(path)
        where = os.fspath(path)
        if doomed(os.path.basename(where.rstrip("/"))) and os.path.isdir(where):
            shutil.rmtree(where)
            removed.append(where)
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    return removed


def test_staging_a_store_while_a_builder_temp_folder_vanishes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = write(tmp_path / "a.tsv", "".join(f"{i}\tA{i}\n" for i in range(200)))
    store = tmp_path / "store"
    build_store(src, store, progress=False)
    write(store / ".tmp-4242-deadbeef" / "text.bin", b"half a rebuild")  # a builder's scratch
    write(store / "other.lock", b"")
    vanish_on_scandir(monkeypatch, lambda name: name.startswith(".tmp-"))
    dest = stage(store, tmp_path / "node" / "store")
    assert open_store(dest).get_many(["0", "199"]) == ["A0", "A199"]
    staged = {p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()}
    assert not any(".tmp-" in name or name.endswith(".lock") for name in staged), staged


def test_staging_a_plain_folder_copies_every_file_and_leaves_out_what_vanishes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plain folder (no ``meta.json``) is the user's: their ``poetry.lock`` or
    ``.tmp-notes`` are staged like any file (only a lading folder's writers leave ``.tmp-*``
    and locks behind), and a folder removed while the stage walks is no error."""
    src = tmp_path / "folder"
    write(src / "a.parquet", b"a")
    write(src / "part" / "b.parquet", b"bb")
    write(src / "poetry.lock", b"lock")
    write(src / "part" / ".tmp-notes", b"notes")
    write(src / "gone" / "d.parquet", b"going")  # removed while the stage lists the source
    removed = vanish_on_scandir(monkeypatch, lambda name: name == "gone")
    dest = stage(src, tmp_path / "node" / "folder")
    assert removed  # the race was met (a plain folder is walked)
    staged = {p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()}
    assert staged == {
        "a.parquet",
        "part/b.parquet",
        "poetry.lock",
        "part/.tmp-notes",
        STAGE_MARK,
    }, staged
    assert (dest / "poetry.lock").read_bytes() == b"lock"
    assert stage(src, dest) == dest  # listed alike again: the copy is reused
