"""Fuzz the C helper's entry points with arbitrary buffers and parameters (hypothesis).

    python tests/native_fuzz.py [EXAMPLES]        (tests/disk/test_native.py runs it, 150)

Any exception but ValueError (Damaged and UnicodeDecodeError are ValueErrors), IndexError,
TypeError or OverflowError fails; so does a wrong answer where one can be checked; a read outside
a buffer may crash. To see every such read, build the helper with AddressSanitizer and run this
with every buffer through malloc (numpy arrays are allocated to their exact size):

    gcc -shared -fPIC -g -O1 -fsanitize=address,undefined -fno-sanitize-recover=undefined \\
        -DLADING_SOURCE_SHA256="\\"$(sha256sum src/lading/disk/_native.c | cut -c1-16)\\"" \\
        $(python3-config --includes) src/lading/disk/_native.c \\
        -o src/lading/disk/_native$(python3-config --extension-suffix)
    LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)" \\
        ASAN_OPTIONS=detect_leaks=0 PYTHONMALLOC=malloc python tests/native_fuzz.py 2000

(then rebuild it normally: python setup.py build_ext --inplace).
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lading.disk import native

C: Any = native.load()
ALLOWED = (ValueError, IndexError, TypeError, OverflowError)
EXAMPLES = int(sys.argv[1]) if len(sys.argv) > 1 else 150
S = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))


def array(raw: bytes) -> np.ndarray:
    """``raw`` in a buffer of exactly its size (a bytes object has a spare NUL after it)."""
    return np.frombuffer(raw, np.uint8).copy()


def call(fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except ALLOWED as e:
        return e


ids = st.lists(
    st.text(max_size=30)
    | st.integers(-(2**70), 2**70)
    | st.booleans()
    | st.none()
    | st.floats(allow_nan=False)
    | st.binary(max_size=5)
    | st.integers(0, 300).map(np.int64)
    | st.integers(0, 2**64 - 1).map(np.uint64)
    | st.sampled_from(["0", "1", "07", "\ud800", "a\x00", "x" * 70]),
    max_size=80,
)


@S
@given(ids, st.binary(max_size=200), st.sampled_from([4, 8, 0, 3, -8, 2**62]))
def dense(query: list[Any], table: bytes, itemsize: int) -> None:
    got = call(C.dense_rows, query, array(table), itemsize)
    if not isinstance(got, Exception):
        rows = np.frombuffer(got[0], np.int64)
        assert len(rows) == len(query) and (rows >= -1).all()


@S
@given(ids, st.binary(max_size=200), st.binary(max_size=200), st.sampled_from([4, 8, 1, -4]))
def sorted_int(query: list[Any], keys: bytes, rows: bytes, itemsize: int) -> None:
    got = call(C.sorted_rows, query, array(keys), array(rows), itemsize)
    if not isinstance(got, Exception):
        assert len(got[0]) == 8 * len(query)


@S
@given(ids, st.binary(max_size=240))
def runs(query: list[Any], table: bytes) -> None:
    got = call(C.runs_rows, query, array(table))
    if not isinstance(got, Exception):
        rows = np.frombuffer(got[0], np.int64)
        assert len(rows) == len(query) and (rows >= -1).all()


@S
@given(
    ids,
    st.binary(max_size=700),
    st.binary(max_size=300),
    st.sampled_from([8, 8, 8, 16, 24, 0, 7, -8, 2**60]),
    st.integers(-3, 12) | st.sampled_from([2**58, 2**59 + 1, 2**62, -(2**63)]),
    st.integers(0, 3) | st.integers(-2, 40),
    st.binary(min_size=8, max_size=40) | st.binary(max_size=8),
)
def hashed(
    query: list[Any], table: bytes, keys: bytes, width: int, buckets: int, spill: int, mult: bytes
) -> None:
    got = call(C.hash_rows, query, array(table), array(keys), width, buckets, spill, array(mult))
    if not isinstance(got, Exception):
        rows = np.frombuffer(got[0], np.int64)
        assert len(rows) == len(query) and (rows >= -1).all()
        assert (rows < len(keys) // width).all()


@S
@given(
    st.lists(st.integers(-(2**63), 2**63 - 1) | st.integers(-2, 8), max_size=70),
    st.binary(max_size=80),
    st.binary(max_size=80),
)
def texts(rows: list[int], offsets: bytes, data: bytes) -> None:
    got = call(C.texts, np.array(rows, np.int64), array(offsets), array(data))
    if not isinstance(got, Exception):
        assert len(got) == len(rows) and all(type(s) is str for s in got)


@S
@given(
    st.lists(st.integers(0, 6), max_size=70),
    st.lists(st.integers(0, 12), min_size=1, max_size=8),
    st.binary(max_size=12),
)
def plausible_texts(rows: list[int], offsets: list[int], data: bytes) -> None:
    """Offsets near the data, so that most batches decode: the right strings, or a refusal."""
    got = call(C.texts, np.array(rows, np.int64), np.array(offsets, "<u8"), array(data))
    if not isinstance(got, Exception):
        assert got == [data[offsets[i] : offsets[i + 1]].decode() for i in rows]


@S
@given(
    st.lists(st.integers(-(2**63), 2**63 - 1) | st.integers(-2, 12), max_size=70),
    st.binary(max_size=120),
    st.lists(st.binary(max_size=20), max_size=4),
)
def parts(rows: list[int], offsets: bytes, data: list[bytes]) -> None:
    """Rows over several parts (a store built in shards): texts, and slices of byte arrays."""
    query = np.array(rows, np.int64)
    seqs = tuple(map(array, data))
    bases = np.cumsum([0, *map(len, data)]).astype("<u8")
    held = call(C.Parts, seqs)  # the parts held once (a store's shards), as lading passes them
    for fn, args in (
        (C.texts, (seqs,)),
        (C.slices, (seqs,)),
        (C.slices, (seqs, bases)),
        (C.slices, (seqs, bases[::-1].copy())),  # bases that do not ascend: refused
        (C.texts, (held,)),
        (C.bytes_of, (held,)),
        (C.bytes_of, (seqs,)),
    ):
        got = call(fn, query, array(offsets), *args)
        if not isinstance(got, Exception):
            assert len(got) == len(rows)


@S
@given(
    st.lists(st.integers(0, 10), max_size=70),
    st.lists(st.binary(max_size=5), min_size=1, max_size=10),
    st.lists(st.integers(0, 10), min_size=1, max_size=3),
)
def plausible_parts(rows: list[int], texts: list[bytes], cuts: list[int]) -> None:
    """Rows laid over parts cut anywhere: each row the bytes of the concatenation, or a
    refusal where a row straddles two parts."""
    whole = b"".join(texts)
    offsets = np.cumsum([0, *map(len, texts)]).astype("<u8")
    bounds = sorted({0, len(whole), *(min(c, len(whole)) for c in cuts)})
    pieces = tuple(array(whole[a:b]) for a, b in itertools.pairwise(bounds)) or (array(b""),)
    got = call(C.slices, np.array(rows, np.int64), offsets, pieces)
    held = call(C.bytes_of, np.array(rows, np.int64), offsets, C.Parts(pieces))
    if not isinstance(got, Exception):
        want = [whole[offsets[r] : offsets[r + 1]] for r in rows]
        assert [g.tobytes() for g in got] == want
        assert held == want and all(type(b) is bytes for b in held)
    else:  # the same refusal, whether the parts are held or given as a tuple
        assert type(held) is type(got), (held, got)


if __name__ == "__main__":
    if C is None:
        sys.exit("the C helper is not built here (python setup.py build_ext --inplace)")
    for fuzz in (dense, sorted_int, runs, hashed, texts, plausible_texts, parts, plausible_parts):
        fuzz()
        print(fuzz.__name__, "ok", flush=True)
