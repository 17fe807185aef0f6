"""The store protocol, checked on every store; then what only the packed store promises."""

from __future__ import annotations

import json
import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lading
from conftest import store_file, write
from lading.errors import SkippedRecordsWarning, SourceError, StaleStoreWarning, StoreFormatError
from lading.stores.base import DocStore

StoreMaker = Callable[[Path, Path], DocStore]

MAKERS: dict[str, StoreMaker] = {
    "packed": lambda src, tmp: lading.build_store(src, tmp / "packed", progress=False),
    "memory": lambda src, tmp: lading.InMemoryStore.from_source(src),
    "offsets": lambda src, tmp: lading.OffsetStore.build(src, tmp / "offsets"),
}


def _irds(src: Path, tmp: Path) -> DocStore:
    pytest.importorskip("ir_datasets")
    return lading.IrDatasetsStore.from_tsv(src)


@pytest.fixture(params=[*MAKERS, "irds"])
def make(request: pytest.FixtureRequest) -> StoreMaker:
    return _irds if request.param == "irds" else MAKERS[request.param]


def test_irds_reads_a_local_msmarco_docs_tsv(tmp_path: Path) -> None:
    pytest.importorskip("ir_datasets")
    src = tmp_path / "docs.tsv"
    src.write_text("D1\thttp://a\tTitle one\tbody one\nD2\thttp://b\tTitle two\tbody two\n")
    store = lading.IrDatasetsStore.from_tsv(src)
    assert len(store) == 2
    assert store.get_many(["D2", "D1"]) == ["Title two body two", "Title one body one"]
    bad = tmp_path / "three.tsv"
    bad.write_text("D1\ttitle\tbody\n")
    with pytest.raises(ValueError, match=r"three.tsv, line 1: 3 columns"):
        lading.IrDatasetsStore.from_tsv(bad)


def test_carriage_returns_read_the_same_in_every_store(make: StoreMaker, tmp_path: Path) -> None:
    """One answer for every store: a line ends at ``\\n`` (one ``\\r`` before it is part of a
    CRLF ending); any other ``\\r`` is text. ir_datasets alone reads a bare ``\\r`` as a line
    break (universal newlines), so its from_tsv is fed lading's own records."""
    src = write(tmp_path / "c.tsv", b"d1\tone\r\nd2\ttwo\r\r\nd3\tth\rree\nd4\tfour\r")
    store = make(src, tmp_path)
    assert len(store) == 4
    assert store.get_many(["d1", "d2", "d3", "d4"]) == ["one", "two\r", "th\rree", "four\r"]


def test_numpy_integers_are_ids_everywhere_and_a_str_is_not_a_list(
    make: StoreMaker, tmp_path: Path
) -> None:
    """An id read from a numpy array works in every lookup, ``in`` included; a str where a
    list of ids belongs is refused (it would be read as one id a character)."""
    src = write(tmp_path / "c.tsv", "1\tone\n2\ttwo\n7\tseven\n12\ttwelve\n")
    store = make(src, tmp_path)
    for key in (np.int64(7), np.int32(7), np.uint8(7), 7, "7"):
        assert key in store, type(key)
        assert store[key] == "seven" and store.get_many([key]) == ["seven"]
    assert np.int64(8) not in store and 7.0 not in store
    assert store.get_many(np.array([12, 7])) == ["twelve", "seven"]
    for many in (store.get_many, store.rows, store.find_rows, store.tokens_many):
        with pytest.raises(TypeError, match=r"a list of ids, not the str '12'.*\['12'\]"):
            many("12")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not the bytes"):
        store.get_many(b"12")  # type: ignore[arg-type]


class _Spelled:
    """An object whose str() is a stored id: still no id."""

    def __str__(self) -> str:
        return "1"


def test_an_object_that_is_no_id_is_found_by_no_lookup(
    make: StoreMaker, route: str, tmp_path: Path
) -> None:
    """``in`` said False for None, 7.0, b"x" ... (not ids), while ``[]``, ``get`` and
    ``get_many`` looked them up as ``str(x)`` and found the documents "None", "7.0", "b'x'":
    now no lookup finds them, on every store and both lookup routes. A bool is an int, so an
    id, looked up as "True" (not as 1), as before."""
    text = write(
        tmp_path / "c.tsv",
        "7.0\tseven float\nTrue\ttrue\nNone\tnone\n1\tone\nb'x'\tbytes\nFalse\tfalse\n",
    )
    ints = write(tmp_path / "i.tsv", "1\tone\n7\tseven\n")  # an integer index
    for src in (text, ints):
        store = make(src, tmp_path / src.stem)
        row = store.find_rows(["1"])[0]
        for q in (None, 7.0, np.float64(7.0), b"x", np.bool_(True), np.bool_(False), _Spelled()):
            assert q not in store, repr(q)
            with pytest.raises(KeyError, match="is not in"):
                store[q]  # type: ignore[index]
            assert store.get(q) is None and store.get(q, "d") == "d"  # type: ignore[arg-type]
            with pytest.raises(KeyError, match="is not in"):
                store.get_many(["1", q])  # type: ignore[list-item]
            assert store.find_rows(["1", q]).tolist() == [row, -1]  # type: ignore[list-item]
            with pytest.raises(KeyError, match="is not in"):
                store.rows([q])  # type: ignore[list-item]
        if src == text:
            assert True in store and store[True] == "true"
            assert store.get_many([False]) == ["false"]


def test_protocol(make: StoreMaker, tiny_tsv: Path, tmp_path: Path) -> None:
    store = make(tiny_tsv, tmp_path)
    assert len(store) == 5
    assert sorted(store.ids()) == ["0", "1", "2", "3", "7"]
    assert store["1"] == "café crème, naïve façade — ünïcödé ✓"
    assert store["2"] == ""
    assert store.get_many(["7", "0", "7"]) == ["seven", "the quick brown fox", "seven"]
    assert store.get("404") is None and store.get("404", "x") == "x"
    assert "3" in store and "4" not in store and None not in store
    with pytest.raises(KeyError, match="'404' is not in"):
        store.get_many(["0", "404"])


def test_pickles_as_a_recipe_and_reopens(make: StoreMaker, tiny_tsv: Path, tmp_path: Path) -> None:
    store = make(tiny_tsv, tmp_path)
    blob = pickle.dumps(store)
    assert b"quick brown fox" not in blob  # the corpus never travels inside the pickle
    again = pickle.loads(blob)
    assert again.get_many(["3", "1"]) == store.get_many(["3", "1"])


def test_row_codes_follow_ids_order(make: StoreMaker, tiny_tsv: Path, tmp_path: Path) -> None:
    """Every store numbers its documents in ids() order, so datasets may keep int64 codes."""
    store = make(tiny_tsv, tmp_path)
    ids = store.ids()
    codes = store.find_rows(["7", "404", "0", 3])
    assert codes.dtype == np.int64 and codes[1] == -1
    assert [ids[c] for c in codes[[0, 2, 3]]] == ["7", "0", "3"]
    assert store.ids_at(store.rows(ids)) == ids
    assert store.rows(ids).tolist() == list(range(len(ids)))
    assert store.texts_at(store.rows(["7", "0"])) == ["seven", "the quick brown fox"]
    with pytest.raises(KeyError, match="'404' is not in"):
        store.rows(["0", "404"])
    blob = pickle.dumps(store)  # the id-to-row dict a baseline builds stays behind
    assert b"_row_positions" not in blob and b"quick brown fox" not in blob
    assert pickle.loads(blob).find_rows(["3"]).tolist() == store.find_rows(["3"]).tolist()


def test_rows_outside_the_store_raise_in_every_store(
    make: StoreMaker, tiny_tsv: Path, tmp_path: Path
) -> None:
    """The -1 that find_rows gives an absent id, handed to texts_at or ids_at, came back as the
    last document in the in-memory, offsets and ir_datasets stores (Python's and numpy's
    negative indexing); the packed store raised. Every store raises that IndexError."""
    store = make(tiny_tsv, tmp_path)
    n = len(store)
    rows = store.find_rows(["7", "404"])
    assert rows[1] == -1
    for call in (store.texts_at, store.ids_at):
        for bad in ([-1], [0, -2], [n], [3, 2**40]):
            first = next(r for r in bad if not 0 <= r < n)
            with pytest.raises(IndexError, match=rf"^row {first} out of range for {n} rows$"):
                call(np.array(bad))
        with pytest.raises(IndexError, match=rf"^row -1 out of range for {n} rows$"):
            call(rows)
    assert store.texts_at(np.array([n - 1, 0])) == store.get_many([store.ids()[-1], "0"])
    assert store.ids_at(np.array([], dtype=np.int64)) == []


def test_in_agrees_with_lookup_for_near_ids(
    make: StoreMaker, tiny_tsv: Path, tmp_path: Path
) -> None:
    """``id in store`` is True exactly when ``store[id]`` finds it: the ir_datasets store said
    True for "7\\x00" (its docstore pads keys with NUL and matches them), then raised KeyError."""
    store = make(tiny_tsv, tmp_path)
    for near in ("7\x00", "7\x00\x00", "\x00", "7 ", "07", "7" + "\x00" * 40):
        assert near not in store, repr(near)
        with pytest.raises(KeyError):
            store[near]
    assert "7" in store and 7 in store and store["7"] == "seven"


def test_a_pandas_series_of_ids_names_the_absent_one(
    make: StoreMaker, tiny_tsv: Path, tmp_path: Path
) -> None:
    """A column of a shuffled DataFrame keeps its labels: ``ids[i]`` on it is a label lookup,
    so the KeyError of get_many and rows named another id ("0", the one labelled 1), or the
    label itself (1) where the labels were strings. The absent id is named by position."""
    pd = pytest.importorskip("pandas")
    store = make(tiny_tsv, tmp_path)
    for labels in ([1, 0], ["a", "b"]):
        ids = pd.Series(["0", "404"], index=labels)
        for call in (store.get_many, store.rows):
            with pytest.raises(KeyError, match=r"^\"id '404' is not in"):
                call(ids)
    assert store.get_many(pd.Series(["7", "0"], index=[1, 0])) == ["seven", store["0"]]
    assert (
        store.rows(pd.Series(["7", "0"], index=[1, 0])).tolist() == store.rows(["7", "0"]).tolist()
    )


def test_stores_without_tokens_say_so(make: StoreMaker, tiny_tsv: Path, tmp_path: Path) -> None:
    store = make(tiny_tsv, tmp_path)
    assert not store.has_tokens
    assert store.token_info is None and store.tokenizer_path is None
    for ask in (lambda: store.tokens_many(["0"]), lambda: store.tokenizer()):
        with pytest.raises(ValueError, match=r"has no tokens: build it with a tokenizer"):
            ask()


def test_ir_names_no_concrete_store() -> None:
    """ir/ reads documents through the DocStore protocol only (tokens included)."""
    concrete = ("PackedStore", "InMemoryStore", "OffsetStore", "IrDatasetsStore", "_maps(")
    ir = Path(lading.__file__).parent / "ir"
    for module in sorted(ir.glob("*.py")):
        text = module.read_text(encoding="utf-8")
        assert not [name for name in concrete if name in text], module


@pytest.mark.parametrize("kind", list(MAKERS))
def test_id_forms(kind: str, tmp_path: Path) -> None:
    """Leading zeros make other ids; sparse ints, strings and int lookups all work."""
    src = write(
        tmp_path / "c.tsv", "7\tseven\n07\tzero-seven\nmsmarco_doc_31_726131\tlong\n8841822\tlast\n"
    )
    store = MAKERS[kind](src, tmp_path)
    assert store.get_many(["07", "7", "8841822", "msmarco_doc_31_726131"]) == [
        "zero-seven",
        "seven",
        "last",
        "long",
    ]
    assert "007" not in store and "+7" not in store and " 7" not in store and "" not in store


@pytest.mark.parametrize(
    ("ids", "kind"),
    [
        (["3", "1", "2", "0"], "dense"),
        (["5", "8841822", "12"], "sorted-int"),
        (["a", "b-2", "D123"], "hash"),
        (["1", "x"], "hash"),
        ([f"msmarco_doc_{i % 7:02d}_{i}" for i in range(300)], "hash"),
        (["é", "日本語の文書", "x" * 17, "x" * 16, "x" * 9], "hash"),
    ],
)
def test_index_kind_follows_the_ids(tmp_path: Path, ids: list[str], kind: str) -> None:
    src = write(tmp_path / "c.tsv", "".join(f"{i}\ttext {i}\n" for i in ids))
    store = lading.build_store(src, tmp_path / "s", progress=False)
    assert store.meta["index"]["kind"] == kind
    assert store.ids() == ids
    assert store.get_many(ids[::-1]) == [f"text {i}" for i in ids[::-1]]
    assert store.get_many([int(i) for i in ids if i.isdigit()]) == [
        f"text {i}" for i in ids if i.isdigit()
    ]
    assert "zzzzzzzzzzzzzzzzzzzzzz" not in store and 10**17 not in store


@pytest.mark.parametrize("kind", ["packed", "memory"])
def test_duplicates_error_or_keep_first_or_last(kind: str, tmp_path: Path) -> None:
    src = write(tmp_path / "c.tsv", "a\tfirst\nb\tonly\na\tsecond\n")
    with pytest.raises(SourceError, match=r"line 3 .*duplicate id 'a'"):
        MAKERS[kind](src, tmp_path)
    if kind == "packed":
        first = lading.build_store(src, tmp_path / "f", duplicates="first", progress=False)
        last = lading.build_store(src, tmp_path / "l", duplicates="last", progress=False)
        assert first.meta["build"]["duplicates_dropped"] == 1
    else:
        first = lading.InMemoryStore.from_source(src, duplicates="first")
        last = lading.InMemoryStore.from_source(src, duplicates="last")
    assert (first["a"], last["a"], len(first), len(last)) == ("first", "second", 2, 2)
    assert sorted(first.ids()) == ["a", "b"]


@pytest.mark.parametrize("keep", ["first", "last"])
def test_every_store_keeps_duplicates_in_one_order(keep: str, tmp_path: Path) -> None:
    """The row an id keeps is where its kept occurrence was, on every store: under ``last``
    the in-memory dict kept the first one's place (ids a, b where the others give b, a)."""
    src = write(tmp_path / "c.tsv", "a\tA1\nb\tB\na\tA2\nc\tC\nb\tB2\n")
    stores = [
        lading.build_store(src, tmp_path / "p", duplicates=keep, progress=False),
        lading.OffsetStore.build(src, tmp_path / "o", duplicates=keep),
        lading.InMemoryStore.from_source(src, duplicates=keep),
    ]
    order = ["a", "b", "c"] if keep == "first" else ["a", "c", "b"]
    for store in stores:
        assert store.ids() == order, store
        assert store.get_many(["a", "b", "c"]) == (
            ["A1", "B", "C"] if keep == "first" else ["A2", "B2", "C"]
        )
        assert store.find_rows(["a", "b", "c"]).tolist() == [order.index(i) for i in "abc"]


def test_skip_reports_the_count(tmp_path: Path) -> None:
    src = write(tmp_path / "c.tsv", "1\tok\nnotab\n2\tok\n\t\n")
    with pytest.warns(SkippedRecordsWarning, match="skipped 2 malformed"):
        store = lading.build_store(src, tmp_path / "s", on_error="skip", progress=False)
    assert len(store) == 2
    assert store.meta["build"]["skipped"] == 2


def test_a_lone_surrogate_escape_is_named_or_skipped(tmp_path: Path) -> None:
    """``"\\ud800"`` in a record's text or id: a malformed record named by file and line, or
    skipped and counted (it crashed the build's UTF-8 encode, named nowhere, under skip too);
    a record stream's lone surrogate the same."""
    bad_lines = {
        "text": '{"id": "1", "text": "bad \\ud800"}',
        "id": '{"id": "a\\udc80", "text": "b"}',
    }
    for name, bad in bad_lines.items():
        src = write(tmp_path / f"{name}.jsonl", f'{{"id": "0", "text": "a"}}\n{bad}\n')
        with pytest.raises(SourceError, match=rf'line 2 of .*lone surrogate .* in "{name}"'):
            lading.build_store(src, tmp_path / f"{name}.raise", progress=False)
        with pytest.warns(SkippedRecordsWarning, match="skipped 1 malformed"):
            store = lading.build_store(src, tmp_path / name, on_error="skip", progress=False)
        assert list(store.ids()) == ["0"] and store.meta["build"]["skipped"] == 1
    records = [("0", "a", {}), ("1", "b\ud800", {}), ("2", "c", {"title": "\udfff"})]
    stream = lading.sources.RecordStream(lambda: records, "rows", {"n": 3}, on_error="skip")
    with pytest.warns(SkippedRecordsWarning, match="skipped 2 malformed"):
        store = lading.build_store(stream, tmp_path / "stream", progress=False)
    assert list(store.ids()) == ["0"]


def test_fields_and_records(tmp_path: Path) -> None:
    src = write(
        tmp_path / "c.jsonl", '{"id": "a", "text": "x"}\n{"id": "b", "title": "Tb", "text": "y"}\n'
    )
    store = lading.build_store(src, tmp_path / "s", progress=False)
    assert store.fields == ("title",)
    assert store.field("a", "title") == "" and store.field("b", "title") == "Tb"
    assert store.record("b") == lading.Record("b", "y", {"title": "Tb"})


def read_only_locks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every build lock fail as on a read-only mount: ``DEST.lock`` cannot be created."""
    import contextlib
    import errno

    @contextlib.contextmanager
    def refused(dest: Path) -> Any:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), f"{dest}.lock")
        yield

    monkeypatch.setattr("lading.disk.build.build_lock", refused)


def test_an_up_to_date_store_is_reused_on_a_read_only_mount(
    tiny_tsv: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A prebuilt store on a read-only cluster mount, with ``build_store`` in every job: the
    reuse is a read, so it needs no lock (the lock file cannot be created there)."""
    dest = tmp_path / "s"
    first = lading.build_store(tiny_tsv, dest, progress=False)
    read_only_locks(monkeypatch)
    again = lading.build_store(tiny_tsv, dest, progress=False)
    assert again.snapshot == first.snapshot and len(again) == len(first)
    with open(tiny_tsv, "a") as f:
        f.write("99\tnew\n")
    with pytest.raises(OSError, match="Read-only file system"):  # a rebuild still locks
        lading.build_store(tiny_tsv, dest, progress=False)


def test_a_stale_warning_names_the_users_line(tiny_tsv: Path, tmp_path: Path) -> None:
    """StaleStoreWarning named ``stores/__init__.py`` (open_store's call of PackedStore), not
    the line of the user's code that opened the store: its stacklevel counted one frame."""
    dest = tmp_path / "s"
    lading.build_store(tiny_tsv, dest, progress=False)
    with open(tiny_tsv, "a") as f:
        f.write("99\tnew\n")
    for opens in (lambda: lading.open_store(dest), lambda: lading.PackedStore(dest)):
        with pytest.warns(StaleStoreWarning, match="is stale") as caught:
            opens()
        assert [w.filename for w in caught] == [__file__]


def test_reused_when_unchanged_rebuilt_when_source_changes(tiny_tsv: Path, tmp_path: Path) -> None:
    dest = tmp_path / "s"
    first = lading.build_store(tiny_tsv, dest, progress=False)
    inode = store_file(dest, "text.bin").stat().st_ino
    again = lading.build_store(tiny_tsv, dest, progress=False)
    assert store_file(dest, "text.bin").stat().st_ino == inode  # reused, not rebuilt
    assert again.snapshot == first.snapshot
    with open(tiny_tsv, "a") as f:
        f.write("99\tnew\n")
    with pytest.warns(StaleStoreWarning, match="bytes, was"):
        stale = lading.open_store(dest)
    assert stale.stale and "99" not in stale
    with pytest.raises(StoreFormatError, match="stale"):
        lading.open_store(dest, on_stale="raise")
    fresh = lading.build_store(tiny_tsv, dest, progress=False)
    assert fresh["99"] == "new" and fresh.stale is None and fresh.snapshot != first.snapshot
    assert "99" not in first and len(first) == 5  # the old object still reads its snapshot


def test_open_refuses_truncated_foreign_or_newer_stores(tiny_tsv: Path, tmp_path: Path) -> None:
    dest = tmp_path / "s"
    lading.build_store(tiny_tsv, dest, progress=False)
    text = store_file(dest, "text.bin")
    text.write_bytes(text.read_bytes()[:-3])
    with pytest.raises(StoreFormatError, match=r"text\.bin is \d+ bytes, expected \d+"):
        lading.open_store(dest)
    with pytest.raises(StoreFormatError, match=r"meta\.json is missing"):
        lading.open_store(tmp_path)
    meta_path = dest / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps({**meta, "version": 99}))
    with pytest.raises(
        StoreFormatError, match=r"meta\.json: Unsupported store version: 99\. Expected 2"
    ):
        lading.open_store(dest)
    meta_path.write_text(json.dumps({**meta, "format": "parquet"}))
    with pytest.raises(StoreFormatError, match="format is 'parquet'"):
        lading.open_store(dest)
    meta_path.write_text(json.dumps({**meta, "files": {"../../etc/passwd": {"size": 1}}}))
    with pytest.raises(StoreFormatError, match="points outside the store"):
        lading.open_store(dest)


def test_verify_finds_a_flipped_byte(tiny_tsv: Path, tmp_path: Path) -> None:
    from lading.disk import verify_checksums

    dest = tmp_path / "s"
    lading.build_store(tiny_tsv, dest, progress=False)
    assert verify_checksums(dest) == []
    text = store_file(dest, "text.bin")
    data = bytearray(text.read_bytes())
    data[0] ^= 0xFF
    text.write_bytes(bytes(data))
    found = verify_checksums(dest)
    assert [p.split(":")[0] for p in found] == [str(text)]
    assert found[0].endswith("rebuild the store with `lading build --overwrite`")  # the fix


@pytest.mark.parametrize("name", ["text.bin", "text.off", "ids.bin"])
def test_zero_filled_file_is_refused_on_open(tmp_path: Path, name: str) -> None:
    """A file of the right size but all zeros (what a crash can leave on some filesystems)."""
    src = write(tmp_path / "c.tsv", "".join(f"d{i}\tpassage number {i}\n" for i in range(3000)))
    dest = tmp_path / "s"
    lading.build_store(src, dest, progress=False)
    path = store_file(dest, name)
    path.write_bytes(bytes(path.stat().st_size))
    with pytest.raises(StoreFormatError, match=rf"{name}: .*all zero bytes.*Rebuild"):
        lading.open_store(dest)


def test_damage_past_the_spot_checks_is_found_by_verify(tmp_path: Path) -> None:
    from lading.disk import verify_checksums

    src = write(tmp_path / "c.tsv", "".join(f"d{i}\tpassage number {i}\n" for i in range(3000)))
    dest = tmp_path / "s"
    lading.build_store(src, dest, progress=False)
    text = store_file(dest, "text.bin")
    data = bytearray(text.read_bytes())
    assert len(data) > 3 * 4096
    data[len(data) // 2] ^= 0x01
    text.write_bytes(bytes(data))
    lading.open_store(dest)  # opening reads 8 KiB per file; a middle byte needs verify
    assert [p.split(":")[0] for p in verify_checksums(dest)] == [str(text)]


def test_failed_build_leaves_nothing_that_opens(tmp_path: Path) -> None:
    src = write(tmp_path / "c.tsv", "1\tok\nbad line\n")
    dest = tmp_path / "s"
    with pytest.raises(SourceError):
        lading.build_store(src, dest, progress=False)
    with pytest.raises(StoreFormatError, match="not a lading store"):
        lading.open_store(dest)
    assert [p.name for p in tmp_path.rglob("*") if ".tmp-" in p.name] == []


def test_leftover_temp_dirs_of_dead_builders_are_removed(tiny_tsv: Path, tmp_path: Path) -> None:
    dead = tmp_path / "s.tmp-999999999-abcd"  # no such pid
    dead.mkdir()
    (dead / "text.bin").write_bytes(b"half")
    lading.build_store(tiny_tsv, tmp_path / "s", progress=False)
    assert not dead.exists()


def test_never_replaces_a_folder_that_is_not_a_store(tiny_tsv: Path, tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    write(mine / "thesis.tex", "precious")
    with pytest.raises(FileExistsError, match="not a lading store"):
        lading.build_store(tiny_tsv, mine, progress=False)
    assert (mine / "thesis.tex").read_text() == "precious"


def test_a_meta_json_of_the_users_does_not_make_a_folder_lading_s(
    tiny_tsv: Path, tmp_path: Path
) -> None:
    """A folder is lading's by a manifest lading wrote, not by any file named meta.json: a
    build or a stage into the user's project folder is refused and nothing of it is lost."""
    from lading.disk.stage import stage

    mine = tmp_path / "project"
    write(mine / "meta.json", '{"experiment": 7}')
    write(mine / "results" / "precious.csv", "a,b\n")
    with pytest.raises(FileExistsError, match=rf"{mine} exists and is not a lading store"):
        lading.build_store(tiny_tsv, mine, progress=False)
    store = lading.build_store(tiny_tsv, tmp_path / "s", progress=False)
    with pytest.raises(FileExistsError, match=str(mine)):
        stage(store.path, mine)
    assert (mine / "meta.json").read_text() == '{"experiment": 7}'
    assert (mine / "results" / "precious.csv").read_text() == "a,b\n"
    alone = tmp_path / "alone"  # the user's meta.json and nothing else: still theirs
    write(alone / "meta.json", '{"author": "me"}')
    with pytest.raises(FileExistsError, match="is not a lading store"):
        lading.build_store(tiny_tsv, alone, progress=False)
    assert (alone / "meta.json").read_text() == '{"author": "me"}'


def test_a_dataset_or_a_checkpoint_never_replaces_a_store(tiny_tsv: Path, tmp_path: Path) -> None:
    """What is published whole (a repartitioned parquet dataset, a training checkpoint) was
    checked only to be lading's: a store in its place was replaced."""
    from lading.disk.atomic import publish
    from lading.train.checkpoint import save

    store = lading.build_store(tiny_tsv, tmp_path / "s", progress=False)
    dataset = tmp_path / "new"
    write(dataset / "_lading.json", "{}")
    with pytest.raises(FileExistsError, match=r"holds a lading lading\.packed directory"):
        publish(dataset, store.path)
    with pytest.raises(FileExistsError, match=r"lading\.train\.checkpoint"):
        save({"step": 1}, store.path)
    assert len(lading.open_store(store.path)) == len(store)
    save({"step": 1}, tmp_path / "ckpt")
    save({"step": 2}, tmp_path / "ckpt")  # a checkpoint over a checkpoint: as before


def test_a_damaged_manifest_beside_lading_s_snapshots_is_rebuilt(
    tiny_tsv: Path, tmp_path: Path
) -> None:
    """A store whose meta.json is damaged (only lading's snapshots beside it) may be rebuilt."""
    dest = tmp_path / "s"
    lading.build_store(tiny_tsv, dest, progress=False)
    (dest / "meta.json").write_text("{not json")
    store = lading.build_store(tiny_tsv, dest, progress=False)
    assert len(store) > 0


def test_a_build_of_one_kind_never_replaces_another_kind(tmp_path: Path) -> None:
    """A token corpus build into a document store's folder (and the reverse) is refused
    naming both kinds: a typo in a path must not turn a store into a corpus."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    from lading.lm import TokenCorpus

    src = write(tmp_path / "c.tsv", "".join(f"d{i}\tword{i} text\n" for i in range(20)))
    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(["word text"], trainers.WordLevelTrainer(special_tokens=["[UNK]"]))
    tok.save(str(tmp_path / "tok.json"))
    store = tmp_path / "docs"
    lading.build_store(src, store, progress=False)
    with pytest.raises(FileExistsError, match=rf"{store} holds a lading store.*token corpus"):
        TokenCorpus.build(src, store, str(tmp_path / "tok.json"), append_eos=False, progress=False)
    assert len(lading.open_store(store)) == 20
    corpus = tmp_path / "corpus"
    built = TokenCorpus.build(
        src, corpus, str(tmp_path / "tok.json"), append_eos=False, progress=False
    )
    with pytest.raises(FileExistsError, match=rf"{corpus} holds a lading token corpus.*store"):
        lading.build_store(src, corpus, progress=False)
    assert TokenCorpus.open(corpus).tokens[:].tolist() == built.tokens[:].tolist()


def test_workers_read_the_store_after_fork(tiny_tsv: Path, tmp_path: Path) -> None:
    import torch.utils.data as tud

    store = lading.build_store(tiny_tsv, tmp_path / "s", progress=False)
    store.get_many(["0"])  # map it in the parent first: children must reopen, not reuse

    class Docs(tud.Dataset[str]):
        def __len__(self) -> int:
            return 5

        def __getitem__(self, i: int) -> str:
            return store[store.ids()[i]] + f"|{os.getpid()}"

    loader = tud.DataLoader(Docs(), batch_size=None, num_workers=2, multiprocessing_context="fork")
    got = list(loader)
    assert sorted(g.split("|")[0] for g in got) == sorted(store.get_many(store.ids()))
    assert {g.split("|")[1] for g in got} != {str(os.getpid())}


def _train_tokenizer(tmp_path: Path, texts: list[str], vocab_size: int) -> Path:
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import models, normalizers, pre_tokenizers, trainers

    tok = tokenizers.Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
    )
    tok.train_from_iterator(texts, trainer)
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    return path


def test_tokens_match_the_tokenizer_and_use_uint16(tiny_tsv: Path, tmp_path: Path) -> None:
    texts = lading.InMemoryStore.from_source(tiny_tsv).get_many(["0", "1", "2", "3", "7"])
    tok_path = _train_tokenizer(tmp_path, texts * 20, 200)
    store = lading.build_store(tiny_tsv, tmp_path / "s", tokenizer=tok_path, progress=False)
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tok_path))
    assert store.meta["tokens"]["dtype"] == "<u2"
    assert store_file(tmp_path / "s", "tokens.bin").stat().st_size == 2 * sum(
        len(tok.encode(t, add_special_tokens=False).ids) for t in texts
    )
    for doc_id, text in zip(["0", "1", "2", "3", "7"], texts):
        got = store.tokens(doc_id)
        assert got.dtype == np.uint16
        assert got.tolist() == tok.encode(text, add_special_tokens=False).ids
    many = store.tokens_many(["3", "0"])
    assert [m.tolist() for m in many] == [store.tokens("3").tolist(), store.tokens("0").tolist()]
    assert not many[0].flags.writeable  # a view of the read-only map, not a copy
    cut = lading.build_store(
        tiny_tsv, tmp_path / "cut", tokenizer=tok_path, max_length=2, progress=False
    )
    assert max(len(t) for t in cut.tokens_many(cut.ids())) == 2
    assert store.has_tokens and store.tokenizer_path == store_file(tmp_path / "s", "tokenizer.json")
    assert store.token_info is not None and store.token_info["dtype"] == "<u2"
    assert store.tokenizer().get_vocab() == tok.get_vocab()
    plain = lading.build_store(tiny_tsv, tmp_path / "plain", progress=False)
    with pytest.raises(ValueError, match="build it with a tokenizer"):
        plain.tokens("0")


def test_large_vocabularies_use_uint32() -> None:
    from lading.stores.tokens import token_dtype

    assert token_dtype(30_522) == np.uint16 and token_dtype(65_536) == np.uint16
    assert token_dtype(65_537) == np.uint32 and token_dtype(250_002) == np.uint32


def test_offset_store_refuses_compressed_and_changed_sources(tmp_path: Path) -> None:
    import gzip

    gz = write(tmp_path / "c.tsv.gz", gzip.compress(b"1\tx\n"))
    with pytest.raises(ValueError, match="needs an uncompressed file"):
        lading.OffsetStore.build(gz, tmp_path / "o")
    src = write(tmp_path / "c.tsv", "1\tx\n2\ty\n")
    lading.OffsetStore.build(src, tmp_path / "o")
    write(src, "1\tX\n2\ty\n3\tz\n")
    with pytest.raises(StoreFormatError, match="stale"):
        lading.OffsetStore(tmp_path / "o")
