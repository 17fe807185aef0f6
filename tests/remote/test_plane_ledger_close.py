"""A node's ledger connections end with the node: a store opened and closed over and over
leaves no descriptor of the ledger's files open, and a healthy ledger is never taken for a
damaged one. Each open carried its first connection for ever (6 -> 42 descriptors after 1 ->
20 opens), and each new node read the ledger's header with a plain open and close, which
drops every fcntl lock this process holds on the file, the live connections' too: a spawned
DataLoader worker ending later took itself for the last connection and removed the WAL and
shared memory under them, and the next open read "disk I/O error" as damage (the cache set
aside and emptied)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import lading
from conftest import files_open_under, write
from lading.remote.cache.node import Node, node_of, release
from lading.stores.remote.store import RemoteStore

LEDGER_FILES = ("ledger.sqlite", "ledger.sqlite-wal", "ledger.sqlite-shm")


def _docs(count: int) -> dict[str, str]:
    return {f"D{i}": f"document {i} " + "word " * (i % 37) for i in range(count)}


def _source(folder: Path, docs: dict[str, str]) -> Path:
    lines = "".join(json.dumps({"id": k, "text": v}) + "\n" for k, v in docs.items())
    return write(folder / "docs.jsonl", lines)


def _ledger_fds(cache: Path) -> list[str]:
    """This process's descriptors open on ``cache``'s ledger files (by real path)."""
    wanted = {os.path.realpath(cache / name) for name in LEDGER_FILES}
    opened = files_open_under(Path(os.path.realpath(cache)))
    return [target for target in opened if target.removesuffix(" (deleted)") in wanted]


def test_opening_and_closing_a_store_leaves_no_ledger_file_open(
    bucket: str, tmp_path: Path
) -> None:
    """Five opens, reads and closes: after each close no descriptor of ``ledger.sqlite``,
    its WAL or its shared memory is left in this process (were 2 more an open)."""
    docs = _docs(100)
    url = f"s3://{bucket}/docs"
    lading.build_store(_source(tmp_path, docs), url, cache=str(tmp_path / "up"), progress=False)
    cache = tmp_path / "node"
    for n in range(5):
        store = lading.open_store(url, cache=cache, cache_bytes="1M")
        assert isinstance(store, RemoteStore)
        assert store.get_many(["D1", "D2", "D50"]) == [docs["D1"], docs["D2"], docs["D50"]]
        store.close()
        assert _ledger_fds(cache) == [], f"after close {n + 1}"


def _locks_on(path: Path) -> list[str]:
    """The fcntl locks this process holds on ``path`` (``/proc/locks``: pid, then inode)."""
    inode, pid, found = os.stat(path).st_ino, str(os.getpid()), []
    with open("/proc/locks") as f:
        for line in f:
            fields = line.split()
            if "POSIX" in fields:
                at = fields.index("POSIX")
                if fields[at + 3] == pid and fields[at + 4].endswith(f":{inode}"):
                    found.append(line.strip())
    return found


def test_a_node_made_beside_a_live_one_keeps_its_connections_locks(tmp_path: Path) -> None:
    """Two threads that open one folder at once each make a node (the second is closed,
    :func:`node_of`). The second's check of the ledger read its header with a plain open
    and close, which dropped the lock the first's live connection holds on the file (another
    process could then take itself for the node's last and remove the WAL under it)."""
    cache = tmp_path / "node"
    node = node_of(cache, 1 << 20)
    try:
        node.ledger.object_id("an object")  # a connection, open on the ledger
        ledger = cache / "ledger.sqlite"
        held = _locks_on(ledger)
        assert held, "an open WAL connection holds a read lock on the ledger"
        Node(cache.absolute(), node.layout, True).close()  # the racing thread's, given up
        assert _locks_on(ledger) == held
        assert node.ledger.object_id("an object") == 1
    finally:
        release(node)
    assert _ledger_fds(cache) == [] and _locks_on(ledger) == []


_SCENARIO = """
import sys, warnings
import lading
from lading import ir
from lading.remote.cache.damaged import DamagedCacheWarning

class Texts:
    def __init__(self, store):
        self.store = store

    def __call__(self, items):
        return [(list(it["doc_ids"]), self.store.get_many(list(it["doc_ids"]))) for it in items]

def epoch(store, docs, workers):
    ids = sorted(docs)
    queries = {f"q{i}": f"query {i}" for i in range(60)}
    qrels = {f"q{i}": {ids[i * 7 % len(ids)]: 1} for i in range(60)}
    run = {f"q{i}": [ids[(i * 13 + j * 29) % len(ids)] for j in range(20)] for i in range(60)}
    groups = ir.TrainingGroups(store, queries, qrels, negatives=run, group_size=4)
    with lading.loader(
        groups, 8, collate_fn=Texts(store), world=lading.World(0, 1), num_workers=workers,
        multiprocessing_context="spawn" if workers else None,
    ) as loader:
        for batch in loader:
            for names, texts in batch:
                assert texts == [docs[i] for i in names]

if __name__ == "__main__":
    url, cache, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    docs = {f"D{i}": f"document {i} " + "word " * (i % 37) for i in range(count)}
    warnings.simplefilter("ignore", UserWarning)  # (workers over a remote store: warned of)
    warnings.simplefilter("error", DamagedCacheWarning)
    ids = sorted(docs)
    store = lading.open_store(url, cache=cache, cache_bytes="4M")
    assert store.get_many(ids) == [docs[i] for i in ids]
    store.close()
    store = lading.open_store(url, cache=cache, cache_bytes="4M")
    epoch(store, docs, 2)
    store.close()
    store = lading.open_store(url, cache=cache, cache_bytes="4M")  # was: the ledger set aside
    assert store.get_many(ids) == [docs[i] for i in ids]
    gets = store.cache_stats()["gets"]
    store.close()
    print("gets", gets)
"""


@pytest.mark.slow  # three opens and two spawned DataLoader workers, in a process: ~13 s
def test_a_store_read_by_spawned_workers_keeps_its_cache_when_opened_again(
    bucket: str, tmp_path: Path
) -> None:
    """The review's path, in a process of its own: open, read, close; open, an epoch with
    two spawned DataLoader workers, close; open again. No DamagedCacheWarning (an error
    here), and every block is still cached: the last read sends no GET (the ledger was set
    aside as "disk I/O error" and every block fetched again)."""
    pytest.importorskip("torch")
    count = 400
    url = f"s3://{bucket}/docs"
    source = _source(tmp_path, _docs(count))
    lading.build_store(source, url, cache=str(tmp_path / "up"), progress=False)
    script = write(tmp_path / "scenario.py", _SCENARIO)
    done = subprocess.run(
        [sys.executable, str(script), url, str(tmp_path / "node"), str(count)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.split()[-2:] == ["gets", "0"], done.stdout + done.stderr[-2000:]


def test_closing_the_ledger_leaves_a_live_threads_connection_to_it(tmp_path: Path) -> None:
    """``Ledger.close`` closed every thread's connection, a live thread's too: that thread's
    next statement met a closed database, and one closed while its statement ran crashed the
    process (a review: the fill thread waiting on another process's write lock, SIGSEGV). A
    live thread keeps its connection; the caller's is closed."""
    import threading

    node = node_of(tmp_path / "c", 1 << 20)
    ledger = node.ledger
    has_one, closed_now = threading.Event(), threading.Event()
    got: list[object] = []

    def reader() -> None:
        conn = ledger.connection()
        has_one.set()
        closed_now.wait(30)
        try:
            got.append(conn.execute("SELECT COUNT(*) FROM settings").fetchone()[0])
        except Exception as e:  # (the old code: "Cannot operate on a closed database")
            got.append(e)

    thread = threading.Thread(target=reader)
    thread.start()
    assert has_one.wait(30)
    mine = ledger.connection()
    try:
        ledger.close()
        closed_now.set()
        thread.join(30)
        assert len(got) == 1 and isinstance(got[0], int) and got[0] > 0, got
        with pytest.raises(Exception, match="closed"):
            mine.execute("SELECT 1")  # the caller's own: closed
    finally:
        closed_now.set()
        release(node)


CHILD_AFTER_PARENT_CLOSED = """
import os, subprocess, sys, time
from lading.remote.cache.node import node_of, release
folder = sys.argv[1]
node = node_of(folder, 1 << 20)
def put(v):
    with node.ledger.write() as conn:
        conn.execute("INSERT OR REPLACE INTO settings VALUES ('probe', ?)", (v,))
put(1)
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    signal_code = 9
    try:
        os.close(w)
        put(10)  # the child's own connection
        os.read(r, 1)
        put(100)
        signal_code = 0
    finally:
        os._exit(signal_code)
os.close(r)
time.sleep(0.5)
release(node)  # the parent's last view: its connections closed
third = (
    "import sys; from lading.remote.cache.node import node_of, release; "
    f"n = node_of({folder!r}, 1 << 20); release(n)"
)
subprocess.run([sys.executable, "-c", third], check=True, timeout=60)  # opens and closes
os.write(w, b"x")
_, status = os.waitpid(pid, 0)
late = node_of(folder, 1 << 20)
with late.ledger.read() as conn:
    value = conn.execute("SELECT value FROM settings WHERE name = 'probe'").fetchone()[0]
release(late)
print("child", os.waitstatus_to_exitcode(status), "probe", value)
"""


def test_a_forked_childs_writes_outlive_its_parents_close(tmp_path: Path) -> None:
    """A forked child that kept its parent's connections open held no SQLite lock of its own
    (SQLite's lock records are per process: the child's new connection took the parent's for
    its own): after the parent closed its node, a third process's last close removed the WAL
    under the child, and the child's write was lost (a review's repro: 10 read, not 100). The
    child closes its parent's connections at the fork."""
    script = tmp_path / "child.py"
    script.write_text(CHILD_AFTER_PARENT_CLOSED)
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "c")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "child 0 probe 100" in done.stdout, done.stdout + done.stderr


def test_a_node_that_fails_to_open_leaves_no_ledger_file_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node whose owner token cannot be made (a folder it may not write, say) raised with
    the ledger's connection and the payload file left open (a review of a44d674)."""
    from lading.remote.cache import node as node_module

    class Refused:
        def __init__(self, *args: object) -> None:
            raise PermissionError("owners/: permission denied")

    monkeypatch.setattr(node_module, "Owner", Refused)
    with pytest.raises(PermissionError):
        node_of(tmp_path / "c", 1 << 20)
    assert _ledger_fds(tmp_path / "c") == []
