"""A store built in shards looks up as a one-process build of the same corpus: the same
documents, bytes and token ids for any id kind (dense ints, sparse ints, strings, MS MARCO-like
``D123``), and, where the C helper is built, by the same one call per batch (issue 40 item 9: a
2-shard store looked up at 0.26-0.41x the docs/s of one build, its batch decoded in a Python
loop). Both routes (the helper and numpy) answer alike, damaged offsets included, whether read
in each shard (what a merge makes since issue 49) or through the merged offsets that older
merges wrote. A merge writes the id index and the manifest, no offsets."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lading
from conftest import word_tokenizer, write
from lading.disk import RaggedColumn, native, write_file
from lading.errors import StoreFormatError
from lading.stores.shards import ShardedColumn

WORDS = [f"w{i}" for i in range(40)]
ID_KINDS: dict[str, Any] = {
    "runs": str,  # 0..n-1: one run of consecutive ids a shard
    "dense": lambda i: str(i ^ 1),  # 1, 0, 3, 2, ...: runs of one id, the dense table
    "sparse": lambda i: str(1_000_003 * i + 7),  # the sorted-int index
    "strings": lambda i: f"msmarco_passage_{i}",  # the hash index
    "D123": lambda i: f"D{i}",
}


def one_and_sharded(
    tmp_path: Path, kind: str, n: int, shards: int
) -> tuple[lading.PackedStore, lading.PackedStore]:
    """The same TSV built by one process and by ``shards`` shards + merge, with token ids."""
    make = ID_KINDS[kind]
    rng = np.random.default_rng(3)
    texts = [" ".join(rng.choice(WORDS, int(rng.integers(0, 25)))) for _ in range(n)]
    lines = [f"{make(i)}\t{text}\n" for i, text in enumerate(texts)]
    src = write(tmp_path / "c.tsv", "".join(lines))
    tok = word_tokenizer(WORDS, tmp_path / "tok.json")
    one = lading.build_store(src, tmp_path / "one", tokenizer=tok, progress=False)
    for i in range(shards):
        lading.build_shard(src, tmp_path / "two", tokenizer=tok, shard=(i, shards), progress=False)
    return one, lading.merge_store(tmp_path / "two")


@pytest.mark.parametrize("kind", list(ID_KINDS))
def test_a_merged_store_answers_as_one_build_for_every_id_kind(
    route: str, kind: str, tmp_path: Path, rng: random.Random
) -> None:
    pytest.importorskip("tokenizers")
    one, merged = one_and_sharded(tmp_path, kind, 300, 3)
    assert len(merged.meta["shards"]) == 3
    # under string ids the merge's index reads keys from the shards' ids columns (issue 49 item
    # 2: the hash index kept each id again, 14 % of real passages' shards)
    kind_of = {"hash": "hash-ids"}
    expected = kind_of.get(one.meta["index"]["kind"], one.meta["index"]["kind"])
    assert merged.meta["index"]["kind"] == expected
    ids = one.ids()
    assert merged.ids() == ids
    absent = [f"{i}x" for i in ids[:20]] + ["", "msmarco_passage_", ids[0] + "\x00"]
    assert (merged.find_rows(absent) == -1).all() and (one.find_rows(absent) == -1).all()
    assert merged.rows(ids).tolist() == one.rows(ids).tolist() == list(range(len(ids)))
    for size in (1, 2, 7, 64, 300):
        batch = rng.choices(ids, k=size)  # repeats too
        assert merged.get_many(batch) == one.get_many(batch)
        got = merged.get_many_bytes(batch)
        assert got == one.get_many_bytes(batch)
        assert all(type(b) is bytes for b in got)  # the caller's own, never a view of the map
        assert [t.tolist() for t in merged.tokens_many(batch)] == [
            t.tolist() for t in one.tokens_many(batch)
        ]
        rows = one.rows(batch)
        assert merged.texts_at(rows) == one.texts_at(rows)
    assert (
        merged[ids[-1]] == one[ids[-1]]
        and merged.tokens(ids[0]).tolist() == one.tokens(ids[0]).tolist()
    )
    views = merged.tokens_many(ids[:5])
    assert all(not v.flags.writeable for v in views)  # views of the read-only map, as in one


def test_a_batch_of_a_merged_store_is_one_call_of_the_helper(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # before: texts and tokens of a store built in shards went through numpy and a Python
    # loop per row even where the helper was built (0.26-0.41x one build's get_many docs/s)
    pytest.importorskip("tokenizers")
    helper = native.load()
    if helper is None:
        pytest.skip("the C helper is not built here (python setup.py build_ext --inplace)")
    calls: list[str] = []

    class Counting:
        Damaged = helper.Damaged

        def __getattr__(self, name: str) -> Any:
            found = getattr(helper, name)
            if name in ("texts", "slices"):
                return lambda *a: (calls.append(name), found(*a))[1]
            return found

    monkeypatch.setattr(native, "NATIVE", Counting())
    one, merged = one_and_sharded(tmp_path, "D123", 200, 2)
    batch = random.Random(0).sample(one.ids(), 64)
    for store in (merged, one):
        calls.clear()
        store._maps().text._read_ahead = False  # warm: the cold rule asks for pages first
        assert store.get_many(batch) and store.tokens_many(batch)
        assert calls == ["texts", "slices"], (store.path, calls)


def test_a_batch_takes_no_buffer_a_shard(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tuple of the shards' maps made the helper take each one's buffer at every call: a
    store of 200 shards looked up at 0.43x one of 1 (get_many(64): 14.4 against 6.1 us), and
    more shards, slower still. The shards' buffers are held once (``Parts``) and every call of
    a merged store is given those, and the parts' bases (no len() a shard a call)."""
    pytest.importorskip("tokenizers")
    helper = native.load()
    if helper is None:
        pytest.skip("the C helper is not built here (python setup.py build_ext --inplace)")
    given: list[tuple[str, tuple[Any, ...]]] = []

    class Recording:
        Damaged = helper.Damaged

        def __getattr__(self, name: str) -> Any:
            found = getattr(helper, name)
            if name in ("texts", "slices", "bytes_of", "hash_ids_rows"):
                return lambda *a: (given.append((name, a)), found(*a))[1]
            return found

    monkeypatch.setattr(native, "NATIVE", Recording())
    one, merged = one_and_sharded(tmp_path, "D123", 200, 3)
    batch = random.Random(0).sample(one.ids(), 64)
    merged._maps().text._read_ahead = False  # warm: the cold rule asks for pages first
    texts, copies = one.get_many(batch), one.get_many_bytes(batch)
    given.clear()  # the merged store's calls only
    assert merged.get_many(batch) == texts
    assert merged.get_many_bytes(batch) == copies
    assert len(merged.tokens_many(batch)) == 64
    assert sorted({name for name, _ in given}) == ["bytes_of", "hash_ids_rows", "slices", "texts"]
    for name, args in given:
        held = [type(a).__name__ for a in args if isinstance(a, (tuple, helper.Parts))]
        if name == "slices":  # the parts' own arrays (sliced), their offsets held, bases given
            assert held == ["Parts", "tuple"] and len(args) == 4, (name, held)
        else:
            assert held == ["Parts"] * len(held) and held, (name, held)


@pytest.mark.parametrize(("kind", "index", "most"), [("dense", "index.dense", 4 * 400 + 64),
                                                      ("runs", "index.runs", 24 * 3)])  # fmt: skip
def test_a_merge_writes_the_index_and_the_manifest_and_no_offsets(
    tmp_path: Path, kind: str, index: str, most: int
) -> None:
    """Issue 49 item 2: a merge writes only what spans shards. Before, it also wrote every
    row's text and token offsets again (``text.goff``, ``tokens.goff``: 16 B a document of
    the 20 it wrote here, 13 % of the shards of short passages); each shard's own are read
    in place now, by the same one helper call a batch. Ids ``0..n-1`` dealt out in order make
    one run a shard: the index is 24 B a run (it was the dense table, 4 B a document, 4.3 %
    of shards of 90-byte passages)."""
    pytest.importorskip("tokenizers")
    one, merged = one_and_sharded(tmp_path, kind, 400, 3)
    snapshot = merged.path / merged.meta["snapshot"]
    written = sorted(p.name for p in snapshot.iterdir() if p.name != "manifest.json")
    assert written == [index], written
    assert merged.meta["index"]["kind"] == kind == one.meta["index"]["kind"]
    assert not merged.meta.get("global_offsets")
    index_bytes = (snapshot / index).stat().st_size
    assert index_bytes <= most
    text = merged._maps().text
    assert isinstance(text, ShardedColumn) and text.offsets is None and len(text.parts) == 3
    ids = one.ids()
    assert merged.get_many(ids) == one.get_many(ids)
    assert [t.tolist() for t in merged.tokens_many(ids)] == [
        t.tolist() for t in one.tokens_many(ids)
    ]


SETTINGS = settings(
    max_examples=int(os.environ.get("LADING_FUZZ_EXAMPLES", "80")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


@SETTINGS
@given(
    parts=st.lists(st.lists(st.binary(max_size=6), max_size=12), min_size=2, max_size=4),
    merged_offsets=st.booleans(),
    damage=st.lists(st.tuples(st.integers(0, 60), st.integers(0, 200)), max_size=2),
    data=st.data(),
)
def test_a_sharded_column_answers_alike_on_both_routes(
    tmp_path_factory: pytest.TempPathFactory,
    parts: list[list[bytes]],
    merged_offsets: bool,
    damage: list[tuple[int, int]],
    data: st.DataObject,
) -> None:
    """Texts, bytes and views of rows across shards (empty shards and rows too), the same
    values or the same error on the C route and the numpy route, with each shard's own
    offsets or with merged ones (older merges), damaged or not."""
    _answers_alike(tmp_path_factory, parts, merged_offsets, damage, data)


@SETTINGS
@given(
    parts=st.lists(  # up to 60 rows a shard: buckets of several rows, a shard's start inside
        st.integers(0, 60).flatmap(
            lambda k: st.lists(st.binary(max_size=2), min_size=k, max_size=k)
        )
        | st.just([]),
        min_size=8,
        max_size=24,
    ),
    damage=st.lists(st.tuples(st.integers(0, 1500), st.integers(0, 200)), max_size=1),
    data=st.data(),
)
def test_a_column_of_many_shards_finds_each_rows_shard_through_its_row_index(
    tmp_path_factory: pytest.TempPathFactory,
    parts: list[list[bytes]],
    damage: list[tuple[int, int]],
    data: st.DataObject,
) -> None:
    """From 8 shards the helper finds a row's shard through a row index (a bucket's shard,
    then a step or two) instead of a search over every shard's first row: runs of empty
    shards, shards of one row and uneven sizes answer as the numpy route does."""
    _answers_alike(tmp_path_factory, parts, False, damage, data)


def _answers_alike(
    tmp_path_factory: pytest.TempPathFactory,
    parts: list[list[bytes]],
    merged_offsets: bool,
    damage: list[tuple[int, int]],
    data: st.DataObject,
) -> None:
    helper = native.load()
    if helper is None:
        pytest.skip("the C helper is not built here: nothing to compare the numpy route with")
    directory = tmp_path_factory.mktemp("sharded")
    merged = [0]
    own = []
    for rows in parts:
        offsets = np.cumsum([0, *map(len, rows)]).astype("<u8")
        own.append(offsets)
        merged += (offsets[1:] + merged[-1]).tolist()
    goff = np.array(merged, dtype="<u8")
    for at, value in damage:  # the position counts over the rows' offsets end to end
        if merged_offsets:
            if at < len(goff):
                goff[at] = value
            continue
        for offsets in own:
            if at < len(offsets):
                offsets[at] = value
                break
            at -= len(offsets)
    for p, rows in enumerate(parts):
        write_file(directory / f"p{p}.bin", b"".join(rows))
        write_file(directory / f"p{p}.off", own[p])
    n = len(goff) - 1
    rows = data.draw(st.lists(st.integers(0, max(0, n - 1)) | st.integers(-3, n + 2), max_size=50))
    query = np.array(rows, dtype=np.int64)
    got = []
    for route in (helper, None):
        native.NATIVE = route
        try:
            files = [(directory / f"p{p}.bin", directory / f"p{p}.off") for p in range(len(parts))]
            column = ShardedColumn(
                [RaggedColumn(d, o, np.uint8, True) for d, o in files],
                goff if merged_offsets else None,
            )
        except StoreFormatError as e:  # a shard's first or last offset damaged: refused at open
            got.append([("refused", str(e))])
            continue
        finally:
            native.NATIVE = helper
        column._read_ahead = False
        answers = []
        for call in (column.texts, column.bytes_at, column.arrays):
            try:
                value = call(query)
                answers.append([bytes(v) for v in value] if call == column.arrays else value)
            except Exception as e:  # the comparison is the point: any exception, named
                answers.append(("raised", type(e).__name__, str(e)))
        got.append(answers)
    assert got[0] == got[1], (merged_offsets, goff.tolist(), [o.tolist() for o in own], rows)
    if not damage:  # undamaged: the rows' own bytes, on both routes
        flat = [row for rows in parts for row in rows]
        if all(0 <= r < n for r in rows):
            assert got[0][1] == [flat[r] for r in rows]


def test_the_helper_refuses_offsets_that_do_not_match_the_parts() -> None:
    """Offsets per part must be one per part (or one over them all): two arrays for three
    parts would read rows of one shard in another's data."""
    helper = native.load()
    if helper is None:
        pytest.skip("the C helper is not built here (python setup.py build_ext --inplace)")
    offsets = np.array([0, 2], dtype="<u8").tobytes()
    rows = np.array([0], dtype=np.int64)
    with pytest.raises(ValueError, match="2 offsets arrays for 3 parts"):
        helper.texts(rows, (offsets, offsets), (b"ab", b"ab", b"ab"))
    with pytest.raises(ValueError, match="a column has 1 to 2\\*\\*31 - 1 offsets arrays"):
        helper.texts(rows, (), (b"ab",))
    assert helper.texts(rows, (offsets, offsets), (b"ab", b"cd")) == ["ab"]
    assert helper.texts(np.array([1], dtype=np.int64), (offsets, offsets), (b"ab", b"cd")) == ["cd"]
