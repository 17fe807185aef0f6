"""The packed store's bulk paths (lading.stores.bulk) give what the row-by-row path gives:
a range of texts through Arrow (and through the loop without it), bytes by id, each object the
caller's own; damaged offsets and bytes raise instead of reading stray memory."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import lading
from conftest import store_file
from lading.errors import StoreFormatError
from lading.stores import bulk

TEXTS = ["", "plain ascii", "héllo wörld", "", "日本語のテキスト", "emoji 🙂 ok", "x" * 5000, ""]


@pytest.fixture(params=["arrow", "loop"])
def route(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "arrow":
        pytest.importorskip("pyarrow")
        monkeypatch.setattr(bulk, "_arrow_module", None)  # found afresh
    else:
        monkeypatch.setattr(bulk, "_arrow_module", False)  # as without pyarrow
    monkeypatch.setattr(bulk, "MIN_BULK_ROWS", 2)
    monkeypatch.setattr(bulk, "CHUNK_ROWS", 3)  # several chunks, one cut short
    return str(request.param)


def make_store(tmp_path: Path, n: int = 400) -> tuple[lading.PackedStore, list[str]]:
    texts = [TEXTS[i % len(TEXTS)] + (str(i) if i % 3 else "") for i in range(n)]
    tsv = tmp_path / "docs.tsv"
    tsv.write_text("".join(f"d{i}\t{t}\n" for i, t in enumerate(texts)), encoding="utf-8")
    return lading.build_store(tsv, tmp_path / "store", progress=False), texts


def test_ranges_equal_the_row_path(tmp_path: Path, route: str) -> None:
    store, texts = make_store(tmp_path)
    column = store._maps().text
    slow = column.texts(np.arange(len(store), dtype=np.int64))
    assert slow == texts
    for start, stop in [(0, len(store)), (0, 0), (5, 6), (7, 8), (3, 11), (390, 400)]:
        assert store.texts_range(start, stop) == texts[start:stop], (route, start, stop)
        assert store.texts_at(np.arange(start, stop)) == texts[start:stop]
    assert store.ids() == [f"d{i}" for i in range(len(store))]


def test_a_range_outside_the_store_is_refused(tmp_path: Path, route: str) -> None:
    store, _ = make_store(tmp_path, 10)
    with pytest.raises(IndexError):
        store.texts_range(5, 11)
    with pytest.raises(IndexError):
        store.texts_range(-1, 3)
    with pytest.raises(IndexError):  # past the end through texts_at: the row path's error
        store.texts_at(np.arange(8, 12))


def test_only_consecutive_rows_take_the_bulk_path() -> None:
    rows = np.arange(100, 300, dtype=np.int64)
    assert bulk.contiguous(rows, 300) == (100, 300)
    assert bulk.contiguous(rows, 299) is None  # past the end
    assert bulk.contiguous(rows[::-1].copy(), 300) is None
    gap = rows.copy()
    gap[50], gap[51] = gap[51], gap[50]  # same ends, one swap inside
    assert bulk.contiguous(gap, 300) is None
    assert bulk.contiguous(rows[: bulk.MIN_BULK_ROWS - 1], 300) is None


def test_every_string_is_a_new_object(tmp_path: Path, route: str) -> None:
    store, texts = make_store(tmp_path, 50)
    first, again = store.texts_range(0, 50), store.texts_range(0, 50)
    assert first == again == texts
    long = [i for i, t in enumerate(texts) if len(t) > 1]
    assert all(first[i] is not again[i] for i in long)


def test_bytes_by_id(tmp_path: Path) -> None:
    store, _ = make_store(tmp_path, 60)
    ids = [f"d{i}" for i in (5, 0, 59, 5, 13)]
    got = store.get_many_bytes(ids)
    assert all(type(b) is bytes for b in got)
    assert [b.decode("utf-8") for b in got] == store.get_many(ids)
    with pytest.raises(KeyError, match="nope"):
        store.get_many_bytes(["nope"])


def test_invalid_utf8_raises_as_the_row_path_does(tmp_path: Path, route: str) -> None:
    store, _ = make_store(tmp_path, 40)
    path = store_file(store.path, "text.bin")
    data = bytearray(path.read_bytes())
    start = int(store._maps().text.offsets[25])  # past the bytes open() spot-checks
    assert 4096 < start < len(data) - 4096
    data[start] = 0xFF  # row 25 is no longer UTF-8
    path.write_bytes(bytes(data))
    damaged = lading.PackedStore(store.path, on_stale="ignore")
    with pytest.raises(UnicodeDecodeError):
        damaged.texts_range(20, 30)


def test_damaged_offsets_raise(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    store, _ = make_store(tmp_path, 3000)  # offsets past the bytes open() spot-checks
    path = store_file(store.path, "text.off")
    offsets = np.fromfile(path, dtype="<u8")
    damaged = lading.PackedStore(store.path, on_stale="ignore")
    offsets[1500] = offsets[-1] * 4  # past the data, then back
    with open(path, "r+b") as f:  # damaged after the open (which refuses it: test_damaged_offsets)
        f.write(offsets.tobytes())  # in place: the map shows it
    with pytest.raises(StoreFormatError, match="not ascending"):
        damaged.texts_range(1400, 1600)
