"""A node cache folder shared by a group (``chmod 2775``, as the docs say): any of its users can
put something under a name lading uses there. A symbolic link planted so is refused when a
process opens the folder, naming the entry and the fix, and what it points to is never
written or deleted (a review planted links as ``owners``, ``stores``, ``blocks.data`` and
``ledger.sqlite``: each made lading delete, write or add tables to what it pointed at)."""

from __future__ import annotations

import contextlib
import errno
import gc
import os
import sqlite3
import subprocess
import sys
import time
import weakref
from pathlib import Path

import numpy as np
import pytest

import lading
from conftest import wait_child, write
from lading.disk import STAGE_MARK
from lading.errors import StoreFormatError
from lading.remote.cache.damaged import DamagedCacheWarning
from lading.remote.cache.node import CacheFolderError, node_of, release
from lading.remote.cache.owners import Owner
from lading.remote.cache.regions import DataFile, Layout, PayloadCutError, folder_bytes
from lading.remote.stage import keep_within
from lading.stores.remote.store import RemoteStore
from lading.testing import LocalS3


def _theirs(folder: Path) -> dict[str, str]:
    """A folder of a user's own files (what a planted link points to); its files."""
    files = {name: f"the user's own {name}\n" for name in ("thesis.tex", "notes.md", "train.py")}
    folder.mkdir(parents=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    return files


def _still(folder: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in folder.iterdir()}


def _refused_naming(error: pytest.ExceptionInfo[CacheFolderError], entry: Path) -> None:
    text = str(error.value)
    assert str(entry) in text and "symbolic link" in text, text
    assert "remove the link" in text.lower() and "\n" not in text, text


def test_a_link_planted_as_owners_is_refused_and_its_folder_kept(tmp_path: Path) -> None:
    """``owners`` a link to a user's folder: opening the cache deleted every file there (each
    taken for a dead process's token). Now the open is refused, naming the link and the fix."""
    files = _theirs(tmp_path / "home")
    cache = tmp_path / "node"
    cache.mkdir()
    (cache / "owners").symlink_to(tmp_path / "home")
    with pytest.raises(CacheFolderError) as refused:
        node_of(cache, 1 << 20)
    _refused_naming(refused, cache / "owners")
    assert _still(tmp_path / "home") == files


def test_the_sweep_of_dead_tokens_never_follows_a_link(tmp_path: Path) -> None:
    """A link planted as ``owners`` after a process checked the folder: the sweep of dead
    tokens lists nothing through it (it removed every file of the folder linked to)."""
    files = _theirs(tmp_path / "home")
    cache = tmp_path / "node"
    cache.mkdir()
    (cache / "owners").symlink_to(tmp_path / "home")
    assert not Owner(cache).others_alive()
    assert _still(tmp_path / "home") == files


def test_a_cache_folder_that_is_itself_a_link_is_used(tmp_path: Path) -> None:
    """The folder the user gave may be a link (their choice): only the entries in it are
    lading's own."""
    (tmp_path / "real").mkdir()
    (tmp_path / "cache").symlink_to(tmp_path / "real")
    node = node_of(tmp_path / "cache", 1 << 20)
    _ = node.owner.token
    release(node)
    assert (tmp_path / "real" / "blocks.data").is_file()


def test_a_link_planted_as_a_slot_of_gets_in_flight_is_never_opened(tmp_path: Path) -> None:
    """``inflight/slot-0000`` a dangling link: the slot's open (``O_CREAT``) made the file it
    named, wherever that was. Now the folder's check refuses it, and so does the open."""
    from lading.remote.settings import RemoteSettings
    from lading.remote.slots import NodeSlots

    cache = tmp_path / "node"
    (cache / "inflight").mkdir(parents=True)
    (cache / "inflight" / "slot-0000").symlink_to(tmp_path / "made-by-lading")
    with pytest.raises(CacheFolderError) as refused:
        RemoteSettings.of(cache, "1M").fetcher("s3://bucket/store")
    _refused_naming(refused, cache / "inflight" / "slot-0000")
    with pytest.raises(CacheFolderError) as refused:
        NodeSlots(cache / "inflight", 1)._open()
    _refused_naming(refused, cache / "inflight" / "slot-0000")
    assert not (tmp_path / "made-by-lading").exists()


def _store(s3: LocalS3, bucket: str, tmp_path: Path, count: int = 300) -> str:
    """A small store in ``bucket``; its URL."""
    source = write(
        tmp_path / "docs.tsv", "".join(f"d{i}\ttext of document {i}\n" for i in range(count))
    )
    url = f"s3://{bucket}/docs"
    lading.build_store(source, url, cache=str(tmp_path / "up"), progress=False)
    return url


def _outside_stores(folder: Path) -> dict[str, str]:
    """A folder of a user's results, one of them holding a file named as a staged copy's mark
    (any file of that name: the index budget's sweep removed the folder holding it)."""
    results = folder / "myproject" / "results"
    results.mkdir(parents=True)
    (results / STAGE_MARK).write_text("{}")
    (results / "weeks_of_work.txt").write_text("important\n" * 1000)
    return {str(p.relative_to(folder)): p.read_text() for p in results.iterdir()}


def _files(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): p.read_text() for p in folder.rglob("*") if p.is_file()}


def test_a_link_planted_as_stores_is_refused_before_anything_is_staged(
    s3: LocalS3, bucket: str, tmp_path: Path
) -> None:
    """``stores`` a link to a user's folder: the staged index was written there, and the index
    budget's sweep removed its folders holding a ``_lading_stage.json``. Now the open is
    refused before anything is staged, naming the link and the fix."""
    url = _store(s3, bucket, tmp_path)
    files = _outside_stores(tmp_path / "theirs")
    cache = tmp_path / "node"
    cache.mkdir()
    (cache / "stores").symlink_to(tmp_path / "theirs")
    (cache / "filler").write_bytes(b"x" * 2_000_000)  # the folder over its index budget
    with pytest.raises(CacheFolderError) as refused:
        lading.open_store(url, cache=cache, cache_bytes="1M", index_bytes=6_800_000)
    _refused_naming(refused, cache / "stores")
    assert _files(tmp_path / "theirs") == files
    (cache / "stores").unlink()  # a link one level down, as a URL's folder: the same
    (cache / "stores").mkdir()
    (cache / "stores" / "0123456789abcdef").symlink_to(tmp_path / "theirs")
    with pytest.raises(CacheFolderError) as refused:
        lading.open_store(url, cache=cache, cache_bytes="1M", index_bytes=6_800_000)
    _refused_naming(refused, cache / "stores" / "0123456789abcdef")
    assert _files(tmp_path / "theirs") == files


def test_the_index_budget_sweep_never_follows_a_link(tmp_path: Path) -> None:
    """Links planted after a process checked the folder (as ``stores``, as a URL's folder in
    it, as a footer): the sweep removes no file outside the cache folder, and a link's target
    is not counted as the folder's bytes."""
    files = _outside_stores(tmp_path / "theirs")
    big = write(tmp_path / "big.bin", b"x" * 1_000_000)
    for stores in ("stores", "stores2"):
        cache = tmp_path / stores
        cache.mkdir()
        if stores == "stores":
            (cache / "stores").symlink_to(tmp_path / "theirs")
        else:
            (cache / "stores").mkdir()
            (cache / "stores" / "0123456789abcdef").symlink_to(tmp_path / "theirs")
        (cache / "parquet").mkdir()
        (cache / "parquet" / "0123.footer").symlink_to(big)
        assert folder_bytes(cache) == (0, 0)
        keep_within(cache, 0, None)
        assert _files(tmp_path / "theirs") == files and big.stat().st_size == 1_000_000


def test_a_link_planted_as_the_payload_file_is_refused_and_its_file_kept(tmp_path: Path) -> None:
    """``blocks.data`` a link to a user's file: it was cut to the cap and cached blocks were
    written into it. Now the open is refused, and the payload's own open (``O_NOFOLLOW``)
    refuses a link planted after the check."""
    victim = write(tmp_path / "precious.txt", "precious user data\n" * 10)
    cache = tmp_path / "node"
    cache.mkdir()
    (cache / "blocks.data").symlink_to(victim)
    with pytest.raises(CacheFolderError) as refused:
        node_of(cache, 1 << 20)
    _refused_naming(refused, cache / "blocks.data")
    with pytest.raises(CacheFolderError) as refused:
        DataFile(cache / "blocks.data", Layout.of(1 << 20))
    _refused_naming(refused, cache / "blocks.data")
    assert victim.read_text() == "precious user data\n" * 10


def _app_db(path: Path) -> Path:
    """A user's own SQLite database (a table, a row)."""
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("CREATE TABLE bookmarks (url TEXT)")
        conn.execute("INSERT INTO bookmarks VALUES ('https://example.org')")
    return path


def _tables(path: Path) -> list[str]:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        found = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    return sorted(name for (name,) in found)


@pytest.mark.parametrize("name", ["ledger.sqlite", "ledger.sqlite-wal"])
def test_a_link_planted_as_the_ledger_is_refused_and_its_database_kept(
    tmp_path: Path, name: str
) -> None:
    """``ledger.sqlite`` a link to a user's database: the ledger's tables were added to it and
    its rows written there. Now the open is refused (its write-ahead log's name too: SQLite
    follows a link there as well)."""
    victim = _app_db(tmp_path / "app.db")
    cache = tmp_path / "node"
    cache.mkdir()
    (cache / name).symlink_to(victim)
    with pytest.raises(CacheFolderError) as refused:
        node_of(cache, 1 << 20)
    _refused_naming(refused, cache / name)
    assert _tables(victim) == ["bookmarks"]


@pytest.mark.parametrize("size", ["small", "large"])
def test_a_database_that_is_no_ledger_is_refused_not_taken_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size: str
) -> None:
    """A user's own database under the ledger's name (a file, no link): its tables were kept
    and lading's added beside them, since only a ``settings`` table of another format was
    refused. Now a database holding a table lading never makes is refused, naming the file,
    the table and the fix; one of lading's own tables only (an older ledger) is set aside.
    ``large``: a file over ``FULL_CHECK_BYTES``, whose contents are probed table by table:
    the probe of a table it lacks read as damage, and the user's database was set aside (moved,
    the one ``.damaged`` slot replaced at the next damage) rather than refused."""
    from lading.remote.cache import damaged

    if size == "large":
        monkeypatch.setattr(damaged, "FULL_CHECK_BYTES", 0)
    cache = tmp_path / "node"
    cache.mkdir()
    _app_db(cache / "ledger.sqlite")
    with pytest.raises(CacheFolderError) as refused:
        node_of(cache, 1 << 20)
    text = str(refused.value)
    assert str(cache / "ledger.sqlite") in text and "bookmarks" in text, text
    assert "move it out" in text and "\n" not in text, text
    assert _tables(cache / "ledger.sqlite") == ["bookmarks"]
    older = tmp_path / "older"
    older.mkdir()
    with contextlib.closing(sqlite3.connect(older / "ledger.sqlite")) as conn, conn:
        conn.execute("CREATE TABLE blocks (key TEXT PRIMARY KEY, data BLOB)")
    with pytest.warns(DamagedCacheWarning, match="ledger.sqlite.damaged"):
        release(node_of(older, 1 << 20))
    assert _tables(older / "ledger.sqlite.damaged") == ["blocks"]
    assert "settings" in _tables(older / "ledger.sqlite")


CUT = """
import os, sys, time, warnings
import lading
from lading.remote.cache.damaged import DamagedCacheWarning

url, cache, when = sys.argv[1:4]
ids = [f"d{i}" for i in range(0, 300, 3)]
store = lading.open_store(url, cache=cache, cache_bytes="1M")
first = store.get_many(ids)
time.sleep(0.5)  # filled: the next read copies from the payload file
if when == "mapped":
    assert store.get_many(ids) == first  # copied from the payload file: it is mapped now
os.truncate(os.path.join(cache, "blocks.data"), 0)  # a cleanup script of another user
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    again = store.get_many(ids)
    store.get_many(ids)
said = [str(w.message) for w in seen if issubclass(w.category, DamagedCacheWarning)]
print("equal", again == first, "warned", len(said), said[:1], flush=True)
store.close()
"""


@pytest.mark.parametrize("when", ["mapped", "before its first map"])
def test_a_payload_file_cut_under_a_reader_is_refetched_with_a_warning(
    s3: LocalS3, bucket: str, tmp_path: Path, when: str
) -> None:
    """``blocks.data`` truncated while a reader has it mapped: the next read of a cached
    document killed the interpreter with SIGBUS; cut before its first map, the read raised a
    bare ``ValueError: mmap length is greater than file size`` naming no file. Now either is
    the damaged-cache path: one DamagedCacheWarning naming the file, every block fetched
    again, the documents read equal."""
    url = _store(s3, bucket, tmp_path)
    cache = tmp_path / "node"
    done = subprocess.run(
        [sys.executable, "-c", CUT, url, str(cache), when],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert "equal True warned 1" in done.stdout, done.stdout + done.stderr[-3000:]
    assert str(cache / "blocks.data") in done.stdout and "cut" in done.stdout, done.stdout


def test_a_short_write_of_a_block_is_written_on_or_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``pwrite`` may write less than asked (a nearly full disk): the rest was never written
    and the block marked whole, its CRC that of all its bytes, so this process (which trusts
    its own fills) copied the hole: SIGBUS on tmpfs. The rest is now written on; a write that
    makes no progress is ENOSPC, the fill's failed write."""
    data = DataFile(tmp_path / "blocks.data", Layout.of(1 << 20))
    block = bytes(range(256)) * 40
    write = os.pwrite
    monkeypatch.setattr(os, "pwrite", lambda fd, b, at: write(fd, bytes(b)[:1000], at))
    data.write(1, 300, block)
    assert bytes(data.view(1, 300, len(block))) == block
    monkeypatch.setattr(os, "pwrite", lambda fd, b, at: 0)
    with pytest.raises(OSError) as full:
        data.write(2, 0, block)
    assert full.value.errno == errno.ENOSPC and str(tmp_path / "blocks.data") in str(full.value)
    data.close()


def test_a_payload_file_too_short_to_map_is_named(tmp_path: Path) -> None:
    """Cut between a round's check and its first map: one error naming the file (was
    ``ValueError: mmap length is greater than file size``), which the read takes as the cut
    it is (its blocks forgotten, fetched again)."""
    path = tmp_path / "blocks.data"
    data = DataFile(path, Layout.of(1 << 20))
    os.truncate(path, 100)
    assert data.cut() == 100
    with pytest.raises(PayloadCutError, match=str(path)):
        data.view(0, 0, 10)
    data.restore()
    assert data.cut() is None and bytes(data.view(0, 0, 10)) == bytes(10)
    data.close()


def _swap_offsets(staged: Path, row: int, other: int) -> None:
    """Make row ``row`` of the staged ``text.off`` span row ``other``'s bytes (same size)."""
    off = next(staged.glob("snap-*/shard-*/text.off"))
    values = np.memmap(off, dtype="<u8", mode="r+")
    values[row], values[row + 1] = values[other], values[other + 1]
    values.flush()
    del values


@pytest.mark.parametrize("row", [5, 1000])
def test_a_staged_index_changed_in_place_is_found(
    s3: LocalS3, bucket: str, tmp_path: Path, row: int
) -> None:
    """The node's staged ``text.off`` changed in place (same size: another user of the group
    folder, or a disk): reused after a size check only, it served document 150's text under
    ``d5``, and ``verify()`` said the store was intact (it skipped the staged files). Now a
    change within a file's first or last 4 KiB is caught at the next open (their CRC32, as a
    local store's open checks) and the copy staged again; one in its middle is ``verify()``'s
    to find, naming the file (its every byte read against its CRC32), where the open's
    one-pass order check (offsets that go down) has not refused it first."""
    url = _store(s3, bucket, tmp_path, count=2000)  # text.off: 16 KB, its middle unchecked
    cache = tmp_path / "node"
    store = lading.open_store(url, cache=cache, cache_bytes="1M")
    staged, want = store.path, store.get_many([f"d{row}"])
    store.close()
    off = next(staged.glob("snap-*/shard-*/text.off"))
    kept = off.read_bytes()
    _swap_offsets(staged, row, 150)
    if row >= 500:  # in the middle: offsets that go down, refused at the open
        with pytest.raises(StoreFormatError, match="out of order") as e:
            lading.open_store(url, cache=cache, cache_bytes="1M").get_many([f"d{row}"])
        assert str(off) in str(e.value) and f"delete {staged} to stage it again" in str(e.value)
        values = np.frombuffer(kept, dtype="<u8").copy()
        values[row] += 1  # still in order, one byte off: verify()'s to find
        off.write_bytes(values.tobytes())
    store = lading.open_store(url, cache=cache, cache_bytes="1M")
    problems = store.verify()
    if row < 500:  # in the first 4 KiB: caught at the open, staged again
        assert store.get_many([f"d{row}"]) == want and problems == []
    else:
        assert len(problems) == 1 and "text.off" in problems[0] and "CRC32" in problems[0]
        assert str(staged) in problems[0] and "\n" not in problems[0]
    store.close()


def test_verify_reads_the_buckets_index_objects_not_only_the_staged_copy(
    s3: LocalS3, bucket: str, tmp_path: Path
) -> None:
    """An index object damaged in the bucket after this node staged it (``ids.off``, one bit):
    ``verify()`` read the node's intact copy only and said the store was intact, where a node
    staging afresh refuses it; it now reads every object of the store from the bucket, naming
    the damaged one."""
    boto3 = pytest.importorskip("boto3")
    url = _store(s3, bucket, tmp_path)
    cache = tmp_path / "node"
    store = lading.open_store(url, cache=cache, cache_bytes="1M")
    assert store.verify() == []
    store.close()
    client = boto3.client("s3", endpoint_url=s3.endpoint)
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=bucket)["Contents"]]
    key = next(k for k in keys if k.endswith("/ids.off"))
    data = bytearray(client.get_object(Bucket=bucket, Key=key)["Body"].read())
    data[len(data) // 2] ^= 1
    client.put_object(Bucket=bucket, Key=key, Body=bytes(data))
    store = lading.open_store(url, cache=cache, cache_bytes="1M")  # the staged copy reused
    problems = store.verify()
    store.close()
    assert len(problems) == 1 and "ids.off" in problems[0] and "CRC32" in problems[0], problems


@pytest.mark.slow  # ~3-6 s over the local S3 (the default tier's 10 minutes)
def test_a_late_fill_after_a_cut_never_lands_on_another_block(
    s3: LocalS3, bucket: str, tmp_path: Path
) -> None:
    """A GET in flight when ``blocks.data`` is cut: the repair forgot every block, its claim
    too, and another document was placed where the claim had been; when the slow GET landed,
    the fill thread wrote its bytes there, and this process (which trusts what it filled)
    read the other document as ``AAAA...``. A fill whose claim is gone writes nothing."""
    import threading
    import warnings

    texts = {f"d{i}": ("A" if i == 10 else "b") * 600 + f" doc{i}" for i in range(200)}
    source = write(tmp_path / "docs.tsv", "".join(f"{k}\t{v}\n" for k, v in texts.items()))
    url = f"s3://{bucket}/late"
    lading.build_store(source, url, cache=str(tmp_path / "up"), progress=False)
    cache = tmp_path / "node"
    store = lading.open_store(url, cache=str(cache), cache_bytes=64 << 10)
    s3.fault("text.bin", 1, "slow", delay=2.0)
    late: dict[str, str] = {}
    reader = threading.Thread(target=lambda: late.update(a=store.get_many(["d10"])[0]))
    reader.start()
    deadline = time.monotonic() + 10
    while not store._columns.cache.node.inflight and time.monotonic() < deadline:
        time.sleep(0.01)  # the slow GET's claim is taken
    os.truncate(cache / "blocks.data", 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DamagedCacheWarning)
        assert store.get_many(["d150"]) == [texts["d150"]]
    reader.join(30)
    assert late == {"a": texts["d10"]}
    store._columns.cache.drain()
    assert store.get_many(["d150", "d10"]) == [texts["d150"], texts["d10"]]
    store.close()


def test_a_forked_child_reads_without_its_parents_plan(bucket: str, tmp_path: Path) -> None:
    """A DataLoader worker under fork is a copy of the store its parent planned: it fetched
    the parent's window again from that copy at every read (the next 8 batches' ranges claimed
    in one write transaction a batch, 6-110 ms of a worker's CPU in benchmarks/remote_step.py,
    beside the parent's own window). The plan is the process's that made it: a forked child
    fetches only what it reads (in the order the ledger recorded for it)."""
    source = write(tmp_path / "docs.tsv", "".join(f"d{i}\tdocument {i}\n" for i in range(300)))
    url = f"s3://{bucket}/planned"
    lading.build_store(source, url, cache=str(tmp_path / "up"), progress=False)
    store = lading.open_store(url, cache=tmp_path / "node", cache_bytes="1M")
    batches = [[f"d{i}" for i in range(b * 10, b * 10 + 10)] for b in range(20)]
    try:
        store.plan(batches)  # the order only: nothing fetched yet
        pid = os.fork()
        if pid == 0:
            code = 9
            try:
                texts = store.get_many(batches[0], step=0)
                store._columns.cache.drain(30)  # (any GET it started, answered)
                stats = store.cache_stats()
                right = texts == [f"document {i}" for i in range(10)]
                code = 0 if right and stats["bytes_fetched"] <= stats["bytes_used"] else 3
            finally:
                os._exit(code)
        assert wait_child(pid) == 0  # 3: the child fetched ahead
    finally:
        store.close()


def _read_once(bucket: str, tmp_path: Path) -> RemoteStore:
    """A store of 300 documents in ``bucket``, opened over a node cache, two of them read."""
    source = write(tmp_path / "docs.tsv", "".join(f"d{i}\tdocument {i}\n" for i in range(300)))
    url = f"s3://{bucket}/docs"
    lading.build_store(source, url, cache=str(tmp_path / "up"), progress=False)
    store = lading.open_store(url, cache=tmp_path / "node", cache_bytes="1M")
    assert list(store.get_many(["d1", "d299"])) == ["document 1", "document 299"]
    return store


def test_a_forked_child_does_not_tell_the_node_its_parents_gets(
    bucket: str, tmp_path: Path
) -> None:
    """A forked child (a DataLoader worker under fork) starts its figures at zero: its fetcher
    kept the parent's counts while its view's reports began again, so the child told the
    node every GET its parent had sent, and the node's ``gets`` counted them twice."""
    store = _read_once(bucket, tmp_path)
    try:
        mine = store.cache_stats()["gets"]  # (and the node told, forced)
        pid = os.fork()
        if pid == 0:
            code = 0 if store.cache_stats()["gets"] == 0 else 3  # tells the node, forced
            os._exit(code)
        assert wait_child(pid) == 0  # the child's own figures: zero
        assert store.cache_stats()["node"]["gets"] == mine > 0
    finally:
        store.close()


@pytest.mark.slow  # ~3-6 s over the local S3 (the default tier's 10 minutes)
def test_a_forked_child_frees_none_of_its_parents_objects(bucket: str, tmp_path: Path) -> None:
    """At a fork the child drops its parent's client, loop and GETs in flight, and must never
    free them: freed there, obstore's client waited for ever on a lock its runtime's threads
    held at the fork (a fresh-clone CI run hung 80 minutes in this file's fork test, at the
    line dropping it: 1 fork in ~15 on 2 loaded cores). The child keeps the client alive.
    (SQLite's connections are closed there instead: tests/remote/test_plane_ledger_close.py.)"""
    store = _read_once(bucket, tmp_path)
    try:
        client = weakref.ref(store._columns.cache.fetcher.client)  # the one that sent those GETs
        pid = os.fork()
        if pid == 0:
            code = 9
            try:
                gc.collect()
                code = 3 if client() is None else 0
            finally:
                os._exit(code)
        assert wait_child(pid) == 0  # 3: the client freed in the child
    finally:
        store.close()
