"""The C helper and the numpy route answer alike: the same rows, the same first absent id, or the
same exception with the same message, for any index (dense, sorted-int, hash) and any batch of
queries, present, absent or malformed; and the same texts or the same error for any ragged column,
damaged or not. Hypothesis draws the stores and the queries (replay: --hypothesis-seed=N)."""

from __future__ import annotations

import enum
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from lading.disk import RaggedColumn, column_paths, native, write_file
from lading.errors import StoreFormatError
from lading.stores.hashindex import key_width
from lading.stores.index import IdIndex, write_index

HELPER = native.load()
pytestmark = pytest.mark.skipif(
    HELPER is None, reason="the C helper is not built here: nothing to compare the numpy route with"
)
SETTINGS = settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


class Text(str):
    """A str subclass: still its text (a numpy string scalar is one too)."""


class Number(int):
    """An int subclass: looked up as str(id), as bool is (True is "True", not 1)."""


class Color(enum.IntEnum):
    RED = 7


class Spelled:
    """Any other object: no id, so absent on both routes, whatever its str() spells."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __str__(self) -> str:
        return self.text


class Refuses:
    def __str__(self) -> str:
        raise RuntimeError("no str for this id")


def answer(call: Callable[[], Any]) -> Any:
    """What a call gave: its value (arrays as lists), or its exception's type and message."""
    try:
        got = call()
    except Exception as e:  # the comparison is the point: any exception, named
        return ("raised", type(e).__name__, str(e))
    if isinstance(got, tuple):
        return tuple(g.tolist() if isinstance(g, np.ndarray) else g for g in got)
    return got.tolist() if isinstance(got, np.ndarray) else got


def on_both_routes(make: Callable[[], Any], call: Callable[[Any], Any]) -> tuple[Any, Any]:
    """``call(make())`` with objects made on the C route, then on the numpy route."""
    got = []
    for helper in (HELPER, None):
        native.NATIVE = helper
        try:
            made = make()
        except StoreFormatError as e:  # refused at open (a damaged index.runs): alike or not
            got.append(("raised", type(e).__name__, str(e)))
            continue
        finally:
            native.NATIVE = HELPER
        got.append(answer(lambda: call(made)))  # noqa: B023 - called at once
    return got[0], got[1]


ints = st.integers(0, 400) | st.integers(0, 10**18 - 1)
stores = st.one_of(
    st.lists(st.integers(0, 300), min_size=1, max_size=120, unique=True).map(lambda v: ("i", v)),
    st.lists(st.integers(0, 10**18 - 1), min_size=1, max_size=120, unique=True).map(
        lambda v: ("i", v)  # mostly sparse: the sorted-int index
    ),
    st.tuples(st.integers(0, 10**18 - 5000), st.integers(1, 2500), st.integers(1, 3000)).map(
        lambda t: ("i", [*range(t[0] + t[2], t[0] + t[2] + t[1]), *range(t[0], t[0] + t[2])])
    ),  # two runs, the second starting lower: the runs index from 2,048 ids
    st.tuples(st.integers(0, 10**18 - 200), st.integers(1, 150)).map(
        lambda t: ("i", list(range(t[0], t[0] + t[1])))
    ),  # one run: the runs index
    st.lists(
        st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), min_size=1),
        min_size=1,
        max_size=120,
        unique=True,
    ).map(lambda v: ("s", v)),
)
odd_ids = st.sampled_from(
    [True, False, None, 7.0, b"7", -1, -(10**30), 10**18, 10**30, "07", "+7", " 7", "٧", "",
     "\ud800", "7\x00", "\x00", "x" * 600, np.bool_(True), np.int64(-7), np.uint64(2**64 - 1),
     Color.RED, Refuses(), Number(3), np.float64(3.0), Spelled("7"), Spelled("D1")]
)  # fmt: skip


def spellings(value: int | str) -> st.SearchStrategy[object]:
    """Ways a caller may spell a stored id: as itself, a str subclass, and, for an integer,
    int, numpy integers and its canonical str (any other object whose str() it is: no id)."""
    options: list[object] = [value, Text(value)]
    if isinstance(value, int):
        options += [str(value), np.int64(value), np.uint64(value)]
        options += [np.int32(value)] if value < 2**31 else []
    return st.sampled_from(options)


def index_dir(root: Path, kind: str, values: list[Any]) -> tuple[Path, dict[str, Any]]:
    if kind == "i":
        keys = np.array(values, dtype=np.int64)
    else:
        encoded = [v.encode() for v in values]
        keys = np.array(encoded, dtype=f"S{key_width(max(map(len, encoded)))}")
    meta, _ = write_index(root, keys, kind == "i")
    return root, meta


@SETTINGS
@given(store=stores, data=st.data())
def test_every_index_answers_alike_on_both_routes(
    tmp_path_factory: pytest.TempPathFactory, store: tuple[str, list[Any]], data: st.DataObject
) -> None:
    kind, values = store
    directory, meta = index_dir(tmp_path_factory.mktemp("index"), kind, values)
    event(meta["kind"])
    present = st.sampled_from(values).flatmap(spellings)
    absent = (ints | st.text(max_size=20)).filter(
        lambda v: v not in values and str(v) not in values
    )
    query = data.draw(st.lists(present | absent | odd_ids, max_size=80), "query")
    c, numpy = on_both_routes(lambda: IdIndex(directory, meta), lambda i: i.lookup(query))
    assert c == numpy, (meta["kind"], query)
    for one in query[:10]:
        c, numpy = on_both_routes(lambda: IdIndex(directory, meta), lambda i: i.row(one))  # noqa: B023
        assert c == numpy, (meta["kind"], one)


@SETTINGS
@given(
    texts=st.lists(st.binary(max_size=12), min_size=1, max_size=40),
    damage=st.lists(st.tuples(st.integers(1, 39), st.integers(0, 600)), max_size=3),
    data=st.data(),
)
def test_every_column_answers_alike_on_both_routes(
    tmp_path_factory: pytest.TempPathFactory,
    texts: list[bytes],
    damage: list[tuple[int, int]],
    data: st.DataObject,
) -> None:
    directory = tmp_path_factory.mktemp("column")
    offsets = np.cumsum([0, *map(len, texts)]).astype("<u8")
    for at, value in damage:  # inner offsets only: the first and last are checked on open
        if at < len(texts):
            offsets[at] = value
    write_file(directory / "text.bin", b"".join(texts))
    write_file(directory / "text.off", offsets)
    n = len(texts)
    rows = data.draw(st.lists(st.integers(0, n - 1) | st.integers(-n - 2, n + 2), max_size=70))
    in_order = np.zeros_like(offsets)
    in_order[-1] = offsets[-1]
    for warm in (True, False):

        def make(warm: bool = warm) -> RaggedColumn:
            # opened on offsets in order, then damaged in place (the map shows it): a file
            # damaged after the open, past its check, so each read's own check is what answers
            with open(directory / "text.off", "r+b") as f:
                f.write(in_order.tobytes())
            column = RaggedColumn(*column_paths(directory, "text"), random_access=True)
            with open(directory / "text.off", "r+b") as f:
                f.write(offsets.tobytes())
            column._read_ahead = not warm
            return column

        def read(column: RaggedColumn) -> Any:
            return column.texts(np.array(rows, dtype=np.int64))

        def views(column: RaggedColumn) -> Any:  # numpy views of the map, as tokens are read
            return [bytes(v) for v in column.arrays(np.array(rows, dtype=np.int64))]

        for call in (read, views):
            c, numpy = on_both_routes(make, call)
            assert c == numpy, (offsets.tolist(), rows, warm, call.__name__)


@SETTINGS
@given(store=stores, data=st.data())
def test_a_damaged_index_answers_alike_on_both_routes(
    tmp_path_factory: pytest.TempPathFactory, store: tuple[str, list[Any]], data: st.DataObject
) -> None:
    # a word of an index file overwritten (bit rot inside a file keeps its size, so it opens):
    # both routes give the same rows (a row < 0 read as absent) or refuse alike, never crash
    kind, values = store
    directory, meta = index_dir(tmp_path_factory.mktemp("index"), kind, values)
    files = sorted(p for p in directory.iterdir() if p.name.startswith("index."))
    path = data.draw(st.sampled_from(files), "file")
    raw = bytearray(path.read_bytes())
    for _ in range(data.draw(st.integers(1, 4), "words")):
        at = data.draw(st.integers(0, max(0, len(raw) - 4)), "at")
        value = data.draw(st.sampled_from([0, 1, 2**31 - 1, 2**32 - 1]) | st.integers(0, 2**32 - 1))
        raw[at : at + 4] = value.to_bytes(4, "little")[: len(raw) - at]
    path.write_bytes(bytes(raw))
    query = data.draw(st.lists(st.sampled_from(values).flatmap(spellings) | odd_ids, max_size=60))
    c, numpy = on_both_routes(lambda: IdIndex(directory, meta), lambda i: i.lookup(query))
    # keys out of order: a binary search finds what its probes happen to see, and numpy's
    # probes depend on the order of the batch itself; either way a row of index.rows or -1
    unordered = meta["kind"] == "sorted-int" and path.name == "index.keys"
    if unordered and c[0] != "raised":
        assert len(c[0]) == len(numpy[0]) == len(query), (c, numpy)
        return
    assert c == numpy, (meta["kind"], path.name, query)
    for one in query[:5]:
        c, numpy = on_both_routes(lambda: IdIndex(directory, meta), lambda i: i.row(one))  # noqa: B023
        if unordered and isinstance(c, int) and isinstance(numpy, int):  # seen: C 1, numpy -1
            assert min(c, numpy) >= -1 and max(c, numpy) < len(values), (c, numpy)
            continue
        assert c == numpy, (meta["kind"], path.name, one)
