"""The ``hash-ids`` index (what a merge writes under string ids): exact on both routes, a tag
collision passed over, damage refused naming the file, 7 B a document written (issue 49 item
2: the ``hash`` index a merge wrote kept every id again, 13.95 % of real passages' shards)."""

from __future__ import annotations

import itertools
import json
import os
import random
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lading
from conftest import distinct_ids, write
from lading.disk import native, write_file
from lading.errors import StoreFormatError
from lading.stores import hashids, hashindex
from lading.stores.hashids import IdKeys, slot_dtype, write_hash_ids_index
from lading.stores.hashindex import hash_words, key_width, query_words
from lading.stores.index import IdIndex


def id_keys(shards: list[list[str]]) -> IdKeys:
    """The id keys of these shards as their workers write them: each at its own width."""
    keys, widths = [], []
    for ids in shards:
        width = key_width(max((len(i.encode()) for i in ids), default=1))
        keys.append(np.array([i.encode() for i in ids], dtype=f"S{width}").tobytes())
        widths.append(width)
    starts = np.concatenate([[0], np.cumsum([len(ids) for ids in shards])]).astype(np.int64)
    return IdKeys(tuple(keys), tuple(widths), starts)


def index_of(
    directory: Path, shards: list[list[str]], load: float | None = None
) -> tuple[IdIndex, dict[str, object]]:
    ids = [i for shard in shards for i in shard]
    width = key_width(max((len(i.encode()) for i in ids), default=1))
    words, _ = query_words(ids, width)
    saved = hashids._LOAD
    hashids._LOAD = load or saved
    try:
        meta, _ = write_hash_ids_index(directory, np.ascontiguousarray(words), np.dtype("<i4"))
    finally:
        hashids._LOAD = saved
    return IdIndex(directory, meta, id_keys(shards)), meta


def test_every_id_of_every_shard_is_found_and_others_are_absent(route: str, tmp_path: Path) -> None:
    shards = [
        [f"msmarco_passage_{i}" for i in range(0, 700)],
        [],  # a shard of no rows
        ["é", "日本語の文書", "x" * 8, "x" * 9, "007", "7", "a b", "y" * 600, "z" * 4000],
        [f"D{i}" for i in range(300)],
    ]
    index, meta = index_of(tmp_path, shards)
    assert meta["kind"] == "hash-ids"
    ids = [i for shard in shards for i in shard]
    assert index.rows(ids).tolist() == list(range(len(ids)))
    assert [index.row(i) for i in ids[::97]] == list(range(0, len(ids), 97))
    absent = ["", "x", "x" * 7, "x" * 10, "07", "msmarco_passage_700", "D300", "z" * 3999]
    absent += ["z" * 4001, "é\x00", "msmarco_passage_1\x00", "\ud800", "y" * 6000]
    assert (index.rows(absent) == -1).all()
    rows, first = index.lookup(["D0", "nope", "D1", "nope2"])
    assert rows.tolist() == [len(ids) - 300, -1, len(ids) - 299, -1] and first == 1
    assert index.rows([7, "7", 7]).tolist() == [ids.index("7")] * 3  # an int is str(int)


def slots_of(directory: Path) -> np.ndarray:
    return np.fromfile(directory / "index.slots", dtype=slot_dtype(np.dtype("<i4")))


def test_a_slot_with_the_query_tag_and_another_id_is_passed_over(
    route: str, tmp_path: Path
) -> None:
    """Tags are 8 bits: a slot the search passes has the query's tag one time in 256. Made
    here by giving the query's tag to the slot just before its own (the query sits past its
    home, so its search reads that slot first): that slot's document must be compared and
    passed over, never returned."""
    ids = [f"id-{i}" for i in range(400)]
    _, meta = index_of(tmp_path, [ids])
    slots = slots_of(tmp_path)
    used = slots["row"] >= 0
    at = int(np.flatnonzero(used[:-1] & used[1:] & (slots["away"][1:] >= 1))[0]) + 1
    query, other = ids[int(slots["row"][at])], ids[int(slots["row"][at - 1])]
    slots["tag"][at - 1] = slots["tag"][at]
    write_file(tmp_path / "index.slots", slots)
    index = IdIndex(tmp_path, meta, id_keys([ids]))
    assert index.rows([query]).tolist() == [ids.index(query)]
    assert index.rows([query] * 40 + [other]).tolist() == [ids.index(query)] * 40 + [-1]


def test_a_search_ends_at_an_empty_slot_or_an_id_nearer_its_home(
    route: str, tmp_path: Path
) -> None:
    """Absent ids read a few slots, not to ``max_away``: every absent id of a batch is found
    absent, and present ones still found, with the table nearly full (``_LOAD`` 1.0)."""
    ids = [f"id-{i}" for i in range(3000)]
    _, meta = index_of(tmp_path, [ids[:1000], ids[1000:]], load=1.0)
    assert int(meta["max_away"]) > 3
    index = IdIndex(tmp_path, meta, id_keys([ids[:1000], ids[1000:]]))
    assert index.rows(ids).tolist() == list(range(len(ids)))
    assert (index.rows([f"id-{i}" for i in range(3000, 4000)]) == -1).all()


@pytest.mark.parametrize(
    "damage, message",
    [
        ("row", r"index\.slots: a slot names row 405, outside the 400 ids"),
        ("away", r"index\.slots: .* ids at most \d+ away"),
        ("size", r"index\.slots: \d+ bytes do not hold slots of 6 bytes"),
        ("keys", r"shard 0's id keys"),
    ],
)
def test_damage_is_refused_naming_the_index_on_both_routes(
    route: str, damage: str, message: str, tmp_path: Path
) -> None:
    ids = [f"id-{i}" for i in range(400)]
    _, meta = index_of(tmp_path, [ids])
    slots = slots_of(tmp_path)
    keys = id_keys([ids])
    at = int(np.flatnonzero(slots["row"] >= 0)[0])
    victim = ids[int(slots["row"][at])]
    if damage == "row":
        slots["row"][at] = 405
        write_file(tmp_path / "index.slots", slots)
        index = IdIndex(tmp_path, meta, keys)
        with pytest.raises(StoreFormatError, match=message):
            index.rows(["id-999", victim])
        return
    if damage == "away":  # a search could run past the slots
        meta = {**meta, "max_away": len(slots)}
    elif damage == "size":
        (tmp_path / "index.slots").write_bytes(slots.tobytes()[:-1])
    else:  # a key file one key short
        keys = IdKeys((keys.keys[0][:-8],), keys.widths, keys.starts)
        message += " hold 399 rows, it has 400"
    with pytest.raises(StoreFormatError, match=message):
        IdIndex(tmp_path, meta, keys)


def test_the_helper_refuses_slots_that_do_not_match_the_meta(tmp_path: Path) -> None:
    helper = native.load()
    if helper is None:
        pytest.skip("the C helper is not built here (python setup.py build_ext --inplace)")
    ids = [f"id-{i}" for i in range(40)]
    _, meta = index_of(tmp_path, [ids])
    raw = (tmp_path / "index.slots").read_bytes()
    keys = id_keys([ids])
    tail = (keys.keys, np.array(keys.widths, np.int64).tobytes(), keys.starts.tobytes())
    factors = hashindex.word_multipliers(1).tobytes()
    homes, size = int(meta["homes"]), len(raw) // 6
    for slots, n_homes, away in ((raw[:-1], homes, 0), (raw, size + 1, 0), (raw, homes, size)):
        with pytest.raises(helper.Damaged, match="slots or width do not match"):
            helper.hash_ids_rows(["id-1"], slots, 4, n_homes, away, 8, factors, *tail)


def test_an_index_is_read_with_its_shards_keys(tmp_path: Path) -> None:
    _, meta = index_of(tmp_path, [["a", "b"]])
    with pytest.raises(ValueError, match="read with its shards' id keys"):
        IdIndex(tmp_path, meta)


@settings(
    max_examples=int(os.environ.get("LADING_FUZZ_EXAMPLES", "80")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    ids=distinct_ids(),
    cuts=st.lists(st.integers(0, 200), max_size=3),
    absent=st.lists(st.text(max_size=50), max_size=30),
)
def test_the_helper_and_numpy_find_the_same_rows(
    tmp_path_factory: pytest.TempPathFactory, ids: list[str], cuts: list[int], absent: list[str]
) -> None:
    helper = native.load()
    if helper is None:
        pytest.skip("the C helper is not built here: nothing to compare the numpy route with")
    bounds = sorted({0, len(ids), *(min(c, len(ids)) for c in cuts)})
    shards = [ids[a:b] for a, b in itertools.pairwise(bounds)]
    query = ids + [a for a in absent if a not in set(ids)]
    expected = list(range(len(ids))) + [-1] * (len(query) - len(ids))
    directory = tmp_path_factory.mktemp("idx")
    for route in (helper, None):
        native.NATIVE = route
        try:
            index, _ = index_of(directory, shards)
            assert index.rows(query).tolist() == expected, route
        finally:
            native.NATIVE = helper


def test_the_hash_is_the_hash_index_s_whatever_the_width() -> None:
    """Zero words add nothing to the hash, so a key hashes alike at any width it fits: the
    index's width (the longest id's) need not be the query's."""
    words8, _ = query_words(["abc"], 8)
    words64, _ = query_words(["abc"], 64)
    assert hash_words(words8)[0] == hash_words(words64)[0]


def test_a_merge_under_string_ids_writes_7_bytes_a_document(
    route: str, tmp_path: Path, rng: random.Random
) -> None:
    """Before: the merge wrote the ``hash`` index, 32 B of table and the id again (24 B for
    these ids) a document; now a 6-byte slot per 0.85 ids."""
    n = 3000
    lines = [f"msmarco_passage_{i}\tpassage {i} {'w ' * (i % 7)}\n" for i in range(n)]
    src = write(tmp_path / "c.tsv", "".join(lines))
    one = lading.build_store(src, tmp_path / "one", progress=False)
    for i in range(3):
        lading.build_shard(src, tmp_path / "s", shard=(i, 3), progress=False)
    merged = lading.merge_store(tmp_path / "s")
    snapshot = merged.path / merged.meta["snapshot"]
    written = {p.name: p.stat().st_size for p in snapshot.iterdir() if p.name != "manifest.json"}
    assert sorted(written) == ["index.slots"], written
    assert sum(written.values()) <= 6 / 0.85 * n + 6 * 64  # the last ids may run past the end
    assert merged.meta["version"] == 3 and merged.meta["index"]["kind"] == "hash-ids"
    for shard in merged.meta["shards"]:  # each worker wrote its keys: rows x 24 bytes here
        keys = merged.path / shard["dir"] / "ids.keys"
        assert keys.stat().st_size == shard["rows"] * 24, shard
    ids = one.ids()
    batch = rng.sample(ids, 200)
    assert merged.get_many(batch) == one.get_many(batch)
    assert merged.rows(ids).tolist() == list(range(n))
    reopened = lading.open_store(tmp_path / "s")
    assert reopened.get_many(batch[:5]) == one.get_many(batch[:5])


def test_shards_of_an_older_lading_without_keys_merge_into_the_hash_index(
    tmp_path: Path,
) -> None:
    """Shards written before workers wrote ``ids.keys`` still merge: into the ``hash`` index,
    which keeps the keys itself (format version 2, as before)."""
    n = 600
    src = write(tmp_path / "c.tsv", "".join(f"D{i}\tpassage {i}\n" for i in range(n)))
    for i in range(2):
        lading.build_shard(src, tmp_path / "s", shard=(i, 2), progress=False)
    for record_path in (tmp_path / "s").glob("build-*/shard-*/shard.json"):
        (record_path.parent / "ids.keys").unlink()
        record = json.loads(record_path.read_text())
        del record["files"]["ids.keys"]
        record_path.write_text(json.dumps(record))
    merged = lading.merge_store(tmp_path / "s")
    assert merged.meta["index"]["kind"] == "hash" and merged.meta["version"] == 2
    assert merged.rows([f"D{i}" for i in range(n)]).tolist() == list(range(n))


def test_a_manifest_that_does_not_list_a_shard_s_keys_is_refused(tmp_path: Path) -> None:
    """The keys a hash-ids index reads are files of the store like any other: listed in the
    manifest (their sizes and spot checksums checked on open), or the store is refused."""
    src = write(tmp_path / "c.tsv", "".join(f"D{i}\tpassage {i}\n" for i in range(300)))
    for i in range(2):
        lading.build_shard(src, tmp_path / "s", shard=(i, 2), progress=False)
    merged = lading.merge_store(tmp_path / "s")
    meta_path = tmp_path / "s" / "meta.json"
    meta = json.loads(meta_path.read_text())
    name = f"{merged.meta['shards'][1]['dir']}/ids.keys"
    del meta["files"][name]
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(StoreFormatError, match=f"reads {name}, which the manifest does not list"):
        lading.open_store(tmp_path / "s").get_many(["D1"])
