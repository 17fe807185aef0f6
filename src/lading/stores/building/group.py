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
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import socket
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from lading.deadline import env_seconds
from lading.errors import StoreFormatError
from lading.stores.building.parallel import (
    derive_build_id,
    merge_store,
    source_files,
    write_one_shard,
)
from lading.stores.packed import PackedStore
from lading.world import World, process_group

TIMEOUT_VAR = "LADING_BUILD_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 86400.0  # a day: a waiting rank's bound on a build, see the module doc
LEAVE_WAIT_S = 60.0  # how long a rank waits for the others to have read the outcome
REPORT_S = 120.0  # how often a waiting rank says on stderr what it waits for
_POLL_S = 1.0  # the longest sleep between two looks at the store
_ALONE = contextvars.ContextVar("lading_build_alone", default=False)


def build_timeout() -> float:
    """Seconds a rank waits for another's build: ``LADING_BUILD_TIMEOUT_S``, else a day.

    Raises:
        ValueError: the variable is not a positive number.
    """
    return env_seconds(TIMEOUT_VAR, DEFAULT_TIMEOUT_S)


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
    talk = _Exchange(dist, arrived[0][3], world.rank, dest)
    builders = [rank for _, rank, builder, _ in arrived if builder]
    mine = builders_rank(arrived, where, shared)
    failure: BaseException | None = None
    if builds:
        try:
            talk.post(f"built/{world.rank}", {"snapshot": build()})
        except BaseException as e:  # post it first, or the other ranks wait for it in vain
            failure = e
            talk.post(f"built/{world.rank}", {"error": f"{type(e).__name__}: {e}"})
    try:
        outcome = talk.wait([f"built/{rank}" for rank in builders], _who(builders, "build"))
    except BaseException:
        talk.leave(wait=False)
        raise
    talk.leave()
    if failure is not None:
        raise failure
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
    object under a name, ``wait`` (polling, bounded by :func:`build_timeout`) for names, and
    ``leave`` once every rank read what it needed. ``key``: the same on every rank (rank 0's
    pick), different for every build."""

    def __init__(self, dist: Any, key: str, rank: int, dest: Any) -> None:
        self.store = dist.distributed_c10d._get_default_store()
        self.prefix = f"lading/build/{key}/"
        self.rank, self.size, self.dest = rank, int(dist.get_world_size()), dest
        self.timeout = build_timeout()  # a bad setting refused before anything is built

    def post(self, name: str, value: dict[str, Any]) -> None:
        self.store.set(self.prefix + name, json.dumps(value))

    def wait(
        self, names: Iterable[str], who: str, timeout: float | None = None, strict: bool = True
    ) -> dict[str, Any]:
        """The objects posted under ``names`` once all are there. Raises TimeoutError when
        ``timeout`` (default :func:`build_timeout`) passes first (with ``strict``; without, it
        returns what is there), RuntimeError when the store is gone."""
        names = list(names)
        keys = [self.prefix + name for name in names]
        limit = self.timeout if timeout is None else timeout
        started = last_report = time.monotonic()
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
            raise RuntimeError(
                f"rank {self.rank} lost the process group's store while waiting for {who} "
                f"{self.dest} ({e}); the rank holding it (rank 0, or torchrun's agent) stopped: "
                "see its error"
            ) from e

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

    return PackedStore(dest, snapshot=shards_in_group(write, merge, dest, shared))


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
    talk = _Exchange(dist, key[0], world.rank, dest)
    failure: BaseException | None = None
    try:
        write((world.rank, world.world_size))
        talk.post(f"shard/{world.rank}", {})
    except BaseException as e:  # post it first, or the other ranks wait for it in vain
        failure = e
        talk.post(f"shard/{world.rank}", {"error": f"{type(e).__name__}: {e}"})
    try:
        if world.rank == 0:
            ranks = list(range(world.world_size))
            written = talk.wait([f"shard/{r}" for r in ranks], _who(ranks, "write a shard of"))
            errors = [(r, written[f"shard/{r}"].get("error")) for r in ranks]
            failed = [(r, why) for r, why in errors if why]
            merged: dict[str, Any] = {"failed": failed}
            if not failed:
                try:
                    merged["snapshot"] = merge(world.world_size)
                except BaseException as e:
                    failure = e
                    merged["error"] = f"{type(e).__name__}: {e}"
            talk.post("merged", merged)
        else:
            merged = talk.wait(["merged"], "rank 0 to merge the shards of")["merged"]
    except BaseException:
        talk.leave(wait=False)
        raise
    talk.leave()
    if failure is not None:
        raise failure
    failed = merged["failed"]
    if failed or "snapshot" not in merged:
        rank, why = failed[0] if failed else (0, f"the merge failed: {merged.get('error')}")
        raise StoreFormatError(f"rank {world.rank}: {dest} was not built: rank {rank}: {why}")
    return str(merged["snapshot"])
