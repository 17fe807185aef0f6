"""The node cache as one snapshot's reader sees it: byte ranges of its objects, at a step.

:class:`NodeCache` is a view of the node's cache (:func:`~.node.node_of`) for the objects of
one snapshot (a store's data files, a corpus's ``tokens.bin``, a bucket's parquet objects),
named apart from every other by ``namespace``. It has two calls, and neither holds a lock of
this process across a GET or a wait (decided in a ledger transaction, waited outside it):

- :meth:`read`: the bytes of ranges, at the step the read belongs to (an argument, else the
  building thread's, :func:`lading.step.current_step`). A range may span several blocks and
  gaps: the blocks are copied from the payload file (their region's generation checked after
  the copy), this process's GETs in flight are waited for, another process's claim is waited
  for until filled (taken over if its owner died, read around after ``wait_limit``), and the
  gaps are claimed and fetched now. A block filled from a GET sent without ``If-Match`` (by
  any process of the node, one since killed too) is served only once a check of
  its object sent after its bytes came has passed (:meth:`.Fetcher.passed`), or one passed
  here under :data:`~lading.remote.fetch.PIN_S` ago (a GET now would be as unpinned); else
  the read checks the object first (one pinned one-byte GET an object, side by side,
  :meth:`.Fetcher.confirm`), confirms its blocks in the ledger, or drops them and raises
  :class:`~lading.errors.RemoteChangedError` where it was replaced. A range that finds no
  room (a cap far too small for the processes sharing it, a block larger than a region) is
  read around the cache, not kept.
- :meth:`fetch_ahead`: the next batches' ranges (what a :class:`~.planner.Planner` sends a
  window ahead): cached ones get their next use, the gaps are claimed and fetched, what finds
  no room comes back for a later call; :meth:`fetch_around`: ranges the cache would not keep
  (:mod:`.around`), fetched for their reader alone, whose :meth:`read` takes them first.

What the reads did is counted per range read (:mod:`.figures`).

Over 400 lines, as one idea: one class, the read of a range through the cache, whose rounds
(look up, copy, wait, claim, fetch, confirm) share its state and its errors; the claims
(:mod:`.claims`), the figures and the GETs held around it (:mod:`.around`) are apart.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
import warnings
import weakref
import zlib
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from lading.errors import OutOfSpaceError, RemoteChangedError, RemotePermanentError
from lading.remote import fetch
from lading.remote.cache.around import AroundGets
from lading.remote.cache.claims import Claimed, Claims, Part, cut_up
from lading.remote.cache.damaged import DamagedCacheWarning
from lading.remote.cache.figures import FIGURES, Figures
from lading.remote.cache.ledger import Ledger, Piece
from lading.remote.cache.node import Flight, Node, release
from lading.remote.cache.places import policy_check
from lading.remote.cache.regions import PayloadCutError, folder_bytes
from lading.remote.cancel import current
from lading.remote.fetch import REFUSED, ClosedError, Fetcher, Future, refuse_if_cancelled
from lading.remote.objects import RemoteReadError, describe
from lading.remote.ranges import DEFAULT_GAP, DEFAULT_WASTE, NO_STEP, Need, coalesce
from lading.step import current_step
from lading.threads import register

Span = tuple[str, int, int]  # object key, start, end
Key = tuple[int, int, int]  # object id, start, end
ROUNDS = 8  # a range evicted or taken over between lookups this often: an error, named
_POLL_S = 0.002  # how often a read looks at a block another process is fetching


class _Stalled:
    """What a wait on another owner's GET answers past the round's deadline."""


_STALLED = _Stalled()  # (a part to read around the cache, with the round's others)


class _Deadline:
    """A round's wait on other owners: ``limit`` seconds from the first look at one (a wait
    on this process's own GETs before it does not count)."""

    def __init__(self, limit: float) -> None:
        self.limit, self.end = limit, float("inf")

    def passed(self) -> bool:
        now = time.monotonic()
        if self.end == float("inf"):
            self.end = now + self.limit
        return now >= self.end


class Forks(Protocol):
    """What holds per-process state over a cache (its planners): dropped in a forked child."""

    def forked(self) -> None: ...


class NodeCache:
    """One snapshot's view of the node cache of ``node`` (see the module doc).

    Args:
        node: the cache folder in this process (:func:`~.node.node_of`).
        fetcher: issues the GETs of these objects.
        namespace: what makes object names unique in the folder (the URL and snapshot).
        etags: object key -> its ETag in this snapshot (GETs are pinned to it).
        versions: object key -> its version, where the namespace does not fix it (a
            parquet dataset's objects: their ETags, else sizes and modification times); its
            blocks are named by it, so views over other sets of the same objects share them.
        policy: eviction policy, ``"next-use"`` or ``"fifo"`` (:mod:`.places`).
        max_gap, max_waste: coalescing limits (:func:`lading.remote.ranges.coalesce`).
    """

    def __init__(
        self,
        node: Node,
        fetcher: Fetcher,
        namespace: str,
        etags: Mapping[str, str | None] | None = None,
        *,
        versions: Mapping[str, str] | None = None,
        policy: str = "next-use",
        max_gap: int = DEFAULT_GAP,
        max_waste: float = DEFAULT_WASTE,
    ) -> None:
        self.node, self.fetcher = node, fetcher
        self._closed = False  # (its own: a view made over a closed fetcher still holds a node)
        self.namespace, self.etags = namespace.rstrip("/"), dict(etags or {})
        self.versions = dict(versions or {})
        self.claims = Claims(node, fetcher, self.etags, policy_check(policy), max_gap, max_waste)
        # waiting longer than this on another process's GET: read the range ourselves
        self.wait_limit = max(5.0, fetcher.timeout / 4)
        self._ids: dict[str, int] = {}
        self._names: dict[int, str] = {}
        self.index_bytes: int | None = None  # the folder's budget besides the payload, if set
        self._warned_damage = False
        self._dropped: set[str] = set()  # objects found replaced, their blocks dropped
        self.planners: weakref.WeakSet[Forks] = weakref.WeakSet()  # what loaders told it
        self.forked()
        register(self, "fetch")

    def forked(self) -> None:
        """This process's figures start at zero, and its planners forget what they were told
        (a forked child's are its own)."""
        self.figures = Figures()
        for planner in list(self.planners):
            planner.forked()

    @property
    def ledger(self) -> Ledger:
        return self.node.ledger

    @property
    def max_block(self) -> int:
        """The largest block the cache keeps (a region's bytes): a larger range is read
        around it."""
        return self.claims.max_block

    @property
    def cap(self) -> int:
        """The payload file's bytes: the node's cap on cached blocks."""
        return self.node.layout.size

    def obj(self, key: str) -> int:
        """The ledger's id of object ``key`` of this snapshot (of its version, where given)."""
        found = self._ids.get(key)
        if found is None:
            version = self.versions.get(key)
            name = f"{self.namespace}/{key}" + ("" if version is None else f"@{version}")
            found = self._ids[key] = self.ledger.object_id(name)
            self._names[found] = key
        return found

    # -- reading -----------------------------------------------------------------------------

    def read(
        self,
        spans: Sequence[Span],
        step: int | None = None,
        planned: bool = False,
        around: AroundGets | None = None,
    ) -> list[bytes]:
        """Bytes of each ``(key, start, end)``, in order; each ``bytes`` the caller's own.
        ``planned``: the reader told its epoch's order (a :class:`~.planner.Planner` has a
        schedule covering ``step``; the document store passes it): a range fetched now, which
        the window did not bring, takes the room of no block needed later this epoch (it is
        read around the cache instead: its own next use is the next epoch's, Belady's rule
        would not keep it), but that of a region in transit (:meth:`.places.Space.place`).
        ``around``: the reader's GETs of ranges fetched around the cache
        (:meth:`fetch_around`), taken first; a range whose GET failed is read as any other.

        Raises:
            RemoteReadError: a GET failed for good (naming the object and range), or a range
                stayed unreadable through repeated evictions.
        """
        if self._closed:  # a cached block too: its node may have let the payload file go
            raise RemoteReadError(REFUSED.format(self.fetcher))
        self._drop_changed()  # (a GET ahead refused since the last read)
        try:
            return self._read(spans, step, planned, around)
        except RemoteChangedError:  # refused now: the blocks go before the error does
            with contextlib.suppress(Exception):  # (the next read tries again)
                self._drop_changed()
            raise
        except OutOfSpaceError as e:  # an object the ledger could not record (its disk full)
            self.node.filler.warn(e)
            return self._unrecorded(spans)

    def _read(
        self, spans: Sequence[Span], step: int | None, planned: bool, around: AroundGets | None
    ) -> list[bytes]:
        """:meth:`read`, its view open."""
        now = current_step() if step is None else step
        began = time.monotonic()  # a joined GET whose last attempt went before: sent again
        where: dict[Key, list[int]] = {}
        for i, (key, start, end) in enumerate(spans):
            where.setdefault((self.obj(key), start, end), []).append(i)
        got: dict[Key, bytes] = {k: b"" for k in where if k[2] <= k[1]}
        fetched: set[Key] = set()
        todo = [k for k in where if k not in got]
        if around is not None and len(around):
            todo = self._take_around(around, todo, now, got, fetched, began)
        for attempt in range(ROUNDS):
            if not todo:
                break
            todo = self._round(todo, got, fetched, now, attempt >= 2, planned, began)
        if todo:
            obj, start, end = todo[0]
            raise RemoteReadError(
                f"{describe(self.fetcher.client.url, self._names[obj], start, end)}: evicted "
                f"or taken over {ROUNDS} times before it could be read; is cache_bytes far too "
                "small for the processes sharing it?"
            )
        self.figures.read(where, got, fetched, now)
        self._tell_node()
        out = [b""] * len(spans)
        for k, places in where.items():
            for i in places:
                out[i] = got[k]
        return out

    def _take_around(
        self,
        around: AroundGets,
        todo: list[Key],
        now: int | None,
        got: dict[Key, bytes],
        fetched: set[Key],
        began: float,
    ) -> list[Key]:
        """The ranges of ``todo`` whose GETs ``around`` holds, waited for into ``got`` (bytes
        from an unpinned call served once their object's check passed, as a cached block's
        are: :meth:`_confirm`); the rest left to read. A held GET that failed after the read
        ``began`` is the read's error: it made every attempt the read's own GET would have
        (reading its range again made a server that stopped answering cost two deadlines
        before the error), and the pass's: the reader's other failed GETs are let go with it
        (each was raised again at a resume after the server came back, one a pass). One whose
        last attempt went before (:func:`_failed_before`) is read again, as any range."""
        held = around.take(todo, now, self.fetcher)
        if not held:
            return todo
        cancel = current()  # a loader's read: its close settles them, none is sent after
        if cancel is not None and not cancel.track(self.fetcher, list(held.values())):
            self.fetcher.abandon(held.values(), cancel.reason())
            raise fetch.CancelledError(cancel.reason())
        unpinned: dict[int, float] = {}
        until = time.monotonic() + self.fetcher.deadline.total  # one deadline for them all
        for k, future in held.items():
            try:
                data = future.result(max(0.0, until - time.monotonic()))
            except ClosedError:
                cancel = current()  # (its loader closed, or the store: the read ends)
                if self.fetcher.closed or (cancel is not None and cancel.cancelled):
                    raise
                continue  # (another's close: this read goes on by the cache)
            except RemoteReadError as e:  # the read's error, once: the other failed GETs held
                if _failed_before(future, e, began):  # (an outage's past: read again)
                    continue
                around.drop_failed()  # are sent again by the next pass (a server back up)
                raise
            except TimeoutError:  # (unanswered past every attempt's deadline: cannot be)
                around.drop_failed()
                obj, start, end = k
                where = describe(self.fetcher.client.url, self._names[obj], start, end)
                raise RemoteReadError(
                    f"{where}: no answer within the remote deadline of "
                    f"{self.fetcher.deadline.total:.1f} s"
                ) from None
            if future.checked is None and self.etags.get(self._names[k[0]]) is not None:
                unpinned[k[0]] = time.time()  # (its bytes came before now: checked after)
            got[k] = data
            fetched.add(k)
            self.figures.add("bytes_bypassed", len(data))
            self.figures.add("bytes_held", len(data))
        self._confirm(unpinned)  # (raises where an object was replaced: the read's error)
        return [k for k in todo if k not in got]

    def _drop_changed(self) -> None:
        """Drop from the ledger the blocks of objects the fetcher found replaced since the
        snapshot opened (:meth:`.Fetcher.changed`): read in the second before the refusal
        (:data:`lading.remote.fetch.PIN_S`), they may hold the new bytes, and kept they were
        served after the error and after a reopen (two versions mixed). One set difference
        a read when nothing changed."""
        found = self.fetcher.changed() - self._dropped
        if found:
            self.ledger.forget_objects([self.obj(key) for key in sorted(found)])
            self._dropped |= found

    def _round(
        self,
        todo: list[Key],
        got: dict[Key, bytes],
        fetched: set[Key],
        now: int | None,
        around: bool,
        planned: bool,
        began: float,
    ) -> list[Key]:
        """One look: copy what is cached, claim and fetch the gaps, wait for the rest; the
        ranges still unread (evicted or taken over meanwhile) come back for another (the
        read ``began`` then: :meth:`_wait`)."""
        self.node.check_payload()  # (a payload file cut short: SIGBUS at the copies below)
        with self.node.lock:  # before the lookup: a block of ours it finds unfilled is here
            flights = dict(self.node.inflight)  # (or claimed since, or carried: looked again)
        with self.ledger.read() as conn:
            found = self.ledger.overlapping(conn, todo)
        plans = {k: cut_up(k, pieces) for k, pieces in zip(todo, found)}
        gaps = [
            Need(self._names[k[0]], p.start, p.end, NO_STEP if now is None else now)
            for k, parts in plans.items()
            for p in parts
            if p.piece is None
        ]
        near = 0 if planned else None  # (a read: near only says an order is known)
        claimed = None
        if gaps:
            try:
                objs = {n.key: self.obj(n.key) for n in gaps}
                claimed = self.claims.claim(gaps, objs, now, False, around, near, once=planned)
            except OutOfSpaceError as e:  # the ledger cannot be written (its disk full)
                self.node.filler.warn(e)  # (once a process, with the fix)
                claimed = self._fetched_around(gaps)
            self.figures.add("bytes_bypassed", claimed.bypassed)
        parts_of: dict[Key, list[bytes | None]] = {}
        regions: dict[int, int] = {}  # region -> the generation the copies saw
        damaged: dict[Key, list[Piece]] = {}
        unpinned: dict[int, float] = {}  # object -> when its latest unconfirmed copy came
        try:
            for k, parts in plans.items():
                parts_of[k] = [self._copy(k, p, regions, damaged, unpinned) for p in parts]
        except PayloadCutError:  # cut since the check, before the file's first map
            self.node.check_payload()
            return todo  # every block was forgotten: looked up (and fetched) again
        self._confirm(unpinned)  # (raises where an object was replaced: the read's error)
        again = self._checked(plans, parts_of, regions) | self._forget(damaged)
        deadline = _Deadline(self.wait_limit)  # one wait a round on others, whatever the parts
        stalled: list[tuple[Key, int, Part]] = []  # waited past it: read around, together
        for k, parts in plans.items():
            if k in again:
                continue
            for n, part in enumerate(parts):
                if parts_of[k][n] is None:
                    data = self._wait(k, part, claimed, fetched, flights, deadline, began)
                    if data is None:
                        again.add(k)
                        break
                    if isinstance(data, _Stalled):
                        stalled.append((k, n, part))
                    else:
                        parts_of[k][n] = data
        stalled = [s for s in stalled if s[0] not in again]
        if stalled:
            for (k, n, _), data in zip(stalled, self._read_around(stalled)):
                parts_of[k][n] = data
                fetched.add(k)  # a GET of its own: no hit
        for k in plans:
            if k not in again:
                got[k] = b"".join(parts_of[k])  # type: ignore[arg-type]  # every part is in
        return [k for k in todo if k not in got]

    def _fetched_around(self, gaps: Sequence[Need]) -> Claimed:
        """The GETs of ``gaps`` started for this read alone, around the cache, coalesced as a
        claim's would be: a claim that the ledger refused (a full disk under the cache
        folder) leaves the read to fetch what it needs, as a fill the ledger refuses does,
        where it ended the run."""
        blocks = coalesce(gaps, self.claims.max_gap, self.claims.max_waste, self.claims.max_block)
        futures = self.fetcher.submit_many(
            [(b.key, b.start, b.end, self.etags.get(b.key)) for b in blocks]
        )
        started: dict[str, list[tuple[int, int, Future]]] = {}
        for b, future in zip(blocks, futures):
            started.setdefault(b.key, []).append((b.start, b.end, future))
        return Claimed(started, [], sum(b.size for b in blocks), list(gaps), [])

    def _unrecorded(self, spans: Sequence[Span]) -> list[bytes]:
        """Every span of a read fetched around the cache, the ledger untouched: one of its
        objects could not be given an id there (a full disk), so no block of it can be."""
        claimed = self._fetched_around([Need(k, a, b, NO_STEP) for k, a, b in spans if b > a])
        self.figures.add("bytes_bypassed", claimed.bypassed)
        out = []
        for key, start, end in spans:
            found = b"" if end <= start else _joined(claimed.started.get(key, []), start, end)
            if found is None:  # (the GETs cover every span: never here)
                raise RemoteReadError(
                    f"{describe(self.fetcher.client.url, key, start, end)}: "
                    "not in the GETs made for it"
                )
            out.append(bytes(found))
        return out

    def _read_around(self, stalled: Sequence[tuple[Key, int, Part]]) -> list[bytes]:
        """The parts another owner's stalled GET (or a closed view's) has held past the
        wait: fetched by this process in one call, around the cache (a second GET beats a
        stalled batch)."""
        data = self.fetcher.read(
            [
                (self._names[k[0]], part.start, part.end, self.etags.get(self._names[k[0]]))
                for k, _, part in stalled
            ]
        )
        self.figures.add("bytes_bypassed", sum(map(len, data)))
        return data

    def _copy(
        self,
        k: Key,
        part: Part,
        regions: dict[int, int],
        damaged: dict[Key, list[Piece]],
        unpinned: dict[int, float],
    ) -> bytes | None:
        """A ready block's bytes of ``part`` copied out of the payload file, else None (and
        the block in ``damaged`` where its bytes do not match its CRC32); a block not yet
        confirmed the snapshot's noted in ``unpinned`` (its object: the latest such)."""
        piece = part.piece
        if piece is None or piece.owner is not None:
            return None
        if piece.unpinned is not None and piece.unpinned > unpinned.get(k[0], -1.0):
            unpinned[k[0]] = piece.unpinned
        regions.setdefault(piece.region, piece.gen)
        if not self._intact(k[0], piece):
            damaged.setdefault(k, []).append(piece)
            return None
        at = piece.at + part.start - piece.start
        return bytes(self.node.data.view(piece.region, at, part.end - part.start))

    def _confirm(self, unpinned: dict[int, float]) -> None:
        """Serve the copies of blocks that came unpinned (``unpinned``: object -> when the
        latest one's bytes came) only once their objects are the snapshot's: a check of the
        object sent after then passed (:meth:`.Fetcher.passed`), or one passed under
        :data:`~lading.remote.fetch.PIN_S` ago (this process's GETs now are as unpinned:
        the module doc of :mod:`lading.remote.fetch`); else one pinned GET an object now,
        side by side, and their blocks confirmed in the ledger. At most one check an object
        a ``PIN_S`` (a passed one counts for the later reads), none when every block is
        confirmed (one dict lookup a copied block).

        Raises:
            RemoteChangedError: an object was replaced or deleted (the read drops its blocks).
        """
        if not unpinned:
            return
        now, checks = time.time(), []
        for obj, came in unpinned.items():
            key = self._names[obj]
            etag, sent = self.etags.get(key), self.fetcher.passed(key)
            if etag is None or (sent is not None and (sent > came or now - sent < fetch.PIN_S)):
                continue
            checks.append((key, etag))
        passed = self.fetcher.confirm(checks)
        # (a ledger that cannot be written, a full disk: they stay unconfirmed, checked again)
        with contextlib.suppress(sqlite3.Error, OutOfSpaceError):
            self.ledger.confirmed([(self.obj(key), sent) for key, sent in passed.items()])

    def _intact(self, obj: int, piece: Piece) -> bool:
        """Whether ``piece``'s bytes match the CRC32 its fill kept: checked at this process's
        first read of the block in its region's generation (a payload file or ledger changed
        under the cache is fetched again, never read as data); then known, as the blocks this
        process filled are from their fill (:meth:`.Node.intact`)."""
        seen = hash((piece.region, piece.gen, obj, piece.start))  # (an int: a set of ~60 B each)
        if piece.crc is None or seen in self.node.verified:
            return True
        view = self.node.data.view(piece.region, piece.at, piece.end - piece.start)
        if zlib.crc32(view) != piece.crc:
            return False  # (or the region was reused since the lookup: see _forget)
        self.node.intact([(piece.region, piece.gen, obj, piece.start)])
        return True

    def _forget(self, damaged: dict[Key, list[Piece]]) -> set[Key]:
        """The ranges of ``damaged`` blocks, to read again: the rows of those still where
        they were read (their region not reused since: a claim of this round may have freed
        it) are dropped, so the next round fetches them, and the damage is said once."""
        if not damaged:
            return set()
        pieces = [(k[0], piece) for k, found in damaged.items() for piece in found]
        dropped = self.ledger.forget_damaged(pieces)
        if dropped and not self._warned_damage:
            self._warned_damage = True
            warnings.warn(
                f"{self.node.directory}: {dropped} cached block(s) of {self.namespace} no "
                "longer match their checksum (the payload file or the ledger was changed "
                "under the cache); they are fetched again",
                DamagedCacheWarning,
                stacklevel=4,
            )
        return set(damaged)

    def _checked(
        self,
        plans: dict[Key, list[Part]],
        parts_of: dict[Key, list[bytes | None]],
        regions: dict[int, int],
    ) -> set[Key]:
        """The ranges with a copy from a region reused since it was looked up (read again)."""
        if not regions:
            return set()
        with self.ledger.read() as conn:
            now = self.ledger.generations(conn, regions)
        stale = {r for r, gen in regions.items() if now.get(r) != gen}
        return {
            k
            for k, parts in plans.items()
            if any(
                p.piece is not None and p.piece.region in stale and parts_of[k][n] is not None
                for n, p in enumerate(parts)
            )
        }

    def _wait(
        self,
        k: Key,
        part: Part,
        claimed: Claimed | None,
        fetched: set[Key],
        flights: dict[tuple[int, int], Flight],
        deadline: _Deadline,
        began: float,
    ) -> bytes | _Stalled | None:
        """The bytes of a part not in the payload file: from a GET of this process (started
        now or before: ``flights``, those in flight before the lookup, whose fill may have
        ended since; a poll of the ledger and a second round for each such block cost ~0.1
        ms of CPU a cold document read along a plan), or once another process filled it;
        None: look again; :data:`_STALLED`: its owner's GET held it past ``deadline`` (the
        round's), to be read around. A GET of this process that failed is the read's error,
        unless its last attempt went before the read ``began`` (:func:`_failed_before`): then
        the range is claimed and fetched again once the fill thread gave it back."""
        key = self._names[k[0]]
        if part.piece is None:  # a gap: claimed (or read around) by this round
            assert claimed is not None
            fetched.add(k)
            return _joined(claimed.started.get(key, []), part.start, part.end)
        piece = part.piece
        flight = flights.get((k[0], piece.start))
        if flight is None or flight.end < part.end:  # claimed since the lookup began
            with self.node.lock:
                flight = self.node.inflight.get((k[0], piece.start))
        if flight is not None and flight.end < part.end:  # an older, shorter block's GET
            flight = None  # (its fill not yet heard of): the claim found is waited for
        if flight is not None:
            try:
                data = flight.future.result()
            except ClosedError:
                cancel = current()  # (a loader's thread: its loader closed, the read ends)
                if self.fetcher.closed or (cancel is not None and cancel.cancelled):
                    raise
                return self._after_lost(k, piece, flight, deadline)
            except RemoteReadError as e:
                if not _failed_before(flight.future, e, began):
                    raise
                return self._after_lost(k, piece, flight, deadline)
            return _cut(data, piece.start, part.start, part.end)
        return self._wait_other(k, piece, deadline)  # (this process's: filled, or carried)

    def _after_lost(
        self, k: Key, piece: Piece, flight: Flight, deadline: _Deadline
    ) -> _Stalled | None:
        """The GET of ``piece`` this read joined is lost to it (another view of the node
        closed its fetcher under it, or it failed before the read began): once the fill
        thread gave its claim back, None (look again: this view claims and fetches it); past
        ``deadline``, :data:`_STALLED` (read around the cache)."""
        cancel = current()
        while True:  # looked at once at least, however late
            refuse_if_cancelled(cancel)  # a closed loader's read ends here, not at the limit
            with self.node.lock:
                if self.node.inflight.get((k[0], piece.start)) is not flight:
                    return None
            if deadline.passed():
                return _STALLED
            time.sleep(_POLL_S)

    def _wait_other(self, k: Key, piece: Piece, deadline: _Deadline) -> _Stalled | None:
        """Wait while a live owner fills ``piece`` (another process, or a thread of this one
        writing a block it carried forward); a dead one's claim is given up; past
        ``deadline`` (``wait_limit`` after the round's first wait on another owner began;
        the ledger looked at once at least), :data:`_STALLED`: the part is read around (a
        second GET beats a stalled batch)."""
        cancel = current()
        waited = time.perf_counter()
        try:
            while True:
                refuse_if_cancelled(cancel)  # a closed loader's read ends here, not at the limit
                with self.ledger.read() as conn:
                    row = conn.execute(
                        "SELECT owner FROM blocks WHERE object = ? AND start = ?",
                        (k[0], piece.start),
                    ).fetchone()
                if row is None or row[0] is None:
                    return None  # filled or gone: look again
                if not self.node.owner.alive(row[0]):
                    self.ledger.release([(k[0], piece.start)], row[0])  # its owner died
                    return None
                if deadline.passed():
                    return _STALLED
                time.sleep(_POLL_S)
        finally:
            self.figures.add("wait_us", int(1e6 * (time.perf_counter() - waited)))

    # -- ahead of the reads ------------------------------------------------------------------

    def fetch_ahead(
        self, needs: Sequence[Need], now: int, near: int | None, once: bool = False
    ) -> Claimed:
        """Start fetching ``needs`` (ranges and the step each is read at; ``now``: the step
        being read): the cached ones get that step as their next use, the gaps are claimed
        and fetched (``near``, ``once``: see :meth:`.Claims.claim`), in one transaction.
        What the claim did comes back: the GETs it started (the caller's, to wait for as it
        closes) and the needs that found no room (``late``)."""
        if not needs:
            return Claimed({}, [], 0, [], [])
        self._drop_changed()  # (a GET ahead refused: none of its blocks is noted as cached)
        objs = {n.key: self.obj(n.key) for n in needs}
        keys = [(objs[n.key], n.start, n.end) for n in needs]

        def note(conn: Any, found: list[list[Piece]]) -> None:
            uses = [
                (now, n.step, k[0], piece.start)
                for n, k, pieces in zip(needs, keys, found)
                for piece in pieces
            ]
            self.ledger.note_uses(conn, uses)

        claimed = self.claims.claim(needs, objs, now, True, near=near, note=note, once=once)
        late = set(claimed.late)
        fetched = [(objs[n.key], n.start, n.end) for n in claimed.missing if n not in late]
        self.figures.ahead(keys, fetched, len(needs) - len(claimed.missing))
        self._tell_node()
        return claimed

    def fetch_around(self, needs: Sequence[Need], around: AroundGets) -> None:
        """Start the GETs of ``needs`` (ranges and the step each is read at), held in
        ``around`` for their reader, claiming nothing (:mod:`.around`): a range the cache
        would not keep until its next read. An empty range (an empty document) is nothing to
        fetch: its read answers ``b""`` as it would (a GET of none is refused by the server);
        a read already held (announced again) is not fetched again."""
        needs = [n for n in needs if n.end > n.start]
        if not needs:
            return
        self._drop_changed()
        keys = [(self.obj(n.key), n.start, n.end) for n in needs]
        new = around.unheld(keys, [n.step for n in needs])  # (announced again: held once)
        if len(new) < len(needs):
            needs, keys = [needs[i] for i in new], [keys[i] for i in new]
            if not needs:
                return
        futures = self.fetcher.submit_many(
            [(n.key, n.start, n.end, self.etags.get(n.key)) for n in needs]
        )
        around.hold(keys, futures, [n.step for n in needs], self.fetcher)
        self.figures.ahead(keys, keys, 0)
        self._tell_node()

    def announced(self, spans: Sequence[Span]) -> None:
        """Count ``spans`` as announced by a window (not unplanned at their reads) where the
        window fetched other ranges for them (whole blocks, :mod:`lading.remote.whole`): no
        GET is made for a range itself, so its read is a hit."""
        if spans:
            self.figures.ahead([(self.obj(k), a, b) for k, a, b in spans], [], 0)

    def _tell_node(self, force: bool = False) -> None:
        """Hand the node this view's figures since it last did, the fetcher's GETs with them
        (at most once a second unless ``force``): told only at a read, the GETs of a process
        that only fetches ahead (a loader's main process while its workers read) never
        reached the node's figures."""
        f = self.fetcher
        news = self.figures.news(
            {"gets": f.gets, "bytes_fetched": f.bytes_fetched, "retried": f.retried}
        )
        with self.node.lock:
            self.node.figures.update(news)
        self.node.count(force)

    # -- figures ---------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """This process's figures for these objects: ``gets``, ``bytes_fetched``, ``retried``
        (this fetcher's), ``hits``, ``misses`` and ``unplanned`` (ranges read), ``bytes_used``,
        ``bytes_bypassed`` (read around the cache), of which ``bytes_held`` (fetched by the
        window ahead for the read, :mod:`.around`; the rest by the read), ``wait_s``; the
        node's ``bytes_cached`` and ``cap``; the folder's ``index_bytes`` (its budget besides
        the payload) and what it holds on disk, ``folder_payload`` (<= ``cap``) and
        ``folder_index``."""
        mine = self.figures.mine()
        f = self.fetcher
        mine.update(gets=f.gets, bytes_fetched=f.bytes_fetched, retried=f.retried)
        node = self.ledger.node()
        mine.update(bytes_cached=node["bytes_cached"], blocks=node["blocks"], cap=self.cap)
        payload, rest = folder_bytes(self.node.directory)
        mine.update(index_bytes=self.index_bytes, folder_payload=payload, folder_index=rest)
        return mine

    def node_stats(self) -> dict[str, Any]:
        """This process's figures (:meth:`stats`) and, under ``"node"``, the node's: every
        process's summed since the folder was last idle (``since``; a process tells the node
        at most once a second and when it closes), its bytes cached and cap."""
        self._tell_node(force=True)
        node = self.ledger.node()
        mine = self.stats()
        # the process's names and kinds: every count there (0 where no process counted it,
        # an int though the ledger sums in REAL), the wait in seconds
        counted = {k: int(node.get(k, 0)) for k in (*FIGURES, "gets", "bytes_fetched", "retried")}
        whole = {
            **counted,
            "wait_s": node.get("wait_us", 0) / 1e6,
            "since": node["since"],
            "bytes_cached": node["bytes_cached"],
            "blocks": node["blocks"],
            "cap": self.cap,
        }
        return {**mine, "process": dict(mine), "node": whole}

    def drain(self, timeout: float = 60.0) -> None:
        """Wait until this process's GETs in flight are filled in (tests, benchmarks)."""
        deadline = time.monotonic() + timeout
        while self.node.inflight and time.monotonic() < deadline:
            time.sleep(0.005)

    def close(self) -> None:
        """Stop this snapshot's GETs (every one in flight settles with an error saying so),
        count, and let the node go if no other view holds it (:func:`~.node.release`)."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):  # (a GET ahead refused since the last read)
            self._drop_changed()
        self.fetcher.close()
        self._tell_node(force=True)
        release(self.node)


def _failed_before(future: Future, error: RemoteReadError, began: float) -> bool:
    """Whether a GET joined by a read that ``began`` then failed for a reason that may be
    gone (an outage, a timeout: not a refusal, a change or a close) in an attempt that began
    before the read did (:attr:`Future.sent`, queued for a slot included): the read sends it
    again, once (a resume right after a server came back raised the outage's error of a GET
    still in its last attempt); the read waited at most that attempt's remainder first. One
    whose last attempt began since spent the read's own time: its error is the read's."""
    transient = not isinstance(error, RemotePermanentError | ClosedError)
    return transient and future.sent < began


def _joined(started: list[tuple[int, int, Future]], start: int, end: int) -> bytes | None:
    """Bytes ``[start, end)`` from the GETs ``started`` (``(start, end, future)``) that cover
    them, one or several back to back (overlapping ranges of one read are coalesced into
    blocks of at most a region, cut where their union passes it); None where they do not
    (another process claimed a part meanwhile: look again)."""
    pieces = sorted((p for p in started if p[0] < end and start < p[1]), key=lambda p: p[0])
    at, out = start, []
    for a, b, future in pieces:
        if a > at:
            return None
        if b > at:
            out.append(_cut(future.result(), a, at, min(b, end)))
            at = min(b, end)
        if at >= end:
            return out[0] if len(out) == 1 else b"".join(out)
    return None


def _cut(data: bytes, base: int, start: int, end: int) -> bytes:
    """Bytes ``[start, end)`` of a block fetched from ``base``."""
    if end - base > len(data):  # the fetcher checks lengths: this is a bug, not a short read
        raise RemoteReadError(f"block from {base} has {len(data)} bytes, not up to {end}")
    return data[start - base : end - base]
