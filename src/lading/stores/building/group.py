"""Building under an initialised process group: who builds, and every rank on one snapshot.

Without ``shard=``: the builder rank(s) build (global rank 0 on a shared filesystem, local rank
0 of each node otherwise) while the others wait; then each rank opens the snapshot its builder
committed, so a rebuild by someone else in between does not split the ranks. With
``shard="auto"``: rank ``r`` of ``w`` builds shard ``r`` of ``w``, rank 0 merges once all are
written, and every rank opens the snapshot rank 0 committed. A failure is raised on every rank
that needed the failed work instead of hanging the others.

The waits are not collectives: a build takes as long as the corpus takes (an MS MARCO-sized
tokenized build, well over the 10 minutes after which NCCL's default timeout would abort a
collective and every rank with it). Each rank posts what it built, or the error it met, in the
process group's key-value store and the others poll it, for ``LADING_BUILD_TIMEOUT_S`` seconds
at most (default 86400, a day), after which a waiting rank raises :class:`TimeoutError`. Only
short collectives remain: one as the ranks arrive (who builds what) and, through the store,
one before they leave (so that no rank's process, rank 0 holding the store for instance,
exits while another still reads it).

A rank that dies silently (SIGKILL, the OOM killer, a segfault: nothing posted) is seen without
waiting out that day, under any launcher (torchrun's agent would end the group; Slurm's srun,
mpirun or a user's own spawn do not): while a rank does its part (builds its copy, writes its
shard, waits for the shards and merges on rank 0) a daemon thread of its own posts a heartbeat
(it adds one to a counter, ``alive/<rank>``, next to its host, pid and what it does) every
sixth of ``LADING_BUILD_HEARTBEAT_S`` seconds (default 60). A rank waiting for that part reads
the counter as it polls and, where it stood still for longer than that bound on the waiting
rank's own monotonic clock (no clocks of two hosts compared), raises :class:`BuilderGoneError`
naming the rank, its host and pid, what it was doing, when it was last heard from, and what to
do. A rank stopped or starved for longer than the bound is taken for dead too; a live rank's
thread needs the interpreter for a moment every few seconds, which a build gets from Python's
forced switching (a C call holding the GIL for a minute would not give it).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import socket
import sys
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from lading.deadline import env_seconds
from lading.errors import BuilderGoneError, SkippedRecordsWarning, StoreFormatError
from lading.stores.building.parallel import (
    derive_build_id,
    merge_store,
    source_files,
    write_one_shard,
)
from lading.stores.building.shardset import current_snapshot
from lading.stores.packed import PackedStore
from lading.world import World, process_group

TIMEOUT_VAR = "LADING_BUILD_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 86400.0  # a day: a waiting rank's bound on a build, see the module doc
LEAVE_WAIT_S = 60.0  # how long a rank waits for the others to have read the outcome
REPORT_S = 120.0  # how often a waiting rank says on stderr what it waits for
_POLL_S = 1.0  # the longest sleep between two looks at the store
HEARTBEAT_VAR = "LADING_BUILD_HEARTBEAT_S"
DEFAULT_HEARTBEAT_S = 60.0  # a building rank silent this long is taken for dead (module doc)
_BEATS_PER_BOUND = 6  # a building rank beats this often within the bound
_LOOKS_PER_BOUND = 4  # a waiting rank reads the heartbeats of its builders this often in it
_JOIN_S = 5.0  # the longest a rank waits for its heartbeat thread to end (a store call hung)
_ALONE = contextvars.ContextVar("lading_build_alone", default=False)


def build_timeout() -> float:
    """Seconds a rank waits for another's build: ``LADING_BUILD_TIMEOUT_S``, else a day.

    Raises:
        ValueError: the variable is not a positive number.
    """
    return env_seconds(TIMEOUT_VAR, DEFAULT_TIMEOUT_S)


def heartbeat_bound() -> float:
    """Seconds a building rank's heartbeat may stand still before a rank waiting for it takes it
    for dead: ``LADING_BUILD_HEARTBEAT_S``, else a minute.

    Raises:
        ValueError: the variable is not a positive number.
    """
    return env_seconds(HEARTBEAT_VAR, DEFAULT_HEARTBEAT_S)


@contextlib.contextmanager
def alone() -> Iterator[None]:
    """Within it, :func:`build_in_group` builds here without the process group: for a build
    one rank makes for itself while the others wait elsewhere (the local copy that rank 0 of a
    build into a bucket uploads, the others at a barrier), where the group's exchange would
    wait for ranks that never join it."""
    token = _ALONE.set(True)
    try:
        yield
    finally:
        _ALONE.reset(token)


def build_in_group(build: Callable[[], str], dest: Path, shared: bool) -> PackedStore:
    """Run ``build`` here (no process group, or within :func:`alone`), or under an initialised
    process group in the builder rank(s) only, the others waiting for it (outside any
    collective, see the module doc); then open, on every rank, the snapshot its builder
    committed (a rebuild by someone else in between does not split the ranks)."""
    dist = None if _ALONE.get() else process_group(min_size=2)
    if dist is None:
        return PackedStore(dest, snapshot=build())
    world = World.detect()
    where, builds = _where(dest), world.is_builder(shared)
    arrived: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(arrived, (where, world.rank, builds, uuid.uuid4().hex))
    talk = _Exchange(dist, arrived[0][3], world.rank, dest, "the store is built anew")
    builders = [rank for _, rank, builder, _ in arrived if builder]
    mine = builders_rank(arrived, where, shared)
    built = {f"built/{rank}": rank for rank in builders}
    with talk.leaving():
        if builds:
            copy = str(dest) if shared else f"its node's copy of {dest}"
            with _Heartbeat(talk, f"building {copy}"):
                try:
                    talk.post(f"built/{world.rank}", {"snapshot": build()})
                except BaseException as e:  # post it, or the other ranks wait for it in vain
                    talk.fail(f"built/{world.rank}", e)
        outcome = talk.wait(list(built), _who(builders, "build"), watch=built)
    if mine is None:  # no rank built this rank's copy: open what is there
        return _open(dest, None, world.rank)
    theirs = outcome[f"built/{mine}"]
    if "error" in theirs:
        raise StoreFormatError(
            f"rank {world.rank}: the store at {dest} was not built: rank {mine}, which builds "
            f"it, failed: {theirs['error']}"
        )
    return _open(dest, str(theirs["snapshot"]), world.rank)


def _open(dest: Path, snapshot: str | None, rank: int) -> PackedStore:
    try:
        return PackedStore(dest, snapshot=snapshot)
    except StoreFormatError as e:
        raise StoreFormatError(
            f"rank {rank}: the store at {dest} was not built ({e}); the building rank "
            "failed, see its error"
        ) from None


def _where(dest: Path) -> str:
    """Which copy of ``dest`` a rank reads: its host and the path there (two simulated nodes
    on one host build two copies under two paths)."""
    return f"{socket.gethostname()}:{dest.resolve()}"


def builders_rank(arrived: list[Any], where: str, shared: bool) -> int | None:
    """The rank that builds this rank's copy: global rank 0 on a shared filesystem, else the
    builder of the copy this rank reads (same host, same path). ``arrived``: ``(where, rank,
    builds, _)`` of every rank."""
    for theirs, rank, builds, _ in arrived:
        if builds and (rank == 0 if shared else theirs == where):
            return int(rank)
    return None


def _who(ranks: list[int], what: str) -> str:
    """``rank 0 to build``, ``ranks 0, 2 to build``: whom a waiting rank waits for."""
    return f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))} to {what}"


class _Exchange:
    """One build's messages through the process group's key-value store: ``post`` a JSON
    object under a name, ``wait`` (polling, bounded by :func:`build_timeout`, and by the
    heartbeats of the ranks it waits for) for names, and ``leave`` once every rank read what it
    needed. ``key``: the same on every rank (rank 0's pick), different for every build.
    ``rerun``: what a rerun does after a rank died (said in :class:`BuilderGoneError`)."""

    def __init__(self, dist: Any, key: str, rank: int, dest: Any, rerun: str) -> None:
        self.store = dist.distributed_c10d._get_default_store()
        self.prefix = f"lading/build/{key}/"
        self.rank, self.size, self.dest = rank, int(dist.get_world_size()), dest
        self.rerun = rerun
        self.timeout = build_timeout()  # a bad setting refused before anything is built
        self.heartbeat = heartbeat_bound()
        self.failure: BaseException | None = None  # this rank's own, raised once it has left
        self._counted: set[str] = set()  # heartbeat counters known to exist (:meth:`_counts`)

    def post(self, name: str, value: dict[str, Any]) -> None:
        self.store.set(self.prefix + name, json.dumps(value))

    def alive(self, rank: int) -> str:
        """The key of ``rank``'s heartbeat counter (:class:`_Heartbeat`)."""
        return f"{self.prefix}alive/{rank}"

    def fail(self, name: str, error: BaseException) -> None:
        """Post ``error`` under ``name`` for the ranks waiting for it, and keep it to raise
        here once this rank has left (:meth:`leaving`)."""
        self.failure = error
        self.post(name, {"error": f"{type(error).__name__}: {error}"})

    @contextlib.contextmanager
    def leaving(self) -> Iterator[None]:
        """The block (this rank's part and its waits), then :meth:`leave`: at once where the
        block raised (its error goes on), else once every rank has read the outcome, and then
        this rank's own failure (:meth:`fail`), if any, is raised."""
        try:
            yield
        except BaseException:
            self.leave(wait=False)
            raise
        self.leave()
        if self.failure is not None:
            raise self.failure

    def wait(
        self,
        names: Iterable[str],
        who: str,
        timeout: float | None = None,
        strict: bool = True,
        watch: Mapping[str, int] | None = None,
    ) -> dict[str, Any]:
        """The objects posted under ``names`` once all are there. Raises TimeoutError when
        ``timeout`` (default :func:`build_timeout`) passes first (with ``strict``; without, it
        returns what is there), RuntimeError when the store is gone, and
        :class:`BuilderGoneError` when a rank that posts one of ``names`` (``watch``: name ->
        rank) stops its heartbeat before posting it."""
        names = list(names)
        keys = [self.prefix + name for name in names]
        limit = self.timeout if timeout is None else timeout
        started = last_report = time.monotonic()
        silence = _Silence(self, {self.prefix + name: r for name, r in (watch or {}).items()}, who)
        pause = 0.05
        while not self._check(keys, who):
            now = time.monotonic()
            if now - started > limit:
                if not strict:
                    break
                raise TimeoutError(
                    f"rank {self.rank} waited {limit:.0f}s for {who} {self.dest}; is it still "
                    f"building (see its log), or did it die? For a longer build set "
                    f"{TIMEOUT_VAR} to the seconds to wait (default {DEFAULT_TIMEOUT_S:.0f})"
                )
            silence.look(now)
            if now - last_report >= REPORT_S:
                last_report = now
                print(
                    f"lading: rank {self.rank} has waited {now - started:.0f}s for {who} "
                    f"{self.dest} (at most {limit:.0f}s, {TIMEOUT_VAR})",
                    file=sys.stderr,
                    flush=True,
                )
            time.sleep(pause)
            pause = min(pause * 2, _POLL_S)
        return {
            name: json.loads(self.store.get(key))
            for name, key in zip(names, keys, strict=True)
            if self._check([key], who)
        }

    def _check(self, keys: list[str], who: str) -> bool:
        try:
            return bool(self.store.check(keys))
        except RuntimeError as e:
            raise self._lost(e, who) from e

    def _read(self, key: str, who: str) -> dict[str, Any] | None:
        """The object posted under ``key`` (the full key), None where nothing is yet."""
        if not self._check([key], who):
            return None
        try:
            return dict(json.loads(self.store.get(key)))
        except RuntimeError as e:
            raise self._lost(e, who) from e

    def _counts(self, keys: list[str], who: str) -> list[int]:
        """The counters under ``keys`` (full keys; 0 where none was yet), in one call to the
        store once each exists: every waiting rank reads every builder's, so at 512 ranks and
        64 node builders a call a key would be ~2,000 calls a second on the store, where one
        call a look is ~34. The first read of a key creates it (``add`` of 0: a ``get`` or
        ``multi_get`` of a key not yet there would wait the store's timeout)."""
        try:
            if not all(key in self._counted for key in keys):
                self._counted.update(keys)
                return [int(self.store.add(key, 0)) for key in keys]
            return [int(value) for value in self.store.multi_get(keys)]
        except RuntimeError as e:
            raise self._lost(e, who) from e

    def _lost(self, e: RuntimeError, who: str) -> RuntimeError:
        return RuntimeError(
            f"rank {self.rank} lost the process group's store while waiting for {who} "
            f"{self.dest} ({e}); the rank holding it (rank 0, or torchrun's agent) stopped: "
            "see its error"
        )

    def leave(self, wait: bool = True) -> None:
        """Say this rank is done reading; with ``wait``, wait (``LEAVE_WAIT_S`` at most) until
        every rank said so, so that the store outlives everyone's last read."""
        try:
            self.post(f"left/{self.rank}", {})
            if wait:
                names = [f"left/{rank}" for rank in range(self.size)]
                self.wait(names, "every rank to have read the outcome of", LEAVE_WAIT_S, False)
        except RuntimeError:  # the store is gone: nobody is left to read it
            pass


class _Heartbeat:
    """This rank's heartbeat for the span of a ``with`` block (its part of the build, which
    other ranks wait for): the counter ``alive/<rank>``, incremented on entering, then every
    ``bound / 6`` seconds by a daemon thread that the block owns (started on entering, stopped
    and joined on leaving, ``_JOIN_S`` at most: a store call that hangs leaves the daemon
    behind), and ``doing/<rank>``, this rank's host, pid and what it does (for the message of a
    rank that finds it gone). A post that fails (the store gone) ends the beats, not the build.
    A forked child inherits no thread and posts nothing: the heartbeat speaks for the process
    that entered the block only."""

    def __init__(self, talk: _Exchange, doing: str) -> None:
        self.talk, self.doing = talk, doing
        self.period = talk.heartbeat / _BEATS_PER_BOUND
        self.owner = os.getpid()
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None

    def __enter__(self) -> _Heartbeat:
        self.doing_now(self.doing)
        self.thread = threading.Thread(
            target=self._run, name=f"lading-heartbeat-rank{self.talk.rank}", daemon=True
        )
        self.thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop.set()
        if self.thread is not None and os.getpid() == self.owner:
            self.thread.join(timeout=_JOIN_S)

    def doing_now(self, doing: str) -> None:
        """Say, with a beat, that this rank now does ``doing`` (``merging the shards of ...``)."""
        self.doing = doing
        said = {"host": socket.gethostname(), "pid": self.owner, "doing": doing}
        if self._posted(lambda: self.talk.post(f"doing/{self.talk.rank}", said)):
            self.beat()

    def beat(self) -> bool:
        """Add one to this rank's counter; False where it could not be (the store gone, or a
        forked child of the rank, which does not speak for it)."""
        return self._posted(lambda: self.talk.store.add(self.talk.alive(self.talk.rank), 1))

    def _posted(self, post: Callable[[], Any]) -> bool:
        if os.getpid() != self.owner:
            return False
        try:
            post()
        except Exception:  # the store gone (RuntimeError) or refusing: the build goes on
            return False
        return True

    def _run(self) -> None:
        while not self.stop.wait(self.period) and self.beat():
            pass


class _Silence:
    """A waiting rank's watch over the heartbeats of the ranks it waits for (``watch``: full key
    awaited -> the rank that posts it): :meth:`look` raises :class:`BuilderGoneError` where
    one's counter has stood still, on this rank's monotonic clock, for longer than the bound
    while its key is still missing."""

    def __init__(self, talk: _Exchange, watch: Mapping[str, int], who: str) -> None:
        self.talk, self.who = talk, who
        self.waiting = dict(watch)  # the keys not yet posted, whose ranks must be alive
        self.seen: dict[int, tuple[int, float]] = {}  # rank -> its counter, seen since when
        self.every = talk.heartbeat / _LOOKS_PER_BOUND
        self.last_look = -float("inf")

    def look(self, now: float) -> None:
        """Read the counters (every quarter of the bound at most, in one store call); raise
        for the ranks silent too long whose key is still missing."""
        if not self.waiting or now - self.last_look < self.every:
            return
        self.last_look = now
        gone: list[tuple[int, float]] = []
        waiting = list(self.waiting.items())
        counters = [self.talk.alive(rank) for _, rank in waiting]
        for (key, rank), count in zip(waiting, self.talk._counts(counters, self.who)):
            last, since = self.seen.get(rank, (-1, now))
            if count != last:
                self.seen[rank] = (count, now)
            elif now - since > self.talk.heartbeat:
                if self.talk._check([key], self.who):
                    del self.waiting[key]  # posted, then its beats ended: it is done
                else:
                    gone.append((rank, now - since))
        if gone:
            raise BuilderGoneError(self._message(gone))

    def _message(self, gone: list[tuple[int, float]]) -> str:
        said = []
        for rank, silent in gone:
            what = self.talk._read(f"{self.talk.prefix}doing/{rank}", self.who)
            if what is None:
                said.append(f"rank {rank} (never heard from: no heartbeat in {silent:.1f}s)")
            else:
                said.append(
                    f"rank {rank} (host {what.get('host')}, pid {what.get('pid')}), which was "
                    f"{what.get('doing')} and was last heard from {silent:.1f}s ago"
                )
        ranks = ", ".join(str(rank) for rank, _ in gone)
        several = len(gone) > 1
        return (
            f"rank {self.talk.rank} waited for {self.who} {self.talk.dest}, but "
            f"{'; '.join(said)}: {'their heartbeats' if several else 'its heartbeat'} stopped "
            f"for longer than {HEARTBEAT_VAR}={self.talk.heartbeat:g}s with no error posted: "
            f"killed, out of memory, crashed (or stopped). See the log of "
            f"rank{'s' if several else ''} {ranks} (and the host's kernel log, for the OOM "
            f"killer) for why; then rerun the job: {self.talk.rerun}"
        )


def build_in_shards(
    source: Any,
    dest: Path,
    args: tuple[Any, ...],
    shared: bool,
    build_id: str | None,
    progress: bool | None,
) -> PackedStore:
    """Under a process group: rank ``r`` of ``w`` builds shard ``r`` of ``w``; after all are
    written, rank 0 merges; every rank opens the snapshot rank 0 committed."""
    fmt, tok, max_length, on_error, duplicates, parse, options = args

    def write(shard: tuple[int, int]) -> None:
        write_one_shard(
            source,
            dest,
            shard,
            format=fmt,
            tok=tok,
            max_length=max_length,
            on_error=on_error,
            duplicates=duplicates,
            parse=parse,
            options=options,
            build_id=build_id,
            progress=progress,
        )

    def merge(n: int) -> str:
        bid = build_id or derive_build_id(source_files(source, fmt, parse), options, n)
        return merge_store(dest, bid).snapshot

    before = current_snapshot(dest)
    store = PackedStore(dest, snapshot=shards_in_group(write, merge, dest, shared))
    say_group_skips(store.meta["build"], before, store.snapshot, source, dest, stacklevel=5)
    return store


def say_group_skips(
    record: Mapping[str, Any],
    before: str | None,
    snapshot: str,
    source: Any,
    dest: Any,
    stacklevel: int,
) -> None:
    """Rank 0's warning of what every shard of a build under ``shard="auto"`` skipped (each
    shard's rank warned of its own; rank 0's log is the one read), worded as a one-process
    build's: ``record``'s ``skipped`` and ``skip_examples`` (the merged manifest's). Nothing
    where the run committed nothing new (``snapshot == before``: a rerun, as silent as a
    one-process rerun). ``stacklevel``: this function's, counted to the user's call."""
    skipped = int(record.get("skipped") or 0)
    dist = process_group(min_size=2)
    if not skipped or snapshot == before or dist is None or dist.get_rank() != 0:
        return
    examples = list(record.get("skip_examples") or [])
    first = f"; first: {examples[0]}" if examples else ""
    shards = f"{dist.get_world_size()} shards of {source} building {dest}"
    warnings.warn(
        f"skipped {skipped} malformed record(s) of {shards}{first}",
        SkippedRecordsWarning,
        stacklevel=stacklevel,
    )


def shards_in_group(
    write: Callable[[tuple[int, int]], Any],
    merge: Callable[[int], str],
    dest: Any,
    shared: bool,
    say_shared: str = "shared_fs=True or LADING_SHARED_FS=1",
) -> str:
    """Under a process group, for any kind built in shards: rank ``r`` of ``w`` writes shard
    ``(r, w)``; once every rank wrote its shard, rank 0 runs ``merge(w)`` (the snapshot it
    committed), which every rank returns. A failure on any rank is raised on every rank.
    ``say_shared``: how the caller's users say ``dest`` is shared (what its build takes).
    The ranks wait for each other outside any collective (see the module doc)."""
    dist = process_group(min_size=2)
    world = World.detect()
    if not shared and world.local_world_size != world.world_size:
        raise ValueError(
            f"shard='auto' over {world.world_size} ranks on several nodes needs {dest} on a "
            f"filesystem every rank sees ({say_shared}); on node-local disks build without "
            "shard= (local rank 0 of each node builds its copy)"
        )
    key: list[str] = [uuid.uuid4().hex]
    dist.broadcast_object_list(key, src=0)
    rank, size = world.rank, world.world_size
    talk = _Exchange(dist, key[0], rank, dest, "the shards already written are reused")
    with talk.leaving():
        with _Heartbeat(talk, f"writing shard {rank}/{size} of {dest}") as heart:
            try:
                write((rank, size))
                talk.post(f"shard/{rank}", {})
            except BaseException as e:  # post it, or the other ranks wait for it in vain
                talk.fail(f"shard/{rank}", e)
            if rank == 0:  # its heartbeat goes on: the others wait for its merge
                merged = _merge_once_written(talk, heart, merge, size)
        if rank != 0:
            who = "rank 0 to merge the shards of"
            merged = talk.wait(["merged"], who, watch={"merged": 0})["merged"]
    failed = merged["failed"]
    if failed or "snapshot" not in merged:
        bad, why = failed[0] if failed else (0, f"the merge failed: {merged.get('error')}")
        raise StoreFormatError(f"rank {rank}: {dest} was not built: rank {bad}: {why}")
    return str(merged["snapshot"])


def _merge_once_written(
    talk: _Exchange, heart: _Heartbeat, merge: Callable[[int], str], size: int
) -> dict[str, Any]:
    """Rank 0's part after its shard: wait for every rank's, then ``merge(size)`` where none
    failed; post and return the outcome (``failed``: ``(rank, error)`` of the failed shards,
    and ``snapshot`` or the merge's ``error``)."""
    ranks = list(range(size))
    shards = {f"shard/{r}": r for r in ranks}
    heart.doing_now(f"waiting for the shards of {talk.dest}")
    written = talk.wait(list(shards), _who(ranks, "write a shard of"), watch=shards)
    errors = [(r, written[f"shard/{r}"].get("error")) for r in ranks]
    failed = [(r, why) for r, why in errors if why]
    merged: dict[str, Any] = {"failed": failed}
    if not failed:
        heart.doing_now(f"merging the shards of {talk.dest}")
        try:
            merged["snapshot"] = merge(size)
        except BaseException as e:  # raised here once left; the others get it in the outcome
            talk.failure = e
            merged["error"] = f"{type(e).__name__}: {e}"
    talk.post("merged", merged)
    return merged
