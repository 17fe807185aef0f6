"""The C helper (lading.disk._native) itself: what it does with parameters and files that do not
fit together. lading checks the files before it calls the helper, so these call it directly: the
helper must refuse, never read outside a buffer. A call that could crash runs in a subprocess,
so a crash fails one test instead of ending the run."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import mmap
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import tracemalloc
import types
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from lading.disk import native

HELPER = native.load()
needs_helper = pytest.mark.skipif(
    HELPER is None, reason="the C helper is not built here (python setup.py build_ext --inplace)"
)


def run_isolated(code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter with this checkout's lading (a crash is its rc)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    prelude = "import numpy as np\nfrom lading.disk import native\nC = native.load()\n"
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


@needs_helper
@pytest.mark.parametrize(
    ("buckets", "max_spill"), [(2**58, 3), (2**59 + 1, 0), (2**62, 1), (1, 2), (1, 2**62)]
)
def test_a_hash_meta_that_does_not_fit_the_table_is_refused(buckets: int, max_spill: int) -> None:
    # buckets * 64 wrapped past 2**64 and passed the size check: the lookup read far outside
    # the 64-byte table (SIGSEGV); a spill past every bucket went round the table for ever
    done = run_isolated(
        f"""
        table, keys = np.full(8, 1 << 32 | 1, np.uint64), np.zeros(1, np.uint64)
        try:
            C.hash_rows(["a", "b", "zz" * 3], table, keys, 8, {buckets}, {max_spill},
                        np.ones(8, np.uint64))
        except C.Damaged as e:
            print("refused:", e)
        """
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "refused: hash index: table or width does not match its meta" in done.stdout


def test_a_helper_built_from_another_source_is_not_used(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # the in-place .so of an editable install outlives a pull that changes _native.c: it was
    # used as it was (old rules, or an AttributeError from a missing function at import)
    stale = types.ModuleType("lading.disk._native")
    stale.SOURCE_SHA256 = "0" * 16  # type: ignore[attr-defined]
    stale.configure = lambda integer: None  # type: ignore[attr-defined]
    monkeypatch.setattr(native.importlib, "import_module", lambda name: stale)
    with caplog.at_level(logging.DEBUG, logger="lading.disk.native"):
        assert native.load() is None
    assert "built from another _native.c" in caplog.text and "build_ext --inplace" in caplog.text
    del stale.SOURCE_SHA256  # built some other way: no stamp at all
    assert native.load() is None


@needs_helper
def test_the_helper_built_here_is_from_this_source() -> None:
    source = Path(native.__file__).with_name("_native.c").read_bytes()
    built = getattr(HELPER, "SOURCE_SHA256", None)
    assert built == hashlib.sha256(source).hexdigest()[:16], "rebuild: build_ext --inplace"


def test_a_helper_that_cannot_be_loaded_leaves_the_numpy_route(tmp_path: Path) -> None:
    # a .so for another Python or machine, or a broken one: an ImportError, said in the log
    shutil.copytree(Path(native.__file__).parents[1], tmp_path / "lading")
    so = tmp_path / "lading" / "disk" / ("_native" + sysconfig.get_config_var("EXT_SUFFIX"))
    so.write_bytes(b"not an ELF file")
    code = (
        "import logging; logging.basicConfig(level=logging.DEBUG)\n"
        "import lading; from lading.disk import native\n"
        "print('route:', native.NATIVE, lading.__file__)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"route: None {tmp_path}" in done.stdout
    assert "lading.disk._native is not used" in done.stderr and "numpy route" in done.stderr


@needs_helper
def test_no_buffer_or_parameters_make_the_helper_crash_or_lie() -> None:
    # hypothesis over the entry points, in a process of its own (see tests/native_fuzz.py
    # for the AddressSanitizer run); before the fix, 2**58 buckets crashed it within seconds
    done = subprocess.run(
        [sys.executable, str(Path(__file__).parents[1] / "native_fuzz.py"), "150"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        timeout=600,
    )
    assert done.returncode == 0, (done.returncode, done.stdout[-3000:], done.stderr[-3000:])
    assert done.stdout.split() == [w for f in ("dense", "sorted_int", "runs", "hashed", "texts",
                                   "plausible_texts", "parts", "plausible_parts")
                                   for w in (f, "ok")]  # fmt: skip


class _Str:
    def __str__(self) -> str:
        return "D7"


class Text(str):
    pass


class Number(int):
    pass


class _Raises(int):  # an int subclass is looked up as its str() (another object is no id)
    def __str__(self) -> str:
        raise RuntimeError("no str")


@needs_helper
@pytest.mark.slow
def test_no_call_leaks_on_success_or_error(tmp_path: Path) -> None:
    # every entry point, on success and on each error path, called CALLS times: the argument
    # objects keep their reference counts and Python's heap does not grow (a leaked str a
    # call shows as ~1 MB here); every buffer is released (the maps close afterwards)
    calls = int(os.environ.get("LADING_LEAK_CALLS", "20000"))
    c = HELPER
    table = np.zeros(2 * 8, "<u8")
    table[0] = 0xAB << 32 | 1  # row 0 under a tag no query has
    keys, mult = np.frombuffer(b"D1".ljust(8, b"\0"), "<u8"), np.ones(8, "<u8")
    past = table.copy()
    past[:] = 0xFFFFFFFF  # every slot names row 2**32 - 2: a damaged table for any query tag
    write = {"t": table, "k": keys, "o": np.array([0, 2, 5, 5, 9], "<u8")}
    for name, value in write.items():
        (tmp_path / name).write_bytes(value.tobytes())
    (tmp_path / "d").write_bytes(b"ok\xc3\xa9!abcd")
    maps = {}
    for name in ("t", "k", "o", "d"):
        with open(tmp_path / name, "rb") as f:
            maps[name] = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    t, k, o, d = maps["t"], maps["k"], maps["o"], maps["d"]
    ids = ["D1", "q" * 600, "\ud800", "D\x00", np.int64(3), _Str(), Text("D9"), Number(4), 7.0]
    rows = np.array([0, 1, 3, 2, 0], np.int64)
    # the calls' arrays are made once: numpy keeps a cache of small allocations that a fresh
    # array a call fills over the first thousands of calls, and that would read as our leak
    many, two = np.tile(rows, 20), np.array([0, 9])
    bad_offsets = np.array([0, 7, 3, 100], "<u8")
    dense_table, sorted_table = np.arange(9, dtype="<i4"), np.arange(9, dtype="<i8")
    runs_table = np.array([0, 5, 0, 3, 3, 4], dtype="<i8")  # ids 0-2 -> rows 0-2, 5-8 -> 3-6
    lists = [[1, 2, 3], [], [65535, 0] * 50]
    held_data, held_offsets = c.Parts((d, d)), c.Parts((o, o))  # each part's own offsets
    bases, bad_bases = np.array([0, 9, 18], "<u8"), np.array([0, 20, 18], "<u8")
    cases: dict[str, Callable[[], object]] = {
        "dense": lambda: c.dense_rows(ids * 10, dense_table, 4),
        "dense, __str__ raises": lambda: c.dense_rows([*ids, _Raises(1)], b"", 4),
        "dense, itemsize": lambda: c.dense_rows(ids, b"", 3),
        "sorted": lambda: c.sorted_rows(ids * 10, sorted_table, b"\0" * 72, 8),
        "sorted, not a sequence": lambda: c.sorted_rows(5, b"", b"", 8),
        "runs": lambda: c.runs_rows(ids * 10, runs_table),
        "runs, partial": lambda: c.runs_rows(ids, runs_table[:5]),
        "hash": lambda: c.hash_rows(ids * 10, t, k, 8, 2, 1, mult),
        "hash, __str__ raises": lambda: c.hash_rows([*ids, _Raises(1)], t, k, 8, 2, 1, mult),
        "hash, damaged": lambda: c.hash_rows(ids, past, k, 8, 2, 1, mult),
        "hash, meta": lambda: c.hash_rows(ids, t, k, 8, 3, 0, mult),
        "texts": lambda: c.texts(many, o, d),
        "texts, row": lambda: c.texts(two, o, d),
        "texts, utf-8": lambda: c.texts(rows, o, b"ok\xff\xfeabcde"),
        "texts, offsets": lambda: c.texts(rows, bad_offsets, d),
        "texts, parts": lambda: c.texts(many, o, (d, d)),
        "texts, parts damaged": lambda: c.texts(rows, bad_offsets, (d, d)),
        "texts, no parts": lambda: c.texts(rows, o, ()),
        "slices": lambda: c.slices(many, o, (d, d)),
        "slices, row": lambda: c.slices(two, o, (d,)),
        "slices, not sliceable": lambda: c.slices(rows, o, (d, 5)),
        "slices, bases": lambda: c.slices(many, o, (d, d), bases),
        "slices, bad bases": lambda: c.slices(rows, o, (d, d), bad_bases),
        "texts, held parts": lambda: c.texts(many, held_offsets, held_data),
        "texts, held parts, utf-8": lambda: c.texts(np.array([1, 5]), held_offsets, held_data),
        "bytes_of": lambda: c.bytes_of(many, o, d),
        "bytes_of, held parts": lambda: c.bytes_of(many, held_offsets, held_data),
        "bytes_of, held parts damaged": lambda: c.bytes_of(rows, bad_offsets, held_data),
        "Parts": lambda: c.Parts((d, o, t)),
        "Parts, not a buffer": lambda: c.Parts((d, 5)),
        "flat_ids": lambda: c.flat_ids(lists, 2, 7),
        "flat_ids, too large": lambda: c.flat_ids(lists, 2, 70000),
        "flat_ids, an id too large": lambda: c.flat_ids([*lists, [1, 70000]], 2, -1),
        "flat_ids, not an int": lambda: c.flat_ids([*lists, [1, 1.5]], 4, -1),
        "flat_ids, not a list": lambda: c.flat_ids([*lists, (1, 2)], 4, -1),
    }
    watched = [*ids, *lists, t, k, o, d, rows, mult, many, two, bad_offsets]
    leaks = []
    for name, case in cases.items():
        for _ in range(1000):  # warm: each str's cached UTF-8, free lists
            with contextlib.suppress(ValueError, IndexError, TypeError, RuntimeError):
                case()
        refs = [sys.getrefcount(x) for x in watched]
        tracemalloc.start()
        for _ in range(calls):
            with contextlib.suppress(ValueError, IndexError, TypeError, RuntimeError):
                case()
        grown = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        if grown > 64_000 or refs != [sys.getrefcount(x) for x in watched]:
            leaks.append((name, grown))
    held_data = held_offsets = None  # (they held the maps' buffers: the maps close after)
    for m in maps.values():
        m.close()  # BufferError while a call still holds its buffer
    assert not leaks, leaks


@needs_helper
def test_parts_hold_their_buffers_for_their_life_and_read_as_the_tuple() -> None:
    """A store's shards' buffers held once (``Parts``) read as the tuple of them does, and
    stay exported while held: a map under them cannot be closed mid-call."""
    data = [np.frombuffer(b"abcdef", np.uint8).copy(), np.frombuffer(b"ghij", np.uint8).copy()]
    views = [memoryview(x) for x in data]
    held = HELPER.Parts(tuple(views))
    assert len(held) == 2
    with pytest.raises(BufferError):
        views[0].release()  # exported to the Parts
    offsets = (np.array([0, 2, 6], "<u8"), np.array([0, 4], "<u8"))  # rows: 2 in part 0, 1
    rows = np.array([2, 0, 1], np.int64)
    want = HELPER.texts(rows, offsets, tuple(views))
    assert want == ["ghij", "ab", "cdef"]
    assert HELPER.texts(rows, HELPER.Parts(offsets), held) == want
    got = HELPER.bytes_of(rows, HELPER.Parts(offsets), held)
    assert got == [b"ghij", b"ab", b"cdef"] and all(type(b) is bytes for b in got)
    with pytest.raises(IndexError):
        HELPER.texts(np.array([3]), HELPER.Parts(offsets), held)  # 3 rows in all
    with pytest.raises(ValueError):
        HELPER.Parts(())
    with pytest.raises(TypeError):
        HELPER.Parts(tuple(views), extra=1)
    del held
    views[0].release()  # released with the Parts


def test_lading_native_0_turns_the_helper_off_and_says_so(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("LADING_NATIVE", "0")
    with caplog.at_level(logging.DEBUG, logger="lading.disk.native"):
        assert native.load() is None
    assert "not used: LADING_NATIVE=0; lookups take the numpy route" in caplog.text


@needs_helper
@pytest.mark.parametrize("itemsize", [2, 4])
@pytest.mark.parametrize("eos", [None, 0, 3])
def test_flat_ids_lays_out_what_the_numpy_route_does(
    itemsize: int, eos: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A token corpus's ids flattened by the helper (``flat_ids``) are the bytes and lengths
    of the numpy route (``np.fromiter`` over the lists), end-of-text ids included."""
    from lading.stores.tokens import flat_ids

    seed = int(os.environ.get("LADING_TEST_SEED", "5"))
    print(f"seed {seed} (LADING_TEST_SEED)")
    rng = np.random.default_rng(seed)
    top = 65536 if itemsize == 2 else 2**32
    ids = [rng.integers(0, top, int(n)).tolist() for n in rng.integers(0, 300, 200)]
    ids[7] = [top - 1, 0]  # the extremes
    dtype = np.dtype("<u2" if itemsize == 2 else "<u4")
    monkeypatch.setattr(native, "NATIVE", None)
    want = flat_ids(ids, dtype, eos)
    monkeypatch.setattr(native, "NATIVE", HELPER)
    got = flat_ids(ids, dtype, eos)
    assert got[0] == want[0]
    assert got[1].tolist() == want[1].tolist()


@needs_helper
def test_flat_ids_refuses_what_does_not_fit_naming_it() -> None:
    with pytest.raises(ValueError, match="id 65536 of list 1 does not fit 2 bytes"):
        HELPER.flat_ids([[1], [65536]], 2, -1)
    with pytest.raises(OverflowError):
        HELPER.flat_ids([[-1]], 4, -1)
    with pytest.raises(TypeError, match="item 0 is not a list"):
        HELPER.flat_ids([(1, 2)], 4, -1)
    with pytest.raises(ValueError, match="tail does not fit"):
        HELPER.flat_ids([[1]], 2, 65536)
    with pytest.raises(ValueError, match="itemsize must be 2 or 4"):
        HELPER.flat_ids([[1]], 8, -1)
    assert HELPER.flat_ids([], 2, 5) == (b"", b"")
