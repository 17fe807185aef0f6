"""Offsets files damaged between their first and last 4 KiB (the bytes the open's spot checksums
read): refused when the store opens, on both routes, never read as wrong documents.

A page of ``text.off`` zeroed in the middle (a classic disk or filesystem failure) kept every
row's start <= end <= size, so a lookup returned ``""`` for a row inside the page and every
document from 0 to the page's end run together for the row after it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import lading
from conftest import store_file, write
from lading.disk import ragged, write_file
from lading.errors import StoreFormatError
from lading.stores.offsets import OffsetStore

DOCS = 3000  # 24 KB of offsets a column: a page in the middle is past both spot-checked ends


@pytest.fixture(autouse=True)
def _none_checked_yet(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forget the files this process found in order: a build returns its store opened, and a
    file damaged in place within the same clock tick as that open can keep its mtime, so the
    open below would trust it (a process checks a file once: :func:`check_in_order`)."""
    monkeypatch.setattr(ragged, "_IN_ORDER", set())


def _source(tmp_path: Path, docs: int = DOCS) -> Path:
    return write(tmp_path / "s.tsv", "".join(f"d{i}\tdoc number {i}\n" for i in range(docs)))


def _zero_page(path: Path, at: int = 8192) -> None:
    """Zero 4 KiB of ``path`` at ``at`` in place: offsets 1024..1535 read as 0."""
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(b"\0" * 4096)


def _refused(path: Path, row: int = 1023) -> str:
    """The message of an open that refuses ``path`` (an offsets file) at ``row``."""
    return rf"{path}: offsets out of order at row {row} \(.*\).*lading verify.*rebuild"


@pytest.mark.parametrize("name", ["text.off", "ids.off"])
def test_a_zeroed_page_of_offsets_is_refused_at_open(route: str, name: str, tmp_path: Path) -> None:
    store = lading.build_store(_source(tmp_path), tmp_path / "store", progress=False)
    path = store_file(store.path, name)
    _zero_page(path)
    with pytest.raises(StoreFormatError, match=_refused(path)):
        lading.open_store(store.path)


def test_a_zeroed_page_in_one_shard_of_a_sharded_store_is_refused(
    route: str, tmp_path: Path
) -> None:
    src = _source(tmp_path, 2 * DOCS)
    for i in range(2):
        lading.build_shard(src, tmp_path / "s", (i, 2), progress=False)
    merged = lading.merge_store(tmp_path / "s")
    path = sorted(merged.path.rglob("shard-00001-of-00002/text.off"))[0]
    _zero_page(path)
    with pytest.raises(StoreFormatError, match=_refused(path)):
        lading.open_store(merged.path)


def test_merged_offsets_out_of_order_are_refused(route: str, tmp_path: Path) -> None:
    """A store merged before merges stopped writing ``text.goff`` is read through it: its
    offsets are checked as a shard's own are."""
    src = _source(tmp_path, 2 * DOCS)
    for i in range(2):
        lading.build_shard(src, tmp_path / "s", (i, 2), progress=False)
    merged = lading.merge_store(tmp_path / "s")
    goff = merged._maps().text.concatenated()[1].astype("<u8")
    goff[1024:1536] = 0
    meta = json.loads((merged.path / "meta.json").read_text())
    name = f"{meta['snapshot']}/text.goff"
    meta["files"][name] = write_file(merged.path / name, goff)
    meta["global_offsets"] = {"text": name}
    (merged.path / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(StoreFormatError, match=_refused(merged.path / name)):
        lading.open_store(merged.path)


def test_an_offset_index_refuses_its_ids_out_of_order(route: str, tmp_path: Path) -> None:
    index = OffsetStore.build(_source(tmp_path), tmp_path / "offsets")
    path = store_file(index.path, "ids.off")
    _zero_page(path)
    with pytest.raises(StoreFormatError, match=_refused(path)):
        OffsetStore(index.path)


def test_each_offsets_file_is_read_once_a_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store is opened in every rank and worker, and again in one process: a file already
    found in order (same device, inode, size and mtime) is not read again; another is."""
    store = lading.build_store(_source(tmp_path), tmp_path / "store", progress=False)
    scanned: list[int] = []
    first_descent = ragged.first_descent

    def counted(offsets: np.ndarray, *args: object) -> int:
        scanned.append(len(offsets))
        return first_descent(offsets, *args)

    monkeypatch.setattr(ragged, "first_descent", counted)
    monkeypatch.setattr(ragged, "_IN_ORDER", set())  # the build opened it: forget that
    lading.open_store(store.path)
    assert len(scanned) == 2  # text.off and ids.off
    lading.open_store(store.path)
    lading.PackedStore(store.path)
    assert len(scanned) == 2
    rebuilt = lading.build_store(_source(tmp_path), store.path, overwrite=True, progress=False)
    assert rebuilt.snapshot != store.snapshot and len(scanned) == 4  # new files: read


def test_a_descent_is_found_in_any_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ragged, "DESCENT_CHUNK", 4)  # chunks overlap by one offset
    for at in range(11):
        offsets = np.arange(1, 13, dtype="<u8") * 2  # never below 1: a descent stays >= 0
        offsets[at + 1] = offsets[at] - 1
        assert ragged.first_descent(offsets) == at, at
    assert ragged.first_descent(np.array([0, 0, 1, 5, 5, 5, 7], dtype="<u8")) == -1
    assert ragged.first_descent(np.array([0], dtype="<u8")) == -1


def test_the_token_corpus_and_the_stores_share_one_check() -> None:
    from lading.lm import corpus_format

    assert corpus_format.first_descent is ragged.first_descent  # one function, not a copy
    offsets = np.array([0, 3, 5, 4, 9, 9], dtype="<u8")
    with pytest.raises(StoreFormatError, match="document 2 ends at 4, before it starts at 5"):
        corpus_format.check_offsets(offsets, 9, {"documents": 5}, "c")
