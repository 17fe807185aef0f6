"""One node cache folder as this process uses it: one of each a process and folder.

:func:`node_of` gives the :class:`Node` of a folder: its ledger (:mod:`.ledger`), its payload
file (:mod:`.regions`), this process's owner token (:mod:`.owners`), its fill thread
(:mod:`.fill`), its GETs in flight and its figures. Every store, corpus and parquet dataset of
the process reading through that folder shares it (a process has one fill thread a folder,
not one a store).

The folder: ``ledger.sqlite`` (+ ``-wal``, ``-shm``), ``blocks.data`` (the payload, exactly the
cap), ``owners/`` (a token file a live process), ``inflight/`` (the node's slots for GETs in
flight), ``stores/`` and ``parquet/`` (staged indexes and footers, :mod:`lading.remote.stage`).
A folder shared by several users of one group works when it is group-writable (``chmod 2775``:
files made in it are then group-writable too); one that belongs to another user and is not
writable is refused, naming its owner and the fix.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import warnings
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lading.errors import OutOfSpaceError
from lading.remote.cache import damaged
from lading.remote.cache.fill import Done, Filler
from lading.remote.cache.folder import (
    DATA_FILE,
    LEDGER_FILE,
    CacheFolderError,
    check,
    refuse_read_only,
    shared,
)
from lading.remote.cache.ledger import (
    FORMAT,
    TABLES,
    Ledger,
    closed,
    connect,
    folder_reset,
    same_file,
    unconnected,
)
from lading.remote.cache.owners import Owner
from lading.remote.cache.regions import DataFile, Layout
from lading.remote.fetch import Future
from lading.threads import SQLITE, carry, register

VERIFIED = 1 << 18  # blocks a process remembers as intact (~15 MB; past it, checked anew)
COUNT_S = 1.0  # this process's figures reach the node's at most this often (and at close)


@dataclass
class Flight:
    """A block this process is fetching: its end and the GET's future."""

    end: int
    future: Future


class Node:
    """Cache folder ``directory`` in this process (see the module doc; :func:`node_of`)."""

    def __init__(self, directory: Path, layout: Layout, strict: bool) -> None:
        self.directory = directory
        mode = _folder(directory)
        self.ledger = _open_ledger(directory, layout, strict, mode)
        self.layout = self.ledger.layout
        try:
            self.data = DataFile(directory / DATA_FILE, self.layout, mode)
            if self.data.made:  # removed or cut under its ledger: its blocks are gone (were: zeros)
                self.ledger.forget_blocks()
            self.owner = Owner(directory, mode)
            self.filler = Filler(self._mark, self.ledger.trim)
            self.views = 0  # open views (NodeCache); the last to close closes the node
            self._fresh()  # (not forked(): the ledger's first connection is this process's own)
            _ = self.owner.token  # seen by every process from now (a newcomer keeps these)
        except BaseException:  # what was opened closes: no descriptor outlives a failed open
            for part in (getattr(self, "owner", None), getattr(self, "data", None)):
                if part is not None:
                    with contextlib.suppress(Exception):
                        part.close()
            self.ledger.close()
            raise
        if not self.owner.others_alive():  # the folder was idle: its figures are of the gone
            with contextlib.suppress(sqlite3.Error):
                self.ledger.restart_counters()
        register(self, "fill")

    def check_current(self) -> None:
        """Raise :class:`~.ledger.CacheFolderResetError` when the folder's ledger or payload
        file is not the one this process opened (asked before each claim: a claim in another
        folder's ledger would place bytes this process writes to a file no one else reads);
        a payload file cut short is repaired first (:meth:`check_payload`: a claim may copy
        blocks out of it, carrying them forward)."""
        if not (
            same_file(self.ledger.path, self.ledger.inode or -1)
            and same_file(self.data.path, self.data.inode)
        ):
            raise folder_reset(self.directory)
        self.check_payload()

    def check_payload(self) -> None:
        """Before bytes are copied out of the payload file's map (once a read round): a file
        cut short under the cache is the damaged-cache path, not a SIGBUS at the copy (a
        review's truncate killed the reading interpreter). Every block is forgotten (their
        regions' generations raised, so a copy of an earlier lookup is read again), the file
        is made its size again and a :class:`~.damaged.DamagedCacheWarning` names it; the
        blocks are fetched again. (A cut between this check and the copy still raises
        SIGBUS: a window of microseconds, not a read's whole life.)"""
        size = self.data.cut()
        if size is None:
            return
        self.ledger.forget_blocks()
        self.data.restore()
        self.verified.clear()
        warnings.warn(
            f"{self.data.path}: the node cache's payload file was cut short under this "
            f"process ({size:,} of its {self.layout.size:,} bytes: something truncated it; "
            "leave the cache folder's files to lading); every cached block was dropped and is "
            "fetched again",
            damaged.DamagedCacheWarning,
            stacklevel=2,
        )

    def forked(self) -> None:
        """Per-process state, new in a forked child (the parent's GETs are not its own:
        carried, never freed here; its ledger connections are closed, :meth:`Ledger.forked`)."""
        carry(self.inflight)
        self._fresh()
        self.ledger.forked()
        self.owner.forked()
        self.filler.forked()

    def _fresh(self) -> None:
        """This process's own state, made empty (at the start, and in a forked child)."""
        self.lock = threading.Lock()  # guards what follows; never held across I/O or a wait
        self.inflight: dict[tuple[int, int], Flight] = {}
        self._ended: dict[tuple[int, int], int] = {}  # filled before in flight: its end
        self.figures: Counter[str] = Counter()  # this process's, since it started
        self._counted: Counter[str] = Counter()  # of which the node has been told
        self._last_count = 0.0
        # blocks this process checked or filled: hashes of (region, generation, object, start)
        self.verified: set[int] = set()

    def started(self, blocks: Iterable[tuple[int, int, int, Future]]) -> None:
        """Claimed blocks' GETs started, ``(object, start, end, future)``: in flight until
        the fill thread wrote them (one lock for them all)."""
        with self.lock:
            for obj, start, end, future in blocks:
                if self._ended.pop((obj, start), None) != end:  # (its fill may be done)
                    self.inflight[obj, start] = Flight(end, future)

    def _mark(
        self,
        done: list[Done],
        failed: list[tuple[int, int, int]],
        checks: Sequence[tuple[int, float]] = (),
    ) -> None:
        """The fill thread's: blocks fetched ``(object, start, region, at, bytes, unpinned)``
        written where this process's claims still are and made ready, with the ``checks``
        ``(object, sent)`` that passed (:meth:`.Ledger.fill`), the claims of failed GETs
        ``(object, start, end)`` given back; then none of them in flight
        here (a flight at the same start that ends elsewhere is a newer claim's: it stays). A
        block filled is known intact to this process: its CRC32 was computed over the bytes
        just written (checking it again at the first read was a second pass over every cold
        byte)."""
        owner, errors = self.owner.token, []

        def write(region: int, at: int, data: bytes) -> None:
            try:
                self.data.write(region, at, data)
            except OSError as e:  # a full disk, say: the bytes were read, not kept
                errors.append(e)
                raise

        ends = {(obj, start): end for obj, start, end in failed}
        ends.update({(obj, start): start + len(data) for obj, start, _, _, data, _ in done})
        gone = [(obj, start) for obj, start, _ in failed]
        if done or checks:
            filled, unwritten, gens = self.ledger.fill(done, owner, write, checks)
            if errors:
                self.filler.warn(errors[0])
            gone += unwritten
            self.intact(
                (region, gens[region], obj, start)
                for obj, start, _, region in filled
                if region in gens
            )
        self.ledger.release(gone, owner)
        with self.lock:
            for key, end in ends.items():
                flight = self.inflight.get(key)
                if flight is None:
                    self._ended[key] = end  # done before started() heard of it
                elif flight.end == end:
                    del self.inflight[key]
        self.count()

    def intact(self, blocks: Iterable[tuple[int, int, int, int]]) -> None:
        """Blocks ``(region, generation, object, start)`` this process knows match their
        CRC32 (checked, or filled by it); at :data:`VERIFIED` of them, forgotten and checked
        anew."""
        verified = self.verified
        for block in blocks:
            if len(verified) >= VERIFIED:
                verified.clear()
            verified.add(hash(block))  # (an int: a set of ~60 B each)

    def count(self, force: bool = False) -> None:
        """Tell the node what this process counted since it last did (at most once a second
        unless ``force``)."""
        import time

        now = time.monotonic()
        if not force and now - self._last_count < COUNT_S:
            return
        with self.lock:
            deltas = {
                k: float(v - self._counted[k])
                for k, v in self.figures.items()
                if v != self._counted[k]
            }
            self._counted = Counter(self.figures)
            self._last_count = now
        # figures are a report, never a failure (a full disk: OutOfSpaceError, not sqlite's)
        with contextlib.suppress(sqlite3.Error, OutOfSpaceError):
            self.ledger.count(deltas)

    def close(self) -> None:
        """End the fill thread, give back the claims still being fetched, count, give the
        owner token up, close the ledger's connections (the last view closing, see
        :func:`release`; every process at exit, see :mod:`lading.threads`)."""
        self.filler.close()
        with self.lock:
            pending, self.inflight = list(self.inflight), {}
        with contextlib.suppress(Exception):
            if pending:
                self.ledger.release(pending, self.owner.token)
            self.count(force=True)
        self.owner.close()
        self.data.close()
        with contextlib.suppress(sqlite3.Error):
            self.ledger.close()


class _Nodes:
    """This process's nodes by folder. Its lock guards the dict only: a node is made outside it
    (its folder, ledger and payload file are disk and SQLite I/O), and a forked child gets a
    new one (a fork while another thread held it left the child's first open waiting for ever:
    19 of 20 children, when the lock was held across the making)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_folder: dict[Path, Node] = {}

    def forked(self) -> None:
        self.lock = threading.Lock()

    def close(self) -> None:
        """Nothing of its own to end: the nodes close as fill-stage owners themselves."""


_NODES = _Nodes()
register(_NODES, "fill")


def node_of(
    directory: str | os.PathLike[str],
    cap: int,
    strict: bool = True,
    region_bytes: int | None = None,
) -> Node:
    """This process's :class:`Node` of cache folder ``directory`` (made on first use), its
    payload cut for ``cap`` bytes (``strict``: the cap was asked for, and a folder made with
    another is refused; else the folder's is taken).

    Raises:
        CacheSettingsError: the folder was made with another cap (``strict``).
        CacheFolderError: the folder belongs to another user and is not writable, or holds
            a link where lading makes an entry of its own (:mod:`.folder`).
    """
    if cap < 0:
        raise ValueError(f"cache_bytes={cap}: need >= 0 (0 caches nothing)")
    path = Path(directory).absolute()
    layout = Layout.of(cap, region_bytes)
    with _NODES.lock:
        found = _NODES.by_folder.get(path)
    made = Node(path, layout, strict) if found is None else None  # outside the lock: I/O
    with _NODES.lock:
        found = _NODES.by_folder.setdefault(path, made) if made is not None else found
        refused = strict and found is not None and found.layout != layout
        if found is not None and not refused:
            found.views += 1
    if made is not None and made is not found:  # another thread made it first: theirs
        made.close()
    assert found is not None
    if refused:
        Ledger.refuse(path, found.layout, layout, here=True)
    return found


def release(node: Node) -> None:
    """One view of ``node`` closed; the last one closes it (a later open makes it again,
    checking its ledger afresh)."""
    with _NODES.lock:
        node.views -= 1
        if node.views > 0 or _NODES.by_folder.get(node.directory) is not node:
            return
        del _NODES.by_folder[node.directory]
    node.close()


def _folder(directory: Path) -> int:
    """Make ``directory`` if needed and check it and its entries (:func:`.folder.check`); the
    mode of the files lading makes in it (group-writable where the folder is).

    Raises:
        CacheFolderError: another user's folder that this process may not write, or an entry
            lading owns in it that is a link.
    """
    refuse_read_only(directory)  # (a folder below a read-only mount: named, not made)
    directory.mkdir(parents=True, exist_ok=True)
    check(directory)
    return 0o664 if shared(directory) else 0o644


def _open_ledger(directory: Path, layout: Layout, strict: bool, mode: int) -> Ledger:
    """The folder's ledger, a damaged one or one of another format set aside and made again.

    Raises:
        CacheFolderError: the file is a database that is no ledger (:func:`_probe`).
    """
    path = directory / LEDGER_FILE
    if not path.exists():  # made with the folder's mode: SQLite gives its -wal, -shm the same
        # (a new file: no connection of this process is on it; none opens it meanwhile)
        with SQLITE.shared(), unconnected(path), contextlib.suppress(FileExistsError):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
            os.fchmod(fd, mode)  # the folder's mode, whatever the umask
            os.close(fd)
    try:
        with SQLITE.shared():  # no fork copies this thread inside SQLite
            _probe(path)
        return Ledger(directory, layout, strict)
    except sqlite3.DatabaseError as e:
        with SQLITE.shared():
            damaged.set_aside(path, e, _probe)
        return Ledger(directory, layout, strict)


def _probe(path: Path) -> None:
    """Raise ``sqlite3.DatabaseError`` when ``path`` is no ledger of this format (damaged, or
    another lading's: set aside), :class:`CacheFolderError` when it is a database holding a
    table no ledger has (someone's own, put under the ledger's name: its tables were kept and
    the ledger's added to them; setting it aside would lose it at the next damage, the one
    slot being replaced). The header is read only while this process has no connection on
    the file: reading it outside SQLite then would drop their locks (:mod:`.ledger`); a file
    this process (or the parent it was forked from) opened was checked before its first
    connection."""
    with unconnected(path) as alone:
        if alone:
            damaged.check_header(path)
    conn = connect(path, timeout=120.0)
    try:
        # whose it is first, then whether it is sound: a large file's contents are probed
        # table by table, and the probe of a table a user's database lacks read as damage
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        foreign = sorted(t for t in tables - TABLES if not t.startswith("sqlite_"))
        if foreign:
            raise CacheFolderError(
                f"{path} is an SQLite database with tables lading's node cache ledger never "
                f"has ({', '.join(foreign[:5])}); lading makes this file itself and will not "
                "write into another database: move it out of the cache folder (or give "
                "cache= another folder)"
            )
        if tables and "settings" not in tables:  # an older lading's, or a half-made one
            raise sqlite3.DatabaseError(f"no settings table (tables: {sorted(tables)})")
        if "settings" in tables:
            found: Any = conn.execute("SELECT value FROM settings WHERE name = 'format'").fetchone()
            if found is None or found[0] != FORMAT:
                was = "none" if found is None else found[0]
                raise damaged.OtherFormatError(f"a ledger of another format ({was}, not {FORMAT})")
        damaged.check_contents(conn, path)
    finally:
        closed(path, conn)
