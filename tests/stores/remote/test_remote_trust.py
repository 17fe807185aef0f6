"""A bucket and a node cache are input others may have written: a hostile remote manifest
writes nothing outside the cache, a damaged ledger is set aside, and no secret prints.

The fuzz rewrites the store's ``meta.json`` (and a ``snap-*/manifest.json``) in the bucket
with hostile values (``..``, absolute names, NUL, very long names, wrong types, negative or
huge sizes and counts) and opens it: the right store or one line naming the field, and
nothing outside the cache created, written or deleted (an audit hook on ``open``, renames,
removals and ``mkdir``, and a snapshot of the folders around the cache).
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import random
import sqlite3
import sys
import threading
import warnings
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

import lading
from conftest import write
from lading.errors import LadingError, StoreFormatError
from lading.remote.cache.damaged import DamagedCacheWarning
from lading.remote.cache.ledger import LEDGER_FILE
from lading.remote.clients import open_client
from lading.remote.settings import RemoteSettings
from lading.stores.remote.store import RemoteStore
from lading.testing import LocalS3

hypothesis = pytest.importorskip("hypothesis")
st = pytest.importorskip("hypothesis.strategies")

DOCS = {f"d{i}": f"text of {i}" for i in range(50)}
_made = iter(range(10**6))


@pytest.fixture(scope="module")
def fast(s3: LocalS3) -> Iterator[LocalS3]:
    """The local S3 without its 30 ms latency, for this module's many opens."""
    s3._call("latency", {"latency": 0.0, "jitter": 0.0})
    yield s3
    s3._call("latency", {"latency": 0.03, "jitter": 0.01})


@pytest.fixture(scope="module")
def built(fast: LocalS3, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, bytes]:
    """A store in a bucket of its own: its URL and its manifest's bytes as built."""
    folder = tmp_path_factory.mktemp("trust")
    source = write(folder / "docs.tsv", "".join(f"{k}\t{v}\n" for k, v in DOCS.items()))
    fast.make_bucket("trust-manifest")
    url = "s3://trust-manifest/docs"
    lading.build_store(source, url, cache=str(folder / "b"), progress=False)
    return url, open_client(url).get("meta.json")


# replay a red run with LADING_FUZZ_SEED=<the seed it printed>
SEED = int(os.environ.get("LADING_FUZZ_SEED") or random.SystemRandom().randrange(2**32))


class Watch:
    """Every path opened for writing, created, renamed or removed while ``on`` (audit hook:
    installed once, it cannot be removed)."""

    on = False
    seen: ClassVar[list[tuple[str, str]]] = []
    _installed = False

    @classmethod
    def install(cls) -> None:
        if not cls._installed:
            sys.addaudithook(cls._hook)
            cls._installed = True

    @classmethod
    def _hook(cls, event: str, args: tuple[Any, ...]) -> None:
        if not cls.on or threading.current_thread().name.startswith("lading-upload"):
            return
        if event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
            mode, flags = (args[1] or "r"), int(args[2] or 0)
            writes = any(c in str(mode) for c in "wax+") or flags & (
                os.O_WRONLY | os.O_RDWR | os.O_CREAT
            )
            if writes:
                cls.seen.append((event, os.fsdecode(args[0])))
        elif event in ("os.rename", "os.remove", "os.rmdir", "os.mkdir", "shutil.rmtree"):
            # a name relative to a directory descriptor (shutil.rmtree removes by dir_fd) is
            # resolved against that directory, never against the working directory
            fds = {"os.remove": (1,), "os.rmdir": (1,), "os.mkdir": (2,), "os.rename": (2, 3)}
            for n, arg in enumerate(args[:2]):
                if isinstance(arg, (str, bytes, os.PathLike)):
                    at = fds.get(event, ())
                    fd = args[at[min(n, len(at) - 1)]] if at and len(args) > max(at) else None
                    name = os.fsdecode(arg)
                    if isinstance(fd, int) and fd >= 0 and not os.path.isabs(name):
                        name = os.path.join(os.readlink(f"/proc/self/fd/{fd}"), name)
                    cls.seen.append((event, name))


def _tree(root: Path) -> set[str]:
    return {str(p) for p in root.rglob("*")}


@contextlib.contextmanager
def only_inside(cache: Path, around: Path) -> Iterator[None]:
    """Fail if anything outside ``cache`` is written, or if ``around`` (which holds it)
    changes outside it."""
    Watch.install()
    before = {p for p in _tree(around) if not p.startswith(str(cache))}
    Watch.seen.clear()
    Watch.on = True
    try:
        yield
    finally:
        Watch.on = False
    root = os.path.realpath(cache)
    outside = [
        (e, p)
        for e, p in Watch.seen
        if not (os.path.realpath(p) + os.sep).startswith(root + os.sep)
        and not (e == "os.mkdir" and root.startswith(os.path.realpath(p) + os.sep))
    ]  # making the cache folder given (and its parents) is fine
    assert outside == [], f"written outside the cache {cache}: {outside[:5]}"
    after = {p for p in _tree(around) if not p.startswith(str(cache))}
    assert after == before, f"changed around the cache: {sorted(after ^ before)[:5]}"


def _put_meta(url: str, meta: Any) -> None:
    raw = meta if isinstance(meta, bytes) else json.dumps(meta).encode()
    open_client(url).put("meta.json", raw)


def _open_watched(url: str, around: Path) -> RemoteStore | LadingError:
    cache = around / f"cache-{next(_made)}" / "node"
    cache.parent.mkdir()
    with only_inside(cache, around):
        try:
            store = lading.open_store(url, cache=cache, cache_bytes="1M", timeout=2.0)
        except LadingError as e:
            assert "\n" not in str(e)
            return e
        assert isinstance(store, RemoteStore)
        ids = sorted(DOCS)
        assert store.get_many(ids) == [DOCS[i] for i in ids]  # opened: the right store
        store.close()
        return store


def _first_file(meta: dict[str, Any], suffix: str) -> str:
    return next(n for n in meta["files"] if n.endswith(suffix))


def _hostile(meta: dict[str, Any], case: str, outside: Path) -> tuple[dict[str, Any], str]:
    """``meta`` changed by ``case``; the field the error must name."""
    m = json.loads(json.dumps(meta))
    ids_off = _first_file(m, "ids.off")
    if case == "dotdot-file":
        m["files"]["../../../../../evil.txt"] = dict(m["files"][ids_off])
        return m, "files"
    if case == "absolute-file":
        m["files"][str(outside / "evil.txt")] = dict(m["files"][ids_off])
        return m, "files"
    if case == "nul-file":
        m["files"]["a\x00b"] = dict(m["files"][ids_off])
        return m, "files"
    if case == "long-file":
        m["files"]["x" * 5000] = dict(m["files"][ids_off])
        return m, "files"
    if case == "dotdot-snapshot":
        m["snapshot"] = "../../../escaped"
        return m, "snapshot"
    if case == "dotdot-layout":
        m["shards"][0]["columns"]["ids"]["offsets"] = "../../evil.off"
        return m, "shards[0].columns.ids.offsets"
    if case == "unlisted-layout":
        m["shards"][0]["columns"]["ids"]["offsets"] = "snap-x/other.off"
        return m, "shards[0].columns.ids.offsets"
    if case == "dotdot-index":
        m["index"]["dir"] = "../.."
        return m, "index.dir"
    if case == "negative-size":
        m["files"][ids_off]["size"] = -5
        return m, "size"
    if case == "huge-size":
        m["files"][ids_off]["size"] = 10**18
        return m, "size"
    if case == "string-size":
        m["files"][ids_off]["size"] = "24"
        return m, "size"
    if case == "huge-count":
        m["count"] = 10**30
        return m, "count"
    raise AssertionError(case)


CASES = [
    "dotdot-file", "absolute-file", "nul-file", "long-file", "dotdot-snapshot", "dotdot-layout",
    "unlisted-layout", "dotdot-index", "negative-size", "huge-size", "string-size", "huge-count",
]  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_a_hostile_remote_manifest_is_refused_naming_the_field(
    built: tuple[str, bytes], tmp_path: Path, case: str
) -> None:
    url, raw = built
    outside = tmp_path / "outside"
    outside.mkdir()
    meta, field = _hostile(json.loads(raw), case, outside)
    if case == "absolute-file":  # the object exists: the old stage wrote it to that path
        open_client(url).put(str(outside / "evil.txt").lstrip("/"), b"x" * 24)
    try:
        _put_meta(url, meta)
        found = _open_watched(url, tmp_path)
    finally:
        _put_meta(url, raw)
    assert isinstance(found, StoreFormatError), f"{case}: opened"
    assert field in str(found)
    assert list(outside.iterdir()) == []


def test_offsets_past_their_data_object_are_refused_at_the_open(
    built: tuple[str, bytes], tmp_path: Path
) -> None:
    """A ``text.off`` whose last offset ends past ``text.bin`` (its CRC32 in the manifest to
    match, so staging takes it): refused at the open naming both files, not met as a read
    failed 4 times ("check that the endpoint is up") at the last document."""
    url, raw = built
    meta = json.loads(raw)
    name = _first_file(meta, "text.off")
    client = open_client(url)
    kept = client.get(name)
    offsets = np.frombuffer(kept, dtype="<u8").copy()
    offsets[-1] += 5000
    changed = offsets.tobytes()
    meta["files"][name]["crc32"] = zlib.crc32(changed)
    meta["snapshot"] = meta["snapshot"] + "x"  # another snapshot: nothing staged is reused
    try:
        client.put(name, changed)
        _put_meta(url, meta)
        found = _open_watched(url, tmp_path)
    finally:
        client.put(name, kept)
        _put_meta(url, raw)
    assert isinstance(found, StoreFormatError), "opened"
    assert "text.off" in str(found) and "text.bin" in str(found), found


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)
_NAMES = st.sampled_from(
    ["..", "../x", "/etc/passwd", "a/../../b", "a\x00b", "x" * 300, "", ".", "a//b", "C:/x"]
)


def _paths(meta: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in ``meta`` (dict keys and list indices down to leaves)."""
    out = [at] if at else []
    if isinstance(meta, dict):
        for k, v in meta.items():
            out += _paths(v, (*at, k))
    elif isinstance(meta, list):
        for i, v in enumerate(meta):
            out += _paths(v, (*at, i))
    return out


def _set(meta: Any, at: tuple[Any, ...], value: Any) -> None:
    """Set the value at ``at``, unless an earlier change replaced a container on the way."""
    with contextlib.suppress(TypeError, KeyError, IndexError):
        for step in at[:-1]:
            meta = meta[step]
        meta[at[-1]] = value


@hypothesis.settings(
    max_examples=int(os.environ.get("LADING_FUZZ_EXAMPLES", "40")),
    deadline=None,
    database=None,
    suppress_health_check=list(hypothesis.HealthCheck),
)
@pytest.mark.slow  # fuzz: ~5 s
@hypothesis.seed(SEED)
@hypothesis.given(data=st.data())
def test_fuzz_every_field_of_the_remote_manifest(
    built: tuple[str, bytes], tmp_path_factory: pytest.TempPathFactory, data: Any
) -> None:
    print(f"remote manifest fuzz: LADING_FUZZ_SEED={SEED}")
    url, raw = built
    meta = json.loads(raw)
    places = _paths(meta)
    for _ in range(data.draw(st.integers(1, 3), label="changes")):
        at = data.draw(st.sampled_from(places), label="field")
        value = data.draw(_JSON | _NAMES, label="value")
        _set(meta, at, value)
    hostile = data.draw(st.booleans(), label="hostile file name")
    if hostile and isinstance(meta.get("files"), dict):  # a change above may have replaced it
        meta["files"][data.draw(_NAMES, label="name")] = {"size": 1}
    around = tmp_path_factory.mktemp("fuzz")
    try:
        _put_meta(url, meta)
        _open_watched(url, around)  # opens the right store, or one line; nothing outside
    finally:
        _put_meta(url, raw)


def test_fuzz_a_snapshot_manifest_opened_by_snapshot(
    built: tuple[str, bytes], tmp_path: Path
) -> None:
    url, raw = built
    meta = json.loads(raw)
    snap = meta["snapshot"]
    hostile = dict(meta, files={**meta["files"], "../../evil": {"size": 1}})
    client = open_client(url)
    client.put(f"{snap}/manifest.json", json.dumps(hostile).encode())
    other = dict(meta, snapshot="snap-20000101T000000Z-00000000")
    try:
        _put_meta(url, other)  # the current manifest names another snapshot
        cache = tmp_path / "c"
        with only_inside(cache, tmp_path), pytest.raises(StoreFormatError, match="files"):
            RemoteStore(url, RemoteSettings.of(cache, "1M", timeout=2.0), snapshot=snap)
    finally:
        _put_meta(url, raw)
        client.delete(f"{snap}/manifest.json")


# -- a damaged node cache ----------------------------------------------------------------------


def _damage(ledger: Path, how: str) -> None:
    data = bytearray(ledger.read_bytes())
    if how == "garbage":
        ledger.write_bytes(os.urandom(len(data) or 8192))
    elif how == "truncated":
        ledger.write_bytes(bytes(data[: len(data) // 2]))
    elif how == "pages":  # every page but the first overwritten: the header still says SQLite
        page = int.from_bytes(data[16:18], "big")
        for at in range(page, len(data), page):
            data[at : at + page] = b"\xa5" * page
        ledger.write_bytes(bytes(data))
    else:
        ledger.write_text("not a database\n")


def _a_ledger_at_rest(url: str, cache: Path) -> Path:
    """The ledger of node cache ``cache`` after two documents of ``url`` were read, its WAL
    folded in (what a damage test then damages)."""
    store = lading.open_store(url, cache=cache, cache_bytes="1M", timeout=2.0)
    assert store.get_many(["d1", "d2"]) == [DOCS["d1"], DOCS["d2"]]
    store.close()
    del store
    ledger = cache / LEDGER_FILE
    with contextlib.closing(sqlite3.connect(ledger)) as conn:  # fold the WAL in
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return ledger


@pytest.mark.parametrize("how", ["garbage", "truncated", "pages", "text"])
def test_a_damaged_ledger_is_set_aside_and_rebuilt(
    built: tuple[str, bytes], tmp_path: Path, how: str
) -> None:
    url, _ = built
    cache = tmp_path / "cache"
    ledger = _a_ledger_at_rest(url, cache)
    _damage(ledger, how)
    with pytest.warns(DamagedCacheWarning, match=str(ledger)):
        again = lading.open_store(url, cache=cache, cache_bytes="1M", timeout=2.0)
    ids = sorted(DOCS)
    assert again.get_many(ids) == [DOCS[i] for i in ids]
    assert (cache / f"{LEDGER_FILE}.damaged").is_file()
    again.close()
    with contextlib.closing(sqlite3.connect(ledger)) as conn:
        assert conn.execute("PRAGMA quick_check").fetchall() == [("ok",)]


@pytest.mark.parametrize("how", ["sound", "pages"])
def test_a_large_ledger_is_probed_table_by_table_and_kept_when_sound(
    built: tuple[str, bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """A ledger over ``FULL_CHECK_BYTES`` gets a query of each table and index, not a
    ``quick_check``: a sound one is kept, its blocks read again without a GET (a probe named
    a column the blocks table does not have, so every ledger that large was set aside as
    damaged at every open, and its cache started empty), damaged pages still set it aside."""
    from lading.remote.cache import damaged

    monkeypatch.setattr(damaged, "FULL_CHECK_BYTES", 0)  # every ledger is "large"
    url, _ = built
    cache, ids = tmp_path / "cache", sorted(DOCS)
    store = lading.open_store(url, cache=cache, cache_bytes="1M", timeout=2.0)
    assert store.get_many(ids) == [DOCS[i] for i in ids]
    store.close()
    del store
    ledger = cache / LEDGER_FILE
    with contextlib.closing(sqlite3.connect(ledger)) as conn:  # fold the WAL in
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    if how == "pages":
        _damage(ledger, how)
        with pytest.warns(DamagedCacheWarning, match=str(ledger)):
            lading.open_store(url, cache=cache, cache_bytes="1M", timeout=2.0).close()
        return
    with warnings.catch_warnings():
        warnings.simplefilter("error", DamagedCacheWarning)
        again = lading.open_store(url, cache=cache, cache_bytes="1M", timeout=2.0)
    assert not (cache / f"{LEDGER_FILE}.damaged").exists()
    assert again.get_many(ids) == [DOCS[i] for i in ids]
    assert again.cache_stats()["misses"] == 0  # every block was kept
    again.close()


def _ledger_trees(ledger: Path) -> list[tuple[str, int]]:
    """Every table and index of ``ledger`` with its root page (its B-tree's first page)."""
    with contextlib.closing(sqlite3.connect(ledger)) as conn:
        found = conn.execute(
            "SELECT name, rootpage FROM sqlite_master WHERE type IN ('table', 'index') "
            "AND rootpage > 0 ORDER BY name"
        ).fetchall()
    return [(str(name), int(root)) for name, root in found]


_TREES = [  # the ledger's tables and indexes (a new one fails the test below until listed)
    "blocks", "blocks_key", "blocks_unpinned", "counters", "objects", "orders", "regions",
    "settings", "sqlite_autoindex_counters_1", "sqlite_autoindex_objects_1",
    "sqlite_autoindex_settings_1",
]  # fmt: skip


@pytest.mark.parametrize("tree", _TREES)
def test_a_large_ledger_with_any_tree_damaged_is_set_aside(
    built: tuple[str, bytes],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    tree: str,
) -> None:
    """The table-by-table probe of a ledger over ``FULL_CHECK_BYTES`` reads every table and
    index: garbage in the root page of any one sets the ledger aside at open (the probe read
    settings, blocks, objects and regions only: garbage in ``orders``, ``counters`` or
    ``blocks_unpinned`` was kept, and with ``orders`` damaged the first plan of a run raised
    "database disk image is malformed")."""
    from lading.remote.cache import damaged

    monkeypatch.setattr(damaged, "FULL_CHECK_BYTES", 0)  # every ledger is "large"
    url, _ = built
    cache = tmp_path / "cache"
    ledger = _a_ledger_at_rest(url, cache)
    trees = dict(_ledger_trees(ledger))
    assert sorted(trees) == _TREES
    data = bytearray(ledger.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    at = (trees[tree] - 1) * page
    data[at : at + page] = b"\xa5" * page
    ledger.write_bytes(bytes(data))
    with pytest.warns(DamagedCacheWarning, match=str(ledger)):
        again = lading.open_store(url, cache=cache, cache_bytes="1M", timeout=2.0)
    assert (cache / f"{LEDGER_FILE}.damaged").exists()
    assert again.get_many(["d1", "d2"]) == [DOCS["d1"], DOCS["d2"]]
    again.close()


@pytest.mark.parametrize("how", ["deleted", "truncated"])
def test_a_payload_file_gone_under_its_ledger_is_fetched_again(
    built: tuple[str, bytes], tmp_path: Path, how: str
) -> None:
    """``blocks.data`` removed (to free disk) or cut while its ledger stayed: the blocks the
    ledger lists as ready are forgotten and fetched again (were: read from the new sparse
    file, every document zeros)."""
    from lading.remote.cache.regions import DATA_FILE

    url, _ = built
    cache = tmp_path / "cache"
    ids = sorted(DOCS)
    store = lading.open_store(url, cache=cache, cache_bytes="1M", timeout=2.0)
    assert store.get_many(ids) == [DOCS[i] for i in ids]
    store.close()
    del store
    payload = cache / DATA_FILE
    if how == "deleted":
        payload.unlink()
    else:
        os.truncate(payload, payload.stat().st_size // 3)
    again = lading.open_store(url, cache=cache, cache_bytes="1M", timeout=2.0)
    assert again.get_many(ids) == [DOCS[i] for i in ids]
    assert again.get_many(ids) == [DOCS[i] for i in ids]  # from the blocks kept again
    again.close()


@pytest.mark.parametrize("how", ["bytes", "rows"])
def test_a_damaged_block_is_fetched_again_never_read_as_data(
    built: tuple[str, bytes], tmp_path: Path, how: str
) -> None:
    """A block's bytes changed in ``blocks.data`` (same file, same size), or its ledger row
    pointed elsewhere (a valid SQLite file): were read as the documents, every one wrong. Each
    block's CRC32, kept in its row at the fill, is checked at a process's first read of it."""
    from lading.remote.cache.regions import DATA_FILE

    url, _ = built
    cache = tmp_path / "cache"
    ids = sorted(DOCS)
    store = lading.open_store(url, cache=cache, cache_bytes="1M", timeout=2.0)
    assert store.get_many(ids) == [DOCS[i] for i in ids]
    store.close()
    del store
    if how == "bytes":
        payload = cache / DATA_FILE
        raw = bytearray(payload.read_bytes())
        payload.write_bytes(bytes(raw).swapcase())  # every cached letter, in place
    else:
        with contextlib.closing(sqlite3.connect(cache / LEDGER_FILE)) as conn:
            # (in two steps: places are the key, and one block may start 7 bytes after another)
            conn.execute("UPDATE blocks SET at = -(at + 7)")
            conn.execute("UPDATE blocks SET at = -at")
            conn.commit()
    again = lading.open_store(url, cache=cache, cache_bytes="1M", timeout=2.0)
    with pytest.warns(DamagedCacheWarning, match="checksum"):
        assert again.get_many(ids) == [DOCS[i] for i in ids]
    assert again.cache_stats()["gets"] > 0  # fetched again
    assert again.get_many(ids) == [DOCS[i] for i in ids]  # from the blocks kept again
    again.close()


def test_a_block_this_process_filled_is_not_checked_again_at_its_read(
    built: tuple[str, bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fill computed a block's CRC32 over the bytes it wrote: this process's first read of
    it computed it again (one more pass over every cold byte). A block this process filled is
    known intact; one found on disk by a new node (another process's, a folder reopened) is
    still checked (``test_a_damaged_block_is_fetched_again_never_read_as_data``)."""
    import zlib

    from lading.remote.cache import reads

    url, _ = built
    ids = sorted(DOCS)
    store = lading.open_store(url, cache=tmp_path / "cache", cache_bytes="1M", timeout=2.0)
    cache = store._columns.cache  # type: ignore[attr-defined]
    assert store.get_many(ids) == [DOCS[i] for i in ids]  # cold: fetched and filled
    cache.drain()
    checked: list[int] = []

    def crc32(data: Any, value: int = 0) -> int:
        checked.append(len(data))
        return zlib.crc32(data, value)

    monkeypatch.setattr(reads, "zlib", type("Z", (), {"crc32": staticmethod(crc32)}))
    assert store.get_many(ids) == [DOCS[i] for i in ids]  # from the blocks it filled
    assert cache.stats()["hits"] >= len(ids)
    assert checked == []  # none computed again
    store.close()
    again = lading.open_store(url, cache=tmp_path / "cache", cache_bytes="1M", timeout=2.0)
    assert again.get_many(ids) == [DOCS[i] for i in ids]  # a new node: found on disk
    assert checked  # checked at its first read
    again.close()


def test_a_folder_reset_under_a_live_process_is_an_error_never_wrong_bytes(
    built: tuple[str, bytes], tmp_path: Path
) -> None:
    """Another process sets the folder's ledger aside (damaged) and removes its payload file
    while this one reads: a new thread's read and a read that must fetch are refused naming
    the folder (were: a new thread attached to the new ledger and read its rows against this
    process's old payload file: zeros, or another document's bytes)."""
    from lading.remote.cache.ledger import CacheFolderResetError
    from lading.remote.cache.regions import DATA_FILE

    url, _ = built
    cache = tmp_path / "cache"
    ids = sorted(DOCS)
    store = lading.open_store(url, cache=cache, cache_bytes="1M", timeout=2.0)
    assert store.get_many(ids[:4]) == [DOCS[i] for i in ids[:4]]
    for name in os.listdir(cache):  # what set_aside does, in another process
        if name.startswith(LEDGER_FILE):
            os.rename(cache / name, cache / f"{name}.damaged")
    (cache / DATA_FILE).unlink()
    with contextlib.closing(sqlite3.connect(cache / LEDGER_FILE)) as conn:
        conn.execute("CREATE TABLE blocks (x)")  # the other process's new ledger
    with pytest.raises(CacheFolderResetError, match=str(cache)):
        store.get_many(ids[4:])  # a fetch: no claim in a folder not this process's
    out: dict[str, Any] = {}

    def read() -> None:
        try:
            out["got"] = store.get_many(ids[:4])
        except Exception as e:
            out["error"] = e

    thread = threading.Thread(target=read)
    thread.start()
    thread.join(30)
    assert isinstance(out.get("error"), CacheFolderResetError), out
    store.close()


def test_a_claim_whose_get_is_refused_is_given_back(
    built: tuple[str, bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fetcher closes between a claim's transaction and its GETs' start: the claims are
    given back (they stayed, held by a live process: every reader of the node waited 5 s a
    document on them, then read around the cache)."""
    from lading.remote.objects import RemoteReadError

    url, _ = built
    store = lading.open_store(url, cache=tmp_path / "cache", cache_bytes="1M", timeout=2.0)
    cache = store._columns.cache
    refused = RemoteReadError("closed (a close between the claim and the GETs)")
    monkeypatch.setattr(
        cache.fetcher, "submit_many", lambda *a, **k: (_ for _ in ()).throw(refused)
    )
    with pytest.raises(RemoteReadError, match="closed"):
        store.get_many(sorted(DOCS)[:3])
    with cache.ledger.read() as conn:
        held = conn.execute("SELECT count(*) FROM blocks WHERE owner IS NOT NULL").fetchone()[0]
    assert held == 0
    store.close()


# -- secrets -------------------------------------------------------------------------------------

SECRET = "SEKRET-do-not-print-7f3a"


def test_no_secret_in_a_repr_an_error_or_a_log_line(
    built: tuple[str, bytes],
    fast: LocalS3,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import logging

    caplog.set_level(logging.DEBUG)
    url, _ = built
    options = {"endpoint_url": fast.endpoint, "key": "testing", "secret": SECRET, "token": SECRET}
    store = lading.open_store(
        url, cache=tmp_path / "c", cache_bytes="1M", storage_options=options, timeout=2.0
    )
    assert isinstance(store, RemoteStore)
    said = [repr(store), str(store), repr(store.settings), str(store.settings)]
    said.append(repr(store._columns.cache.fetcher.client))
    assert store.settings.options["secret"] == SECRET  # kept (workers need it) ...
    assert pickle.loads(pickle.dumps(store)).settings.options["secret"] == SECRET
    for kind in ["error", "hang"]:  # ... and printed nowhere, a failure's message included
        fast.fault("meta.json", 99, kind)
        with pytest.raises(LadingError) as caught:
            lading.open_store(
                url, cache=tmp_path / "d", cache_bytes="1M", storage_options=options, timeout=0.3
            )
        said.append(str(caught.value))
        fast.reset()
    with pytest.raises(LadingError) as caught:
        lading.open_store(
            "s3://no-such-bucket-x/d", cache=tmp_path / "e", storage_options=options, timeout=1
        )
    said.append(str(caught.value))
    said += [r.getMessage() for r in caplog.records]
    out = capsys.readouterr()
    said += [out.out, out.err]
    assert all(SECRET not in text for text in said), [t for t in said if SECRET in t][:1]
    assert "***" in repr(store.settings)
    store.close()


def test_inspect_and_get_print_no_secret(
    built: tuple[str, bytes],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from lading.cli import main

    url, _ = built
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)  # moto does not check signatures
    monkeypatch.setenv("LADING_CACHE", str(tmp_path / "lc"))
    assert main(["inspect", url]) == 0
    said = capsys.readouterr().out  # the store named as given, its staged copy beside it
    assert f"store      {url} (" in said and f"staged     {tmp_path / 'lc'}" in said, said
    assert main(["get", url, "d3"]) == 0
    assert main(["get", "s3://no-such-bucket-x/d", "d3"]) == 2
    out = capsys.readouterr()
    assert DOCS["d3"] in out.out and "does not exist" in out.err
    assert SECRET not in out.out + out.err


def test_get_of_an_id_not_in_a_bucket_store_names_its_url(
    built: tuple[str, bytes],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``lading get s3://... MISSING`` names the store's URL, what the user typed (it named
    the staged copy's folder under the node cache)."""
    from lading.cli import main

    url, _ = built
    monkeypatch.setenv("LADING_CACHE", str(tmp_path / "lc"))
    assert main(["get", url, "d3", "no-such-id"]) == 1
    out = capsys.readouterr()
    assert DOCS["d3"] in out.out
    assert f"id 'no-such-id' is not in {url}" in out.err, out.err
    assert str(tmp_path / "lc") not in out.err


def test_a_pinned_snapshot_removed_since_is_said_so_not_a_missing_store(
    bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A snapshot replaced and removed past its grace, opened again by id on a node without
    its staged copy (a spawned worker's store, its copy let go under the index budget) is
    named as gone with the fix (it said "no store at URL ... build a store there" of a store
    that is there)."""
    monkeypatch.setenv("LADING_SNAPSHOT_GRACE_S", "0")
    url = f"s3://{bucket}/gone"
    src = write(tmp_path / "a.tsv", "d1\tfirst\n")
    old = lading.build_store(src, url, cache=str(tmp_path / "u1"), progress=False).snapshot
    for n in range(2):  # replaced, and removed by the commit after
        write(tmp_path / "a.tsv", f"d1\tnew {n}\n")
        lading.build_store(tmp_path / "a.tsv", url, overwrite=True, cache=str(tmp_path / "u2"),
                           progress=False)  # fmt: skip
    with pytest.raises(StoreFormatError) as caught:
        RemoteStore(url, RemoteSettings.of(tmp_path / "fresh", "1M", timeout=2.0), snapshot=old)
    text = str(caught.value)
    assert old in text and "open" in text and "no store" not in text, text
    assert lading.open_store(url, cache=tmp_path / "fresh").get_many(["d1"]) == ["new 1"]


def test_verify_of_a_store_whose_snapshot_was_removed_says_so_not_damage(
    bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``verify()`` of an open store whose snapshot was replaced and removed since says that,
    with the fix (open it again), not damage: it listed every file as "missing or replaced:
    the store is damaged; rebuild it", and told the user to copy the new meta.json over the
    old snapshot's manifest."""
    from lading.errors import RemoteChangedError

    monkeypatch.setenv("LADING_SNAPSHOT_GRACE_S", "0")
    url = f"s3://{bucket}/verify-gone"
    src = write(tmp_path / "a.tsv", "d1\tfirst\n")
    lading.build_store(src, url, cache=str(tmp_path / "u1"), progress=False)
    store = lading.open_store(url, cache=tmp_path / "c")
    old = store.snapshot
    for n in range(2):
        write(tmp_path / "a.tsv", f"d1\tnew {n}\n")
        lading.build_store(tmp_path / "a.tsv", url, overwrite=True, cache=str(tmp_path / "u2"),
                           progress=False)  # fmt: skip
    with pytest.raises(RemoteChangedError) as caught:
        store.verify()
    text = str(caught.value)
    assert old in text and "open" in text and "rebuild" not in text, text
    store.close()
    assert lading.open_store(url, cache=tmp_path / "c").verify() == []


def test_rows_out_of_range_are_refused_as_a_local_store_refuses_them(
    built: tuple[str, bytes], tmp_path: Path
) -> None:
    """``texts_range`` and ``texts_at`` of a bucket's store take and refuse what a local
    store's do (a reversed range read as empty, a range past the end named rows it was not
    given; rows given as a 2-D array, read flat by a local store, raised an unrelated "list
    assignment index out of range")."""
    url, _ = built
    store = lading.open_store(url, cache=tmp_path / "c", cache_bytes="1M")
    n = len(store)
    for start, stop in ((5, 3), (n - 2, n + 2), (-1, 2)):
        with pytest.raises(IndexError, match=rf"rows {start}\.\.{stop} out of range for {n} rows"):
            store.texts_range(start, stop)
    assert store.texts_range(1, 1) == [] and store.texts_range(0, 2) == store.texts_at(
        np.array([0, 1])
    )
    assert store.texts_at(np.array([[0, 1]])) == store.texts_at(np.array([0, 1]))  # as local
    store.close()
