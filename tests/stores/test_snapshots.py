"""One snapshot per reader: immutable files, a manifest committed last, old snapshots collected.

See :mod:`lading.disk.snapshot`. The race against a rebuilder in real processes is in
``test_snapshots_race.py``; these are the single-process contracts.
"""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path
from typing import Any

import pytest

import lading
from conftest import write
from lading.disk import SnapshotGoneError, snapshot
from lading.errors import StoreFormatError
from lading.stores import layout


def _source(path: Path, letter: str, n: int = 40) -> Path:
    return write(path, "".join(f"{letter.lower()}{i}\t{letter} text {i}\n" for i in range(n)))


@pytest.fixture
def no_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(snapshot.GRACE_ENV, "0")


def test_a_rebuild_writes_new_files_and_leaves_open_objects_alone(tmp_path: Path) -> None:
    a, b = _source(tmp_path / "a.tsv", "A"), _source(tmp_path / "b.tsv", "B")
    dest = tmp_path / "s"
    old = lading.build_store(a, dest, progress=False)
    files = {p: p.stat().st_ino for p in dest.rglob("*") if p.is_file() and p.name != "meta.json"}
    new = lading.build_store(b, dest, progress=False)
    assert new.snapshot != old.snapshot and old.snapshot.startswith("snap-")
    for path, inode in files.items():  # every file of the old snapshot is as it was
        assert path.stat().st_ino == inode
    assert old["a3"] == "A text 3" and "b3" not in old  # pinned: still the old snapshot
    assert new["b3"] == "B text 3" and lading.open_store(dest).snapshot == new.snapshot
    history = json.loads((dest / "meta.json").read_text())["history"]
    assert [h["snapshot"] for h in history] == [old.snapshot]  # kept through its grace


def test_a_pickled_store_reopens_its_snapshot_or_says_it_is_gone(
    tmp_path: Path, no_grace: None
) -> None:
    a, b = _source(tmp_path / "a.tsv", "A"), _source(tmp_path / "b.tsv", "B")
    dest = tmp_path / "s"
    old = lading.build_store(a, dest, progress=False)
    blob = pickle.dumps(old)
    assert old.snapshot.encode() in blob and b"A text" not in blob
    assert pickle.loads(blob)["a1"] == "A text 1"
    lading.build_store(b, dest, progress=False)  # grace 0: the old snapshot goes at once
    assert not (dest / old.snapshot).exists()
    assert old["a2"] == "A text 2"  # this process mapped it before: still readable
    copy = pickle.loads(blob)
    with pytest.raises(SnapshotGoneError, match=rf"snapshot {old.snapshot} was removed.*again"):
        copy["a1"]


def test_old_snapshots_go_only_after_their_grace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dest = tmp_path / "s"
    sources = [_source(tmp_path / f"{x}.tsv", x) for x in "ABC"]
    first = lading.build_store(sources[0], dest, progress=False)
    second = lading.build_store(sources[1], dest, progress=False)
    assert (dest / first.snapshot).is_dir()  # replaced just now: within the 600 s
    monkeypatch.setenv(snapshot.GRACE_ENV, "0")
    third = lading.build_store(sources[2], dest, progress=False)
    names = sorted(p.name for p in dest.iterdir())
    assert names == ["meta.json", third.snapshot]
    assert {first.snapshot, second.snapshot}.isdisjoint(names)


def test_a_file_gone_between_manifest_and_open_retries_the_new_manifest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_grace: None
) -> None:
    """The race a reader can lose: it read meta.json, then a commit removed those files."""
    a, b = _source(tmp_path / "a.tsv", "A"), _source(tmp_path / "b.tsv", "B")
    dest = tmp_path / "s"
    lading.build_store(a, dest, progress=False)
    real = snapshot.check_files
    rebuilt = []

    def rebuild_first(root: Path, manifest: dict, fmt: str, spot: bool = True, **kw: Any) -> None:
        if not rebuilt:
            rebuilt.append("")
            rebuilt[0] = lading.build_store(b, dest, progress=False).snapshot
        real(root, manifest, fmt, spot, **kw)

    monkeypatch.setattr(snapshot, "check_files", rebuild_first)
    store = lading.open_store(dest)
    assert store.snapshot == rebuilt[0] and store["b1"] == "B text 1" and "a1" not in store


def test_a_missing_file_of_the_current_snapshot_is_an_error(tmp_path: Path) -> None:
    dest = tmp_path / "s"
    lading.build_store(_source(tmp_path / "a.tsv", "A"), dest, progress=False)
    shard = next(dest.glob("snap-*/shard-*"))
    (shard / "ids.off").unlink()
    with pytest.raises(StoreFormatError, match=r"ids\.off is missing; the store is incomplete"):
        lading.open_store(dest)


def _as_version_1(dest: Path) -> None:
    """Rewrite a one-shard store in the version 1 layout: every file at the top."""
    meta = json.loads((dest / "meta.json").read_text())
    files = {}
    for name, info in meta["files"].items():
        base = name.rsplit("/", 1)[-1]
        shutil.copy(dest / name, dest / base)
        files[base] = info
    for entry in dest.iterdir():
        if entry.is_dir():
            shutil.rmtree(entry)
    for key in ("snapshot", "shards", "dtypes", "history", "sources", "tokenizer", "build_id"):
        meta.pop(key, None)
    meta["index"].pop("dir")
    (dest / "meta.json").write_text(json.dumps({**meta, "version": 1, "files": files}))


def test_a_version_1_store_opens_as_one_snapshot_and_is_replaced_in_place(
    tmp_path: Path, no_grace: None
) -> None:
    a, b = _source(tmp_path / "a.tsv", "A"), _source(tmp_path / "b.tsv", "B")
    dest = tmp_path / "s"
    lading.build_store(a, dest, progress=False)
    _as_version_1(dest)
    v1 = lading.open_store(dest)
    assert v1.snapshot.startswith("v1-") and v1["a5"] == "A text 5" and v1.ids()[0] == "a0"
    assert lading.stores.verify_store(dest) == []
    new = lading.build_store(b, dest, progress=False)  # a version 1 store is never reused
    assert json.loads((dest / "meta.json").read_text())["version"] == 2
    assert v1["a5"] == "A text 5" and new["b5"] == "B text 5"
    assert sorted(p.name for p in dest.iterdir()) == ["meta.json", new.snapshot]


def test_shard_files_names_each_columns_files(tmp_path: Path) -> None:
    """What a reader of object storage needs from a manifest alone."""
    src = write(
        tmp_path / "c.jsonl", '{"id": "a", "text": "x"}\n{"id": "b", "title": "T", "text": "y"}\n'
    )
    store = lading.build_store(src, tmp_path / "s", progress=False)
    found = layout.shard_files(store.meta)
    assert sorted(found) == ["field.title", "ids", "text"]
    (text,) = found["text"]
    assert (text.shard, text.first, text.rows, text.dtype) == (0, 0, 2, "|u1")
    assert text.data.startswith(store.snapshot + "/shard-00000-of-00001/")
    assert text.data in store.meta["files"] and text.offsets.endswith("text.off")
    assert layout.column_bytes(store.meta, "text") == 2


def test_collection_removes_only_what_lading_made(tmp_path: Path, no_grace: None) -> None:
    """A folder that holds a store may hold other things: a collection never touches them."""
    dest = tmp_path / "s"
    lading.build_store(_source(tmp_path / "a.tsv", "A"), dest, progress=False)
    mine = [dest / "build-notes", dest / "snap-shots", dest / "README.txt"]
    mine[0].mkdir()
    (mine[0] / "x.txt").write_text("keep")
    mine[1].mkdir()
    mine[2].write_text("keep")
    for letter in "BA":
        lading.build_store(_source(tmp_path / f"{letter}.tsv", letter), dest, progress=False)
    assert all(p.exists() for p in mine)
    assert (mine[0] / "x.txt").read_text() == "keep"
    assert sorted(p.name for p in dest.iterdir() if p.name.startswith("snap-2")) == [
        lading.open_store(dest).snapshot
    ]


def test_open_store_can_name_a_kept_snapshot(tmp_path: Path) -> None:
    dest = tmp_path / "s"
    old = lading.build_store(_source(tmp_path / "a.tsv", "A"), dest, progress=False)
    lading.build_store(_source(tmp_path / "b.tsv", "B"), dest, progress=False)
    again = lading.open_store(dest, snapshot=old.snapshot)
    assert again.snapshot == old.snapshot and again["a1"] == "A text 1"
    with pytest.raises(SnapshotGoneError, match="snap-20000101T000000Z-00000000 was removed"):
        lading.open_store(dest, snapshot="snap-20000101T000000Z-00000000")


def _read_in_child(store: lading.PackedStore, out: object) -> None:
    out.put(store["a3"])  # type: ignore[attr-defined]


def test_a_forked_worker_keeps_the_parents_maps(tmp_path: Path, no_grace: None) -> None:
    """Forked after its snapshot was removed, a worker still reads it (the maps it inherited)."""
    import multiprocessing as mp

    dest = tmp_path / "s"
    store = lading.build_store(_source(tmp_path / "a.tsv", "A"), dest, progress=False)
    store["a0"]
    lading.build_store(_source(tmp_path / "b.tsv", "B"), dest, progress=False)
    assert not (dest / store.snapshot).exists()
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    child = ctx.Process(target=_read_in_child, args=(store, out))
    child.start()
    assert out.get(timeout=60) == "A text 3"
    child.join(timeout=60)
    assert child.exitcode == 0


def test_a_version_1_store_uploads_as_it_is(bucket: str, tmp_path: Path) -> None:
    """A version 1 store has no snapshot of its own (its id is made when it is read): its
    upload raised ``KeyError: 'snapshot'`` once uploads stamped a snapshot's manifest."""
    from lading.remote.clients import open_client
    from lading.stores.building.upload import upload

    dest = tmp_path / "s"
    lading.build_store(_source(tmp_path / "a.tsv", "A"), dest, progress=False)
    _as_version_1(dest)
    assert upload(dest, open_client(f"s3://{bucket}/v1")) is None
    remote = lading.open_store(f"s3://{bucket}/v1", cache=tmp_path / "c")
    assert remote.snapshot.startswith("v1-") and remote["a5"] == "A text 5"
