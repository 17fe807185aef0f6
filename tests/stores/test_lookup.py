"""Lookups by id on both routes (the C helper and numpy): exact for every kind of id, absent ids
absent, damaged files refused. Speed is benchmarks/bench_index.py's, not a test's."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lading
from conftest import distinct_ids, write
from lading.disk import RaggedColumn, column_paths, native, write_file
from lading.errors import StoreFormatError
from lading.stores import hashindex
from lading.stores.hashindex import SLOTS, hash_words, query_words, write_hash_index
from lading.stores.index import IdIndex
from lading.stores.layout import index_dir
from lading.stores.shards import ShardedColumn


def build(tmp_path: Path, ids: list[str], name: str = "s") -> lading.PackedStore:
    src = write(tmp_path / f"{name}.tsv", "".join(f"{i}\ttext of {i}\n" for i in ids))
    return lading.build_store(src, tmp_path / name, progress=False)


CORPORA: dict[str, tuple[list[str], str]] = {
    "dense": ([str(i) for i in random.Random(1).sample(range(300), 300)], "dense"),
    "8..307": ([str(i) for i in range(8, 308)], "runs"),  # one run of consecutive ids
    "two runs": ([str(i) for i in [*range(5000, 6100), *range(8, 1108)]], "runs"),
    "7i+3": ([str(7 * i + 3) for i in range(300)], "dense"),  # 8 slots per id: still a table
    "sparse": ([str(v) for v in random.Random(2).sample(range(10**12), 300)], "sorted-int"),
    "strings": (
        [f"D{v}" for v in random.Random(3).sample(range(4_000_000), 200)]
        + ["007", "7", "0", "é", "日本語の文書", "x" * 8, "x" * 9, "a b", "12345678901234567890"]
        + ["clueweb12-0000wb-00-00001", "y" * 600, "z" * 4000],  # longer than 512 bytes too
        "hash",
    ),
}


@pytest.mark.parametrize("corpus", list(CORPORA))
def test_every_present_id_finds_its_own_document(
    route: str, corpus: str, tmp_path: Path, rng: random.Random
) -> None:
    ids, kind = CORPORA[corpus]
    store = build(tmp_path, ids)
    assert store.meta["index"]["kind"] == kind
    query = [rng.choice(ids) for _ in range(500)]  # duplicates, and more than one C chunk
    assert store.get_many(query) == [f"text of {i}" for i in query]
    assert store.find_rows(query).tolist() == [ids.index(i) for i in query]
    numbers = [i for i in ids if i.isdigit() and (i == "0" or i[0] != "0") and len(i) <= 18]
    for spell in (int, np.int64, np.uint64):
        assert store.get_many([spell(i) for i in numbers]) == [f"text of {i}" for i in numbers]
    small = [i for i in numbers if int(i) < 2**31]
    assert store.get_many([np.int32(i) for i in small]) == [f"text of {i}" for i in small]
    one = rng.choice(ids)
    assert store[one] == f"text of {one}" and one in store
    assert store.get_many([]) == [] and store.find_rows([]).tolist() == []
    assert store.get_many(tuple(ids[:3])) == [f"text of {i}" for i in ids[:3]]


ABSENT: list[object] = [
    "404404",
    "07",
    "+7",
    " 7",
    "7 ",
    "٧",
    "7.0",
    "",
    "D1\x00",
    "\x00",
    "7\x00",
    "\ud800",
    "x" * 10_000,
    "é" * 300,
    -1,
    10**18,
    10**30,
    -(10**30),
    True,
    False,
    7.0,
    np.bool_(True),
    np.int64(-7),
    np.uint64(2**64 - 1),
    None,
    b"7",
]


@pytest.mark.parametrize("corpus", list(CORPORA))
def test_absent_ids_are_absent_on_every_route(route: str, corpus: str, tmp_path: Path) -> None:
    ids, kind = CORPORA[corpus]
    store = build(tmp_path, [i for i in ids if i != "7"] + (["D1"] if kind == "hash" else []))
    assert store.meta["index"]["kind"] == kind
    present = ids[0]
    for absent in ABSENT:
        assert store.find_rows([present, absent]).tolist()[1] == -1, repr(absent)
        assert absent not in store, repr(absent)
        with pytest.raises(KeyError, match="is not in"):
            store.get_many([present, absent, present])
        with pytest.raises(KeyError):
            store[absent]


def test_ids_7i_plus_3_get_a_table_not_a_binary_search(route: str, tmp_path: Path) -> None:
    # 8 id slots per id (32 bytes an id): up to 4 before, so these took the sorted-int search
    ids = [str(7 * i + 3) for i in range(30_000)]
    store = build(tmp_path, ids)
    assert store.meta["index"]["kind"] == "dense"
    assert store.get_many([3, 10, 7 * 29_999 + 3]) == ["text of 3", "text of 10", "text of 209996"]
    assert store.find_rows([4, 7 * 30_000 + 3, 8 * 30_000 + 65_536]).tolist() == [-1, -1, -1]
    sparse = build(tmp_path, [str(20 * i) for i in range(30_000)], "twenty")
    assert sparse.meta["index"]["kind"] == "sorted-int"


def test_the_first_absent_id_is_named(route: str, tmp_path: Path) -> None:
    store = build(tmp_path, ["D1", "D2"])
    with pytest.raises(KeyError, match="'nope'"):
        store.get_many(["D1", "nope", "D2", "also-not"])
    dense = build(tmp_path, ["0", "1", "2"], "dense")
    with pytest.raises(KeyError, match="id 17 "):
        dense.get_many([0, 1, 17, 18])


def test_a_nul_in_a_query_never_reads_as_its_prefix(route: str, tmp_path: Path) -> None:
    # keys are zero-padded: numpy's S dtype dropped the trailing NUL and "D1\x00" found "D1"
    store = build(tmp_path, ["D1", "D22"])
    assert store.find_rows(["D1\x00", "D22\x00\x00", "D1"]).tolist() == [-1, -1, 0]
    with pytest.raises(KeyError, match="is not in"):
        store.get_many(["D1\x00"])


def test_ids_longer_than_512_bytes_build_and_are_found(route: str, tmp_path: Path) -> None:
    # 64 hash multipliers covered 512 bytes: a longer id failed the build (numpy broadcast)
    ids = ["a" * 513, "b" * 2000, "short", "é" * 700]
    store = build(tmp_path, ids)
    assert store.get_many(ids[::-1]) == [f"text of {i}" for i in ids[::-1]]
    assert store.find_rows(["a" * 512, "a" * 514, "b" * 1999]).tolist() == [-1, -1, -1]


def test_found_rows_belong_to_the_caller(route: str, tmp_path: Path) -> None:
    store = build(tmp_path, ["D1", "D2", "D3"])
    rows = store.find_rows(["D2", "D3"])
    rows[0] = 7  # writable, and no later call changes it
    again = store.find_rows(["D1", "D1"])
    assert rows.tolist() == [7, 2] and again.tolist() == [0, 0]
    assert store.rows(np.array(["D3", "D1"])).tolist() == [2, 0]


def test_both_routes_agree_on_random_batches(tmp_path: Path, rng: random.Random) -> None:
    if native.load() is None:
        pytest.skip("the C helper is not built here: nothing to compare the numpy route with")
    for corpus, (ids, _) in CORPORA.items():
        build(tmp_path, ids, corpus)
        queries: list[object] = [*ids, *ABSENT, *(str(rng.randrange(10**13)) for _ in range(50))]
        queries += [int(i) for i in ids if i.isdigit() and len(i) <= 18]
        for _ in range(20):
            batch = [rng.choice(queries) for _ in range(rng.randrange(1, 150))]
            got = {}
            for helper in (native.load(), None):
                native.NATIVE = helper
                try:
                    store = lading.open_store(tmp_path / corpus)
                    got[helper is None] = store.find_rows(batch).tolist()
                finally:
                    native.NATIVE = native.load()
            assert got[True] == got[False], (corpus, batch)


def _hash_dir(tmp_path: Path, ids: list[str]) -> tuple[Path, dict[str, object], int]:
    width = max(8, -(-max(len(i.encode()) for i in ids) // 8) * 8)
    words, _ = query_words(ids, width)
    meta, _ = write_hash_index(tmp_path, np.ascontiguousarray(words), np.dtype("<i4"))
    return tmp_path, meta, width


def test_a_tag_collision_never_returns_another_document(route: str, tmp_path: Path) -> None:
    directory, meta, width = _hash_dir(tmp_path, ["alpha", "beta"])
    words, _ = query_words(["gamma"], width)
    h = int(hash_words(words)[0])
    bucket = ((h & 0xFFFFFFFF) * int(meta["buckets"])) >> 32
    table = np.fromfile(directory / "index.table", "<u8").reshape(-1, SLOTS)
    free = int(np.flatnonzero(table[bucket] == 0)[0])
    table[bucket, free] = ((h >> 32) << 32) | 1  # gamma's tag, pointing at row 0 ("alpha")
    write_file(directory / "index.table", table)
    index = IdIndex(directory, meta)
    assert index.rows(["gamma", "alpha", "beta"]).tolist() == [-1, 0, 1]
    assert index.row("gamma") == -1 and index.row("alpha") == 0


def test_full_buckets_spill_and_every_id_is_still_found(
    route: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hashindex, "_LOAD", SLOTS)  # 8 ids a bucket on average: many spill
    ids = [f"id-{i}" for i in range(2000)]
    directory, meta, _ = _hash_dir(tmp_path, ids)
    assert int(meta["max_spill"]) > 0
    index = IdIndex(directory, meta)
    assert index.rows(ids).tolist() == list(range(len(ids)))
    assert (index.rows([f"id-{i}" for i in range(2000, 2500)]) == -1).all()


def _column(directory: Path, data: bytes, offsets: list[int]) -> RaggedColumn:
    """A column of ``data`` opened on offsets in order, then given ``offsets`` in place: a
    file damaged after the open, which the open's check (offsets never go down) did not see
    and each read's check of its rows must (the map shows the new bytes)."""
    write_file(directory / "text.bin", data)
    write_file(directory / "text.off", np.array([0] * (len(offsets) - 1) + [len(data)], "<u8"))
    column = RaggedColumn(*column_paths(directory, "text"), random_access=True)
    with open(directory / "text.off", "r+b") as f:
        f.write(np.array(offsets, dtype="<u8").tobytes())
    column._read_ahead = False  # warm: a batch takes the C helper where it is built
    return column


@pytest.mark.parametrize("warm", [True, False])  # cold: the batch's pages are asked for first
def test_damaged_offsets_raise_on_every_route(route: str, warm: bool, tmp_path: Path) -> None:
    # numpy sliced them: row 0 came back cut to the data ("abcde"), descending row 1 as ""
    column = _column(tmp_path, b"abcde", [0, 100, 2, 5])  # row 0 ends past the data
    column._read_ahead = not warm
    damaged = r"text\.off: the offsets of row {} \({}\) are not within the data \(5 bytes\)"
    with pytest.raises(StoreFormatError, match=damaged.format(0, r"0\.\.100")):
        column.texts(np.array([2, 0, 1]))
    with pytest.raises(StoreFormatError, match=damaged.format(1, r"100\.\.2")):
        column.texts(np.array([1]))  # 100..2: descending
    with pytest.raises(StoreFormatError, match=damaged.format(1, r"100\.\.2")):
        column.text(1)
    assert column.texts(np.array([2, 2])) == ["cde", "cde"] and column.text(2) == "cde"


@pytest.mark.parametrize("warm", [True, False])
def test_rows_outside_the_column_raise_on_every_route(
    route: str, warm: bool, tmp_path: Path
) -> None:
    # numpy read row -1 as "" (offsets[-1]..offsets[0]) and -2 as the last row: a -1 from
    # find_rows (absent) handed to texts_at came back as an empty document, no error
    column = _column(tmp_path, b"abcde", [0, 2, 5])
    column._read_ahead = not warm
    for bad in ([-1], [0, -2], [2], [1, 3], [-(2**63)], [2**40], [0] * 40 + [-1]):
        first = next(r for r in bad if not 0 <= r < 2)
        with pytest.raises(IndexError, match=rf"^row {first} out of range for 2 rows$"):
            column.texts(np.array(bad))
        with pytest.raises(IndexError, match=rf"^row {first} out of range for 2 rows$"):
            column.arrays(np.array(bad))
    with pytest.raises(IndexError, match=r"^row -1 out of range for 2 rows$"):
        column.text(-1)
    assert column.texts(np.array([1, 0])) == ["cde", "ab"]


def test_a_batch_is_checked_whole_before_anything_is_decoded(route: str, tmp_path: Path) -> None:
    # the helper checked (and decoded) 32 rows at a time: a bad row 40 raised after an invalid
    # row 0 had, where numpy checks the whole batch first; both now answer as numpy does
    column = _column(tmp_path, b"ok\xff\xfe", [0, 2, 4, 99, 4])  # row 1 not UTF-8, 2 past the end
    with pytest.raises(IndexError, match="row 7 out of range"):
        column.texts(np.array([1] * 40 + [7]))
    with pytest.raises(StoreFormatError, match="offsets of row 2"):
        column.texts(np.array([1] * 40 + [2]))
    with pytest.raises(UnicodeDecodeError):
        column.texts(np.array([0] * 40 + [1]))


def test_invalid_utf8_raises_on_both_routes(route: str, tmp_path: Path) -> None:
    column = _column(tmp_path, b"ok\xff\xfe", [0, 2, 4])
    assert column.texts(np.array([0, 0])) == ["ok", "ok"]
    with pytest.raises(UnicodeDecodeError):
        column.texts(np.array([0, 1]))


def test_an_id_whose_str_empties_the_batch_cannot_upset_the_helper(
    route: str, tmp_path: Path
) -> None:
    store = build(tmp_path, ["D1", "D2", "D3"])
    batch: list[object] = []

    class Odd(int):  # an int subclass: an id, looked up as its str() (an object is no id)
        def __str__(self) -> str:
            batch.clear()  # the helper iterates its own copy of the ids
            return "D1"

    batch += [Odd(0), "D2", *["D3"] * 100]
    if route == "c":
        assert store.find_rows(batch).tolist() == [0, 1, *[2] * 100]
    else:
        store.find_rows(batch)  # the numpy route reads what is left; no crash either way


def test_a_hash_table_of_the_wrong_size_is_refused(tmp_path: Path) -> None:
    directory, meta, _ = _hash_dir(tmp_path, ["alpha", "beta", "gamma"])
    table = np.fromfile(directory / "index.table", "<u8")
    write_file(directory / "index.table", table[:-1])
    with pytest.raises(
        StoreFormatError, match=r"index.table \(120 bytes\) .* do not match 2 buckets"
    ):
        IdIndex(directory, meta)


@settings(max_examples=60, deadline=None)
@given(
    ids=distinct_ids(),
    absent=st.lists(st.text(max_size=50), max_size=30),
)
def test_the_helper_and_numpy_find_the_same_rows_in_any_hash_index(
    tmp_path_factory: pytest.TempPathFactory, ids: list[str], absent: list[str]
) -> None:
    helper = native.load()
    if helper is None:
        pytest.skip("the C helper is not built here: nothing to compare the numpy route with")
    directory, meta, _ = _hash_dir(tmp_path_factory.mktemp("idx"), ids)
    query = ids + [a for a in absent if a not in set(ids)]
    expected = list(range(len(ids))) + [-1] * (len(query) - len(ids))
    for route in (helper, None):
        native.NATIVE = route
        try:
            assert IdIndex(directory, meta).rows(query).tolist() == expected, route
        finally:
            native.NATIVE = helper


def test_a_spill_past_every_bucket_is_refused(route: str, tmp_path: Path) -> None:
    # a damaged max_spill with every bucket full sent an absent id round the table for ever
    directory, meta, _ = _hash_dir(tmp_path, ["alpha", "beta", "gamma"])
    assert meta["max_spill"] < meta["buckets"] == 2  # what a build writes: at most buckets - 1
    write_file(directory / "index.table", np.full(2 * SLOTS, 1 << 32 | 1, "<u8"))
    with pytest.raises(StoreFormatError, match="max_spill 2 is not below its 2 buckets"):
        IdIndex(directory, {**meta, "max_spill": 2})


@pytest.mark.parametrize("where", ["home", "spilled"])
def test_a_slot_past_the_keys_is_a_damaged_index_on_both_routes(
    route: str, where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the C helper skipped such a slot (its id then read as absent), numpy raised its own
    # IndexError; a slot is only read when its tag is the query's, so only that id's lookups see it
    if where == "spilled":
        monkeypatch.setattr(hashindex, "_LOAD", SLOTS)  # full buckets: ids live in the next one
    ids = [f"id-{i}" for i in range(400)]
    directory, meta, width = _hash_dir(tmp_path, ids)
    table = np.fromfile(directory / "index.table", "<u8").reshape(-1, SLOTS)
    words, _ = query_words(ids, width)
    home = ((hash_words(words) & 0xFFFFFFFF) * int(meta["buckets"])) >> 32
    rows = (table & 0xFFFFFFFF).astype(np.int64) - 1
    filled = np.argwhere(rows >= 0)
    at_home = home[rows[filled[:, 0], filled[:, 1]]] == filled[:, 0]
    bucket, slot = filled[np.flatnonzero(at_home == (where == "home"))[0]]
    victim = int(rows[bucket, slot])
    table[bucket, slot] = (table[bucket, slot] >> 32 << 32) | (len(ids) + 5 + 1)  # row 404
    write_file(directory / "index.table", table)
    index = IdIndex(directory, meta)
    others = [i for i in range(len(ids)) if i != victim][:50]
    assert index.rows([ids[i] for i in others]).tolist() == others
    damaged = r"index\.table: a slot names a row past the 400 keys; rebuild the store"
    for batch in ([ids[victim]], [ids[others[0]], ids[victim]], [ids[victim]] * 40):
        with pytest.raises(StoreFormatError, match=damaged):
            index.rows(batch)
    with pytest.raises(StoreFormatError, match=damaged):
        index.row(ids[victim])


@pytest.mark.parametrize("corpus", list(CORPORA))
def test_a_batch_that_is_no_sequence_is_refused_alike_on_every_route(
    route: str, corpus: str, tmp_path: Path
) -> None:
    # the helper took a generator or a set (and then failed on ids[absent] for a missing id),
    # numpy said "object of type 'generator' has no len()" or, for the hash index, "Changing
    # the dtype of a 0d array"; rows("12") read two ids, '1' and '2'
    ids, _ = CORPORA[corpus]
    store = build(tmp_path, ids)
    for call in (store.get_many, store.rows, store.find_rows, store.get_many_bytes):
        name = call.__name__
        for batch in ((i for i in ids[:2]), set(ids[:2]), dict.fromkeys(ids[:2]), None, 7):
            kind = type(batch).__name__
            with pytest.raises(
                TypeError, match=rf"^{name}\(\) takes a sequence of ids .*not a {kind}"
            ):
                call(batch)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=rf"^{name}\(\) takes a list of ids, not the str"):
            call("12")  # type: ignore[arg-type]
        assert len(call(np.array(ids[:2]))) == len(call(range(0))) + 2


def test_sorted_keys_and_rows_of_different_lengths_are_refused(route: str, tmp_path: Path) -> None:
    # the helper searched the shorter of the two silently, numpy raised its own IndexError
    store = build(tmp_path, [str(v) for v in random.Random(2).sample(range(10**12), 40)])
    meta = store.meta["index"]
    assert meta["kind"] == "sorted-int"
    where = tmp_path / "s" / index_dir(store.meta)
    rows = np.fromfile(where / "index.rows", meta["row_dtype"])
    write_file(where / "index.rows", rows[:-3])
    with pytest.raises(StoreFormatError, match=r"index.keys holds 40 ids, index.rows 37 rows"):
        IdIndex(where, meta)


def test_rows_outside_a_sharded_column_raise_as_in_one_shard(route: str, tmp_path: Path) -> None:
    # a store built in shards read row -1 as "" and -2 as some row of the wrong shard's data
    # (ids_at([-2]) gave 'D4' of 10 rows), where a one-shard store raised
    src = write(tmp_path / "s.tsv", "".join(f"D{i}\ttext of D{i}\n" for i in range(10)))
    for i in range(2):
        lading.build_shard(src, tmp_path / "s", (i, 2), progress=False)
    store = lading.merge_store(tmp_path / "s")
    text = store._maps().text
    for call in (store.texts_at, store.ids_at, text.arrays, text.bytes_at):
        for bad in ([-1], [0, -2], [10], [3, 2**40]):
            first = next(r for r in bad if not 0 <= r < 10)
            with pytest.raises(IndexError, match=rf"^row {first} out of range for 10 rows$"):
                call(np.array(bad))
    assert store.texts_at(np.array([9, 0])) == ["text of D9", "text of D0"]
    assert store.ids_at(np.array([4, 5])) == ["D4", "D5"]
    assert isinstance(text, ShardedColumn) and text.offsets is None
    offsets = text.concatenated()[1]  # merged offsets, as merges before issue 49 wrote them
    offsets[3] = 10**6  # row 2 ends past the data, row 3 starts after it ends
    damaged = ShardedColumn(text.parts, offsets)
    for row in (2, 3):
        with pytest.raises(StoreFormatError, match=rf"offsets of row {row} \(.*not within"):
            damaged.texts(np.array([0, row]))


def _merged(tmp_path: Path, shards: int, count: int) -> lading.DocStore:
    """A store of ``count`` documents ``D<i>`` ("text of D<i>") built in ``shards`` and
    merged."""
    src = write(tmp_path / "s.tsv", "".join(f"D{i}\ttext of D{i}\n" for i in range(count)))
    for i in range(shards):
        lading.build_shard(src, tmp_path / "s", (i, shards), progress=False)
    return lading.merge_store(tmp_path / "s")


@pytest.mark.parametrize("shards", [1, 12])
def test_asking_for_pages_is_not_taken_for_a_cold_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shards: int
) -> None:
    """The cold rule times a batch's copy: a batch slower than ``_COLD_SECONDS`` a row came
    from the device, and the next batches ask for their pages first. It timed the asking
    too (a call a shard and a row, and numpy work over every shard), so a store of 200
    shards stayed in that mode, ~1 ms a batch of 64 where its pages were long in memory.
    Here every request for pages costs a second on the clock the rule reads: a batch whose
    copy is instant leaves the mode (old code: stayed in it)."""
    from lading.disk import ragged
    from lading.disk.files import MappedFile
    from lading.stores import shards as sharded

    store = _merged(tmp_path, shards, 60)
    text = store._maps().text
    clock = [0.0]
    for module in (ragged, sharded):
        monkeypatch.setattr(module.time, "perf_counter", lambda: clock[0])

    def will_need(self: MappedFile, starts: list[int], ends: list[int]) -> None:
        clock[0] += 1.0  # the request is dear; the copy after it takes no time at all

    monkeypatch.setattr(MappedFile, "will_need", will_need)
    rows = np.arange(0, 60, 3)
    text._read_ahead = True  # a cold batch came before
    assert text.texts(rows) == [f"text of D{r}" for r in rows.tolist()]
    assert clock[0] > 0  # the pages were asked for
    assert text._read_ahead is False  # ... and the copy was warm: next batches ask no more


@pytest.mark.parametrize("shards", [1, 12])
@pytest.mark.parametrize("faulted", [False, True])
def test_a_slow_batch_is_cold_only_if_it_waited_on_the_device(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shards: int, faulted: bool
) -> None:
    """A batch slower than the cold rule's time a row is taken for one read from the device
    (the next batches ask for their pages first) only if this thread waited on the device
    for a page meanwhile; one preempted on a loaded machine, its pages in memory, is not
    (old code: the clock alone, so a busy machine's lookups kept taking the dear route,
    ~1 ms a batch over 200 shards). Here every clock reading is a second later."""
    from lading.disk import ragged
    from lading.stores import shards as sharded

    faults = [0]
    monkeypatch.setattr(ragged, "_major_faults", lambda: faults[0])
    store = _merged(tmp_path, shards, 60)
    text = store._maps().text
    clock = [0.0]

    def slow() -> float:
        clock[0] += 1.0
        return clock[0]

    for module in (ragged, sharded):
        monkeypatch.setattr(module.time, "perf_counter", slow)
    rows = np.arange(0, 60, 3)
    for warm_before in (True, False):  # a warm column, and one already reading ahead
        text._read_ahead = not warm_before
        if faulted:
            faults[0] += 1  # (a page of this batch came from the device)
        assert text.texts(rows) == [f"text of D{r}" for r in rows.tolist()]
        assert text._read_ahead is faulted, (warm_before, faulted)


def test_a_cold_batch_of_a_sharded_store_is_read_ahead_in_every_shard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As in one shard, a cold batch asks for its rows' offsets and bytes all at once
    (``MADV_WILLNEED``), each range in the shard that holds it; a warm one does not."""
    from lading.disk.files import MappedFile

    src = write(tmp_path / "s.tsv", "".join(f"D{i}\ttext of D{i}\n" for i in range(40)))
    for i in range(2):
        lading.build_shard(src, tmp_path / "s", (i, 2), progress=False)
    store = lading.merge_store(tmp_path / "s")
    text = store._maps().text
    assert isinstance(text, ShardedColumn) and text.starts.tolist()[1] not in (0, 40)
    asked: list[tuple[Path, list[int], list[int]]] = []

    def will_need(self: MappedFile, starts: list[int], ends: list[int]) -> None:
        asked.append((self.path, list(starts), list(ends)))

    monkeypatch.setattr(MappedFile, "will_need", will_need)
    rows = np.array([35, 2, 20, 0, 39])
    cut = int(text.starts[1])
    text._read_ahead = True  # cold
    assert text.texts(rows) == [f"text of D{r}" for r in rows.tolist()]
    by_file = {path: (s, e) for path, s, e in asked}
    for p, part in enumerate(text.parts):
        mine = [r - int(text.starts[p]) for r in rows.tolist() if (r >= cut) == (p == 1)]
        starts = [int(part.offsets[r]) for r in mine]
        assert by_file[part.data.path] == (starts, [int(part.offsets[r + 1]) for r in mine])
    for column, name in ((text, "text.off"), (store._maps().ids, "ids.off")):
        asked.clear()  # no merged offsets (issue 49): each shard's own are asked for
        assert isinstance(column, ShardedColumn) and column.offsets is None
        column._read_ahead = True
        column.texts(rows)
        offs = {path.parent.name: s for path, s, _ in asked if path.name == name}
        assert offs == {
            "shard-00000-of-00002": [8 * r for r in rows.tolist() if r < cut],
            "shard-00001-of-00002": [8 * (r - cut) for r in rows.tolist() if r >= cut],
        }
    asked.clear()
    text._read_ahead = False  # warm: no system call per row
    assert text.texts(rows) == [f"text of D{r}" for r in rows.tolist()]
    assert asked == []


@pytest.mark.parametrize(
    "damage",
    [
        lambda runs: runs[:, :1],  # fewer runs than the manifest says
        lambda runs: np.stack((runs[0], runs[1], runs[2] + 1)),  # runs' rows overlap
        lambda runs: np.stack((runs[0][::-1], runs[1][::-1], runs[2][::-1])),  # out of order
        lambda runs: np.stack((runs[0], runs[1] + 1, runs[2])),  # row 0 given by no run
        lambda runs: np.stack((runs[0], runs[1], runs[2] + [5, 0])),  # rows past the last
        lambda runs: runs[:, :0],  # no runs at all, for a store of rows
    ],
)
def test_a_damaged_runs_index_is_refused_naming_its_file(
    route: str, tmp_path: Path, damage: Callable[[np.ndarray], np.ndarray]
) -> None:
    # integer ids in few runs keep 24 B a run: a damaged file must not send a lookup to a row
    # no run gives (it would read another document's text). A store's checksums refuse it
    # first; the index's own check stands where the manifest's checksums were rewritten too
    store = build(tmp_path, [str(i) for i in [*range(3000, 4200), *range(10, 1210)]])
    assert (store.meta["index"]["kind"], store.meta["index"]["runs"]) == ("runs", 2)
    assert store.meta["version"] == 3
    directory = tmp_path / "s" / index_dir(store.meta)
    path = directory / "index.runs"
    runs = np.fromfile(path, dtype="<i8").reshape(3, 2)
    assert runs.tolist() == [[10, 3000], [1200, 0], [1200, 1200]]
    assert IdIndex(directory, store.meta["index"]).rows([10, 1209, 1210, 3000]).tolist() == [
        1200,
        2399,
        -1,
        0,
    ]
    path.chmod(0o644)
    damaged = np.ascontiguousarray(damage(runs)).astype("<i8")
    path.write_bytes(damaged.tobytes())
    # no runs at all: its manifest rewritten to say so too (else refused for its size)
    index_meta = store.meta["index"]
    if damaged.shape[1] == 0:
        index_meta = {**index_meta, "runs": 0}
    with pytest.raises(
        StoreFormatError, match=r"index\.runs: (its runs|holds 3) .*rebuild the store"
    ):
        IdIndex(directory, index_meta, count=store.meta["count"])
    with pytest.raises(StoreFormatError, match=r"index\.runs"):
        lading.open_store(tmp_path / "s").get_many(["10", "1214"])
