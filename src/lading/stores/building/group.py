"""Building under an initialised process group: who builds, and every rank on one snapshot.

Without ``shard=``: the builder rank(s) build (global rank 0 on a shared filesystem, local rank
0 of each node otherwise) while the others wait in a collective; then each rank opens the
snapshot its builder committed (``all_gather_object`` of what each built), so a rebuild by
someone else in between does not split the ranks. With ``shard="auto"``: rank ``r`` of ``w``
builds shard ``r`` of ``w``, rank 0 merges once all are written, and every rank opens the
snapshot rank 0 committed. Every rank reaches every collective, a failed one too, so a failure
is raised on every rank instead of hanging the others.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lading.errors import StoreFormatError
from lading.stores.building.parallel import (
    derive_build_id,
    merge_store,
    source_files,
    write_one_shard,
)
from lading.stores.packed import PackedStore
from lading.world import World, process_group


def build_in_group(build: Callable[[], str], dest: Path, shared: bool) -> PackedStore:
    """Run ``build`` here, or under an initialised process group in the builder rank(s) only,
    the others waiting at a barrier; then open, on every rank, the snapshot its builder
    committed (a rebuild by someone else in between does not split the ranks)."""
    dist = process_group(min_size=2)
    if dist is None:
        return PackedStore(dest, snapshot=build())
    world = World.detect()
    failure: BaseException | None = None
    snapshot = None
    if world.is_builder(shared):
        try:
            snapshot = build()
        except BaseException as e:  # reach the barrier first, or the other ranks hang forever
            failure = e
    # every rank reaches this collective, a failed builder too (it doubles as the barrier)
    built: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(built, (_where(dest), world.rank, snapshot))
    if failure is not None:
        raise failure
    mine = builders_snapshot(built, _where(dest), shared)
    try:
        return PackedStore(dest, snapshot=mine)
    except StoreFormatError as e:
        raise StoreFormatError(
            f"rank {world.rank}: the store at {dest} was not built ({e}); the building rank "
            "failed, see its error"
        ) from None


def _where(dest: Path) -> str:
    """Which copy of ``dest`` a rank reads: its host and the path there (two simulated nodes
    on one host build two copies under two paths)."""
    return f"{socket.gethostname()}:{dest.resolve()}"


def builders_snapshot(built: list[Any], where: str, shared: bool) -> str | None:
    """The snapshot committed by this rank's builder: global rank 0's on a shared filesystem,
    else the one that built the copy this rank reads (same host, same path)."""
    for theirs, rank, snapshot in built:
        if snapshot is not None and (rank == 0 if shared else theirs == where):
            return str(snapshot)
    return None


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
    ``say_shared``: how the caller's users say ``dest`` is shared (what its build takes)."""
    dist = process_group(min_size=2)
    world = World.detect()
    if not shared and world.local_world_size != world.world_size:
        raise ValueError(
            f"shard='auto' over {world.world_size} ranks on several nodes needs {dest} on a "
            f"filesystem every rank sees ({say_shared}); on node-local disks build without "
            "shard= (local rank 0 of each node builds its copy)"
        )
    failure: BaseException | None = None
    try:
        write((world.rank, world.world_size))
    except BaseException as e:  # reach the collectives first, or the other ranks hang
        failure = e
    done: list[Any] = [None] * world.world_size
    dist.all_gather_object(
        done, None if failure is None else f"{type(failure).__name__}: {failure}"
    )
    snapshot: list[str | None] = [None]
    if not any(done) and world.rank == 0:
        try:
            snapshot[0] = merge(world.world_size)
        except BaseException as e:
            failure = e
    dist.broadcast_object_list(snapshot, src=0)
    if failure is not None:
        raise failure
    failed = [(r, why) for r, why in enumerate(done) if why]
    if failed or snapshot[0] is None:
        rank, why = failed[0] if failed else (0, "the merge failed")
        raise StoreFormatError(f"rank {world.rank}: {dest} was not built: rank {rank}: {why}")
    return snapshot[0]
