"""Maps that keep no file descriptor (:mod:`lading.disk.maps`), under :class:`MappedFile`: the
bytes as written, read-only, alive while a view is, unmapped after, and the fallback to
Python's ``mmap`` where there is no C library to map with."""

from __future__ import annotations

import gc
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from lading.disk import files, maps
from lading.disk.files import MappedFile
from lading.disk.ragged import RaggedColumn, RaggedWriter, column_paths

needs_libc = pytest.mark.skipif(
    maps.c_library() is None, reason="no C library to map with here (Windows or 32-bit)"
)
needs_proc = pytest.mark.skipif(
    not os.path.isdir("/proc/self/fd"), reason="counts descriptors and maps in /proc (Linux)"
)


def _maps_of(path: Path) -> int:
    with open("/proc/self/maps", encoding="utf-8") as f:
        return sum(1 for line in f if line.rstrip("\n").endswith(str(path)))


@needs_libc
@needs_proc
def test_a_mapped_file_keeps_no_descriptor(tmp_path: Path) -> None:
    paths = []
    for i in range(40):
        paths.append(tmp_path / f"f{i}")
        paths[-1].write_bytes(bytes([i]) * (5000 + i))
    before = len(os.listdir("/proc/self/fd"))
    mapped = [MappedFile(p, random_access=i % 2 == 0) for i, p in enumerate(paths)]
    assert len(os.listdir("/proc/self/fd")) == before  # Python's mmap: 40 more
    for i, m in enumerate(mapped):
        assert bytes(m.buffer) == bytes([i]) * (5000 + i)
        assert len(m.buffer) == 5000 + i
        assert m.array(np.uint8).sum() == i * (5000 + i)


@needs_libc
@needs_proc
def test_a_view_outlives_its_mapped_file_and_the_pages_go_with_the_last_view(
    tmp_path: Path,
) -> None:
    path = tmp_path / "data.bin"
    want = np.arange(100_000, dtype=np.int64)
    path.write_bytes(want.tobytes())
    mapped = MappedFile(path)
    array = mapped.array(np.int64)
    piece = mapped.buffer[8:16]
    del mapped
    gc.collect()
    assert _maps_of(path) == 1
    assert np.array_equal(array, want)  # read after the MappedFile is gone
    assert bytes(piece) == want[1:2].tobytes()
    del array
    gc.collect()
    assert _maps_of(path) == 1  # the slice still holds the pages
    del piece
    gc.collect()
    assert _maps_of(path) == 0


@needs_libc
def test_a_map_is_read_only(tmp_path: Path) -> None:
    path = tmp_path / "data.bin"
    path.write_bytes(b"abcdef" * 1000)
    mapped = MappedFile(path)
    array = mapped.array(np.uint8)
    assert not array.flags.writeable
    with pytest.raises(ValueError):
        array.flags.writeable = True  # a write would kill the process (PROT_READ)
    with pytest.raises(TypeError):
        mapped.buffer[0] = 1  # type: ignore[index]
    # nor anything under them: a ctypes array under the view exported a writable buffer, and
    # a write through array.base.obj killed the process (checked here without writing)
    obj: object = array
    for _ in range(10):
        assert not np.frombuffer(obj, dtype=np.uint8).flags.writeable, type(obj)  # type: ignore[call-overload]
        obj = obj.base if isinstance(obj, np.ndarray) else getattr(obj, "obj", None)
        if obj is None:
            break
    assert path.read_bytes() == b"abcdef" * 1000


@needs_libc
def test_a_map_costs_no_ctypes_type_a_size(tmp_path: Path) -> None:
    """Every map of another size made a ctypes array type (~2.8 KB each, for the map's
    life): 20,000 maps of distinct sizes held ~86 MiB more. Maps are views of memory now."""
    import ctypes

    paths = []
    for i in range(50):
        paths.append(tmp_path / f"f{i}")
        paths[-1].write_bytes(b"x" * (1000 + i))
    mapped = [MappedFile(p) for p in paths]
    chain = []
    for m in mapped:
        obj: object = m.buffer
        while obj is not None:
            chain.append(type(obj))
            obj = (
                getattr(obj, "obj", None)
                if isinstance(obj, memoryview)
                else getattr(obj, "base", None)
            )
    assert not any(issubclass(t, ctypes.Array) for t in chain), set(chain)


def test_an_empty_file_maps_to_empty_bytes(tmp_path: Path) -> None:
    path = tmp_path / "empty"
    path.write_bytes(b"")
    mapped = MappedFile(path, random_access=True)
    assert len(mapped.buffer) == 0
    assert len(mapped.array(np.int64)) == 0
    mapped.will_need([0], [0])


def test_a_missing_file_raises_as_before(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        MappedFile(tmp_path / "absent")


def _column(tmp_path: Path) -> tuple[RaggedColumn, list[str]]:
    rows = [f"row {i} " + "é" * (i % 7) for i in range(500)] + [""]
    writer = RaggedWriter(tmp_path, "text")
    for row in rows:
        writer.append(row.encode("utf-8"))
    writer.finish()
    return RaggedColumn(*column_paths(tmp_path, "text"), random_access=True), rows


def test_without_a_c_library_python_mmap_reads_the_same_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Windows and 32-bit processes map with Python's ``mmap`` (one descriptor a map): the
    column reads the same rows, by the C helper and by the numpy route."""
    monkeypatch.setattr(files, "map_file", lambda path: None)
    monkeypatch.setattr(files, "c_library", lambda: None)
    column, rows = _column(tmp_path)
    assert type(column.data.buffer).__name__ == "mmap"
    order = np.arange(len(rows))[::-1].copy()
    assert column.texts(order) == rows[::-1]
    assert column.text(3) == rows[3]
    column.data.will_need([0, 100], [50, 5000])  # Python's madvise, page-aligned


@needs_libc
def test_both_routes_read_the_same_rows(tmp_path: Path) -> None:
    column, rows = _column(tmp_path)
    assert isinstance(column.data.buffer, memoryview)
    order = np.random.default_rng(0).permutation(len(rows))
    assert column.texts(order) == [rows[i] for i in order]
    assert [column.text(i) for i in range(len(rows))] == rows
    column.data.will_need([0, 100], [50, 5000])


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX maps")
def test_the_c_library_is_found_on_64_bit_posix() -> None:
    """Else every map keeps a descriptor again, silently: a 64-bit POSIX CI must find it."""
    if sys.maxsize > 2**32:
        assert maps.c_library() is not None
