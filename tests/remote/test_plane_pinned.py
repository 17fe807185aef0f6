"""Blocks filled from GETs sent without ``If-Match`` are not trusted across a reopen.

A call checks its object's ETag at most once a second (:data:`lading.remote.fetch.PIN_S`):
the calls in between are unpinned, and an object overwritten in place (same name, no new
manifest) is read with its new bytes there. Those bytes are filled into the node cache. Once
a later pinned GET is refused, the process drops them; but a process that stops fetching
the object (it closes, or is killed) never sees a refusal, and a reopen (here, or in another
process) then served them as cache hits, never a GET: one document of the new version beside
one of the old (``EVIL`` text under the old snapshot's ids). Now a block filled unpinned is
served only once a pinned check of its object made after its bytes came passes; a refused
check is the changed-object error."""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import lading
from conftest import write
from lading.errors import RemoteChangedError
from lading.remote import fetch
from lading.remote.cache.damaged import DamagedCacheWarning
from lading.remote.cache.ledger import FORMAT
from lading.remote.cache.node import node_of, release
from lading.remote.clients import open_client
from lading.testing import LocalS3


def _store(bucket: str, tmp_path: Path) -> str:
    source = write(
        tmp_path / "docs.tsv", "".join(f"d{i}\ttext of document {i}\n" for i in range(200))
    )
    url = f"s3://{bucket}/docs"
    lading.build_store(source, url, cache=str(tmp_path / "up"), progress=False)
    return url


def _overwrite(url: str) -> str:
    """Overwrite the store's text object in place (same size, other bytes); its name."""
    client = open_client(url)
    name = next(n for n in client.list() if n.endswith("text.bin"))
    client.put(name, client.get(name).replace(b"text of document", b"EVIL of document"))
    return name


def _read(store: Any, ids: list[str]) -> list[str] | str:
    try:
        return list(store.get_many(ids))
    except RemoteChangedError as e:
        return f"changed: {e}"


def _refused(got: list[str] | str, name: str) -> None:
    """``got`` is the changed-object error naming ``name``: never the new version's bytes,
    never the two versions side by side."""
    assert isinstance(got, str) and got.startswith("changed: "), got
    assert name in got and "overwritten" in got, got


def test_an_unpinned_fill_is_not_served_by_a_reopen(
    s3: LocalS3, bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read ``d1`` (a pinned GET), overwrite the object, read ``d150`` within the unpinned
    window (its new bytes, filled), close: no pinned GET of the object was refused. The
    reopen (its index staged: no spot check) found both blocks cached and served
    ``['text of document 1', 'EVIL of document 150']``. Now it checks the object first and
    raises the changed-object error."""
    monkeypatch.setattr(fetch, "PIN_S", 30.0)  # the window, made certain on a slow machine
    url = _store(bucket, tmp_path)
    cache = tmp_path / "node"
    store = lading.open_store(url, cache=cache, cache_bytes="1M")
    assert _read(store, ["d1"]) == ["text of document 1"]  # the first call: pinned
    name = _overwrite(url)
    assert _read(store, ["d150"]) == ["EVIL of document 150"]  # unpinned: the new bytes
    store.close()  # nothing refused: the process never learned of the overwrite
    again = lading.open_store(url, cache=cache, cache_bytes="1M")
    try:
        _refused(_read(again, ["d1", "d150"]), name)
        _refused(_read(again, ["d150"]), name)  # and dropped: fetched again, refused again
    finally:
        again.close()


KILLED = """
import os, signal, sys
import lading
from lading.remote import fetch
from lading.remote.clients import open_client
fetch.PIN_S = 30.0
url, cache = sys.argv[1], sys.argv[2]
store = lading.open_store(url, cache=cache, cache_bytes="1M")
assert list(store.get_many(["d1"])) == ["text of document 1"]
client = open_client(url)
name = next(n for n in client.list() if n.endswith("text.bin"))
client.put(name, client.get(name).replace(b"text of document", b"EVIL of document"))
print(list(store.get_many(["d150"])), flush=True)
store._columns.cache.drain()
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_an_unpinned_fill_of_a_killed_process_is_not_served(
    s3: LocalS3, bucket: str, tmp_path: Path
) -> None:
    """The same in two processes, the first killed (``kill -9``) once its unpinned block is
    filled: the second process's read is the changed-object error, not the mix."""
    url = _store(bucket, tmp_path)
    cache = tmp_path / "node"
    done = subprocess.run(
        [sys.executable, "-c", KILLED, url, str(cache)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == -9, done.stdout + done.stderr[-3000:]
    assert "EVIL of document 150" in done.stdout, done.stdout + done.stderr[-3000:]
    name = next(n for n in open_client(url).list() if n.endswith("text.bin"))
    store = lading.open_store(url, cache=cache, cache_bytes="1M")
    try:
        _refused(_read(store, ["d1", "d150"]), name)
    finally:
        store.close()


def test_a_block_filled_unpinned_is_served_once_a_check_passes(
    s3: LocalS3, bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing replaced: the reopen's read of blocks filled unpinned costs one pinned check
    of their object (a one-byte GET), then they are hits; a third open finds them vouched
    for in the ledger and sends no GET at all."""
    monkeypatch.setattr(fetch, "PIN_S", 30.0)
    url = _store(bucket, tmp_path)
    cache = tmp_path / "node"
    store = lading.open_store(url, cache=cache, cache_bytes="1M")
    ids = ["d1", "d150", "d199"]
    want = [f"text of document {i}" for i in (1, 150, 199)]
    for one in ids:  # the first call pinned, the others not
        assert _read(store, [one]) == [want[ids.index(one)]]
    store.close()
    again = lading.open_store(url, cache=cache, cache_bytes="1M")
    gets = again.cache_stats()["gets"]
    assert _read(again, ids) == want
    assert again.cache_stats()["gets"] - gets == 1  # one check of the object, no refetch
    assert _read(again, ids) == want
    assert again.cache_stats()["gets"] - gets == 1
    again.close()
    third = lading.open_store(url, cache=cache, cache_bytes="1M")
    gets = third.cache_stats()["gets"]
    assert _read(third, ids) == want
    assert third.cache_stats()["gets"] == gets
    third.close()


@pytest.mark.parametrize("older", [4, 5])
def test_a_ledger_of_an_older_format_is_set_aside(
    s3: LocalS3, bucket: str, tmp_path: Path, older: int
) -> None:
    """A format-4 ledger (made before fills were marked unpinned) may hold new-version bytes
    no row marks, a format-5 one keys its blocks otherwise: either is set aside with a warning
    naming it, and the cache starts empty."""
    url = _store(bucket, tmp_path)
    cache = tmp_path / "node"
    store = lading.open_store(url, cache=cache, cache_bytes="1M")
    assert _read(store, ["d1", "d150"]) == ["text of document 1", "text of document 150"]
    store.close()
    with contextlib.closing(sqlite3.connect(cache / "ledger.sqlite")) as conn, conn:
        conn.execute("UPDATE settings SET value = ? WHERE name = 'format'", (older,))
    with pytest.warns(
        DamagedCacheWarning, match=rf"written by another lading .*format \({older}, not {FORMAT}\)"
    ):
        again = lading.open_store(url, cache=cache, cache_bytes="1M")
    try:
        assert again.cache_stats()["blocks"] == 0
        assert _read(again, ["d1", "d150"]) == ["text of document 1", "text of document 150"]
    finally:
        again.close()
    assert (cache / "ledger.sqlite.damaged").exists()


def test_a_passed_check_confirms_only_the_blocks_that_came_before_it(tmp_path: Path) -> None:
    """The fill of a pinned GET's block (sent at 15) confirms the object's blocks whose bytes
    came unpinned before then (10), not those that came after (20: the object may have been
    overwritten between), nor another object's."""
    node = node_of(tmp_path / "c", 10_000, region_bytes=1000)
    owner, ledger = node.owner.token, node.ledger
    with ledger.write() as conn:  # object o's blocks in region o - 1 (a place holds one)
        ledger.insert(
            conn, [(o, s, s + 100, o - 1, s, owner, None) for o in (1, 2) for s in (0, 100)]
        )
        ledger.insert(conn, [(1, 200, 300, 0, 200, owner, None)])
    ledger.fill(
        [(o, s, o - 1, s, b"x" * 100, t) for o in (1, 2) for s, t in ((0, 10.0), (100, 20.0))],
        owner,
        node.data.write,
    )
    ledger.fill([(1, 200, 0, 200, b"y" * 100, None)], owner, node.data.write, [(1, 15.0)])
    with ledger.read() as conn:
        found = ledger.overlapping(conn, [(1, 0, 300), (2, 0, 200)])
    assert [(p.start, p.unpinned) for p in found[0]] == [(0, None), (100, 20.0), (200, None)]
    assert [(p.start, p.unpinned) for p in found[1]] == [(0, 10.0), (100, 20.0)]
    release(node)
