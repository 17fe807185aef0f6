"""A publish without ``RENAME_EXCHANGE`` (NFS) renames the old version aside, then the new one
in: a crash between the two leaves no destination, only ``DEST.old-<pid>-…`` (the previous
version, whole) and ``DEST.tmp-<pid>-…`` (the new one). The next holder of the lock puts the
complete copy back instead of removing both as dead temporaries."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import lading.disk.atomic as atomic
from lading.disk import left_aside, publish, recover_aside, remove_dead_temps

DEAD = 999999999  # no such pid


def version(path: Path, what: str, finished: bool = True) -> Path:
    """A checkpoint-like directory: its payload, then its ``meta.json`` (written last)."""
    path.mkdir()
    (path / "payload").write_text(what)
    if finished:
        meta = {"format": "lading.train.checkpoint", "version": 1}
        (path / "meta.json").write_text(json.dumps(meta))
    return path


def crashed(tmp_path: Path, new_pid: int = DEAD, finished: bool = True) -> Path:
    """What a publisher killed between its two renames leaves: no ``dest``, both versions."""
    version(tmp_path / f"ck.old-{DEAD}-aa", "old")
    version(tmp_path / f"ck.tmp-{new_pid}-bb", "new", finished)
    return tmp_path / "ck"


def test_the_finished_new_version_is_put_back_by_the_next_builder(tmp_path: Path) -> None:
    dest = crashed(tmp_path)
    removed = remove_dead_temps(dest)  # every builder calls it first, under the lock
    assert (dest / "payload").read_text() == "new"
    assert removed == [tmp_path / f"ck.old-{DEAD}-aa"]  # the previous version, now garbage
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck"]


@pytest.mark.parametrize(
    ("new_pid", "finished"),
    [(DEAD, False), (DEAD - 1, True)],
    ids=["new-one-unfinished", "new-one-of-another-builder"],
)
def test_the_old_version_is_put_back_when_the_new_one_cannot_be_told_finished(
    tmp_path: Path, new_pid: int, finished: bool
) -> None:
    """No ``meta.json`` in the new one (it is written last), or a temporary of another
    builder (not the one whose publish was cut): the previous version, always whole."""
    dest = crashed(tmp_path, new_pid, finished)
    assert recover_aside(dest) == tmp_path / f"ck.old-{DEAD}-aa"
    assert (dest / "payload").read_text() == "old"
    remove_dead_temps(dest)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck"]


def test_a_live_publishers_version_aside_is_left_alone(tmp_path: Path) -> None:
    """Between its renames a live publisher's destination is briefly absent: nothing is
    moved, and the version aside is named (what ``--resume`` refuses with)."""
    old = version(tmp_path / f"ck.old-{os.getppid()}-aa", "old")
    dest = tmp_path / "ck"
    assert recover_aside(dest) is None and remove_dead_temps(dest) == []
    assert not dest.exists() and left_aside(dest) == [old]


def test_nothing_is_put_back_over_a_destination_that_is_there(tmp_path: Path) -> None:
    dest = version(tmp_path / "ck", "current")
    version(tmp_path / f"ck.old-{DEAD}-aa", "old")
    assert recover_aside(dest) is None
    remove_dead_temps(dest)
    assert (dest / "payload").read_text() == "current" and left_aside(dest) == []


def test_a_failed_second_rename_puts_the_old_version_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An error (or Ctrl-C) between the renames, in this process: ``dest`` is the old version
    again at once, not left aside for a later builder."""
    dest = version(tmp_path / "ck", "old")
    new = version(tmp_path / "ck.tmp-1-cc", "new")
    monkeypatch.setattr(atomic, "_exchange", lambda a, b: False)
    real = os.replace

    def replace(src: os.PathLike[str], dst: os.PathLike[str]) -> None:
        if Path(src) == new:
            raise KeyboardInterrupt
        real(src, dst)

    monkeypatch.setattr(atomic.os, "replace", replace)
    with pytest.raises(KeyboardInterrupt):
        publish(new, dest)
    assert (dest / "payload").read_text() == "old" and left_aside(dest) == []


def test_without_an_exchange_no_old_version_is_left_after_a_publish(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``DEST.old-*`` is only ever a whole previous version: once the new one is in, the old
    one is renamed to a temporary name before it is deleted (a crash mid-delete leaves a
    temporary to sweep, never a half-deleted version a later builder would put back)."""
    dest = version(tmp_path / "ck", "old")
    monkeypatch.setattr(atomic, "_exchange", lambda a, b: False)
    gone = []
    monkeypatch.setattr(atomic.shutil, "rmtree", lambda p, **k: gone.append(Path(p).name))
    publish(version(tmp_path / "ck.tmp-1-cc", "new"), dest)
    assert (dest / "payload").read_text() == "new"
    assert len(gone) == 1 and gone[0].startswith("ck.tmp-") and left_aside(dest) == []
