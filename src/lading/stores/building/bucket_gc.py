"""Garbage in a bucket after a commit: the snapshots no reader can still be opening, and the
builds only they used.

A bucket keeps no lock and no clock of its own, so what was replaced when is what the commits
wrote: each manifest's ``history`` names the snapshots it replaced and when (stamped right
before its ``meta.json`` PUT: :func:`lading.disk.commit.stamped`). A replaced snapshot is kept
for :func:`~lading.disk.snapshot.grace_seconds` from its replacement; a snapshot no history
names was never current as far as the bucket tells (a build uploading beside, a killed one's
leftovers) and is kept until a day after its last write. The local counterpart, under a
folder's build lock, is :mod:`lading.disk.commit`.

Where the listing gives each object's time of last write (S3's ``LastModified``), two more
leftovers are judged by it: a killed build's write probe (``.lading-write-probe-*``) goes a day
after it was written, and a parallel build no snapshot names (the shards of a job killed before
its merge, or of workers whose merge was never run) is named in an
:class:`~lading.errors.AbandonedBuildWarning` once nothing in it was written for a day. It is
not removed: a folder's merge holds the build lock, which a bucket does not have, so a late
merge of that build could commit a manifest naming shards deleted under it.
"""

from __future__ import annotations

import calendar
import contextlib
import json
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from lading.disk.commit import units
from lading.disk.snapshot import (
    ABANDONED_S,
    BUILD_MARK,
    BUILD_PREFIX,
    MANIFEST,
    SNAP_PREFIX,
    WRITE_PROBE,
    grace_seconds,
    merge_command,
)
from lading.errors import AbandonedBuildWarning
from lading.remote.fetch import Fetcher
from lading.remote.objects import ObjectClient, ObjectInfo, describe
from lading.remote.settings import default_timeout

DELETES_AT_ONCE = 8  # DELETEs (and GETs of manifests) at once


def collect_garbage(
    client: ObjectClient, current: dict[str, Any], timeout: float | None = None
) -> list[str]:
    """Delete the objects of ``snap-`` folders no snapshot within the grace still uses, and of
    the ``build-`` folders (parallel builds) only they used; the folders removed. A snapshot
    was replaced when the commit after it said so: an entry of the ``history`` of ``current``
    or of a snapshot that history names, and so on back (manifests that were current),
    stamped at that commit (:func:`~lading.disk.commit.stamped`); it is kept for the grace
    from then. A snapshot no history names was never current as far
    as the bucket tells (a build uploading beside this one, one killed before its commit, a
    commit landing after ``current``, or one of a lading that kept no history in a bucket):
    kept until :data:`~lading.disk.snapshot.ABANDONED_S` past its last write (the newest of
    its objects' times in the listing; where the listing gives none, its manifest's
    ``committed_at``, else its id's UTC time). A build no snapshot names is kept too (its
    shards wait for their merge), and named in an :class:`~lading.errors.AbandonedBuildWarning`
    once nothing in it was written for that long; a write probe
    (:func:`~lading.stores.building.upload.check_writable`) that old is deleted.
    Every call is on the read path (``timeout`` seconds an attempt, default
    ``$LADING_REMOTE_TIMEOUT``, retried).

    Raises:
        RemoteReadError: a listing, GET or DELETE failed for good.
    """
    fetcher = Fetcher(
        lambda: client, in_flight=DELETES_AT_ONCE, timeout=timeout or default_timeout()
    )
    try:
        return _collect(client, current, fetcher)
    finally:
        fetcher.close()


def _collect(client: ObjectClient, current: dict[str, Any], fetcher: Fetcher) -> list[str]:
    listing: dict[str, ObjectInfo] = fetcher.list()
    manifests: dict[str, dict[str, Any]] = {}
    for key in listing:
        snap, _, rest = key.partition("/")
        if snap.startswith(SNAP_PREFIX) and rest == MANIFEST:
            with contextlib.suppress(Exception):  # unreadable: judged by its id's time
                manifests[snap] = json.loads(fetcher.get_object(key))
    snaps = {k.split("/", 1)[0] for k in listing if k.startswith(SNAP_PREFIX)}

    written = _last_writes(listing)

    def last_write(snap: str) -> float:
        if snap in written:
            return written[snap]
        return float(manifests.get(snap, {}).get("committed_at") or _time(snap))

    now, grace = time.time(), grace_seconds()
    mine = str(current.get("snapshot"))
    # snapshot -> when the commit after it was made, from the histories of the snapshots that
    # were current: the current one's, then those its history names, and so on (a killed
    # upload's manifest, never current, is not taken at its word)
    replaced: dict[str, float] = {}
    trusted, seen = [current], {mine}
    while trusted:
        for entry in trusted.pop().get("history", []):
            try:
                name, at = str(entry["snapshot"]), float(entry["replaced_at"])
            except (KeyError, TypeError, ValueError):  # (a foreign entry)
                continue
            replaced[name] = max(at, replaced.get(name, at))
            if name not in seen and name in manifests:
                seen.add(name)
                trusted.append(manifests[name])
    keep = {mine}
    for snap in snaps - keep:
        if snap in replaced:
            if now - replaced[snap] < grace:
                keep.add(snap)  # replaced within the grace: readers opened it
        elif now - last_write(snap) < ABANDONED_S:
            keep.add(snap)  # never current as far as we know: under way, or swept later
    used = set(units(current))
    for snap in keep:
        used |= units(manifests.get(snap, {}))
    gone = snaps - keep - used
    # a build goes with the last snapshot that named it; one no snapshot names is left alone
    # (its shards wait for their merge however long; a worker killed for good leaves one)
    named = set().union(*(units(manifests[s]) for s in gone if s in manifests))
    gone |= {b for b in named - used if b.startswith(BUILD_PREFIX)}
    doomed = [k for k in listing if k.split("/", 1)[0] in gone]
    doomed += [
        k for k in listing if k.startswith(WRITE_PROBE) and now - written.get(k, now) >= ABANDONED_S
    ]
    named_anywhere = used.union(*(units(m) for m in manifests.values()))
    abandoned = {  # build -> seconds since its last write
        top: now - at
        for top, at in written.items()
        if top.startswith(BUILD_PREFIX) and top not in named_anywhere and now - at >= ABANDONED_S
    }
    _warn_abandoned(client.url, fetcher, listing, abandoned)
    doomed.sort(key=lambda k: not k.endswith(MANIFEST))  # a manifest first: pinned readers hear

    def delete(key: str) -> None:
        fetcher.run(f"DELETE {describe(client.url, key)}", lambda: client.delete_async(key))

    with ThreadPoolExecutor(DELETES_AT_ONCE, thread_name_prefix="lading-gc") as pool:
        list(pool.map(delete, doomed))
    return sorted(gone)


def _last_writes(listing: dict[str, ObjectInfo]) -> dict[str, float]:
    """Top-level name (a ``snap-``/``build-`` folder, or an object) -> the newest time of last
    write of the objects under it, where the listing gives their times."""
    newest: dict[str, float] = {}
    for key, info in listing.items():
        if info.written is not None:
            top = key.split("/", 1)[0]
            newest[top] = max(info.written, newest.get(top, info.written))
    return newest


def _warn_abandoned(
    url: str, fetcher: Fetcher, listing: dict[str, ObjectInfo], abandoned: dict[str, float]
) -> None:
    """Name the parallel builds no manifest names in which nothing was written for
    :data:`ABANDONED_S` (``abandoned``: each one's seconds since; see the module doc: they
    are left in place)."""
    for build in sorted(abandoned)[:8]:
        keys = [k for k in listing if k.startswith(f"{build}/")]
        size = sum(listing[k].size for k in keys)
        record = None
        with contextlib.suppress(Exception):  # unreadable: the merge reads it and says why
            record = fetcher.get_object(f"{build}/{BUILD_MARK}")
        days = abandoned[build] / 86400
        warnings.warn(
            f"{url}/{build}/ holds a parallel build no snapshot names, untouched for "
            f"{days:.1f} days ({len(keys)} objects, {size / 2**20:.1f} MiB): shards of a job "
            f"killed before its merge, or of workers whose merge was never run. "
            f"`{merge_command(record)} {url} --build-id {build}` commits it (or names the shards "
            f"still to build); if it is not wanted, delete every object under {url}/{build}/ "
            "(lading leaves it: a bucket has no lock to remove it safely beside a late merge)",
            AbandonedBuildWarning,
            stacklevel=4,
        )


def _time(snapshot: str) -> float:
    """The UTC time in a snapshot id (``snap-20261126T061759Z-f2041710``); 0 if none."""
    try:
        stamp = snapshot.removeprefix(SNAP_PREFIX).split("-", 1)[0]
        return float(calendar.timegm(time.strptime(stamp, "%Y%m%dT%H%M%SZ")))
    except ValueError:
        return 0.0
