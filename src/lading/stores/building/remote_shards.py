"""Shards built straight into object storage, and their merge committed in the bucket: what
stores and token corpora share (:mod:`lading.lm.remote_shards` is the corpora's side).

A worker checks the bucket writable before it reads a byte of its source, copies the bucket's
``build-<id>/build.json`` (and its shard's ``shard.json``) into a scratch folder beside the node
cache, where the local build claims the build as in a folder (another source, N or options
under one build id refused, naming the URL; a rerun finds its shard whole and skips it), writes
its shard there (it holds this one shard on local disk), uploads ``build.json`` where the bucket
has none yet, the shard's files, then its ``shard.json`` last: a shard is in the bucket whole or
not at all, so a killed worker leaves objects no merge takes. The scratch folder goes either
way, a killed worker's at the next one's start (:mod:`lading.stores.building.scratch`).

A merge lists the bucket and mirrors what the checks read into a scratch folder: every
``build.json`` and ``shard.json``, the columns the merge reads (``need``: a store's ids and
offsets), and every other object as a sparse stand-in of its size; the kind's own merge runs
on the mirror, and its new files go up with ``meta.json`` last, so a reader sees the last
snapshot or the new one, never a mixture. A merge of a build already committed commits nothing.

A bucket has no build lock, so ``meta.json`` is swapped, not overwritten (:func:`swap_meta`):
PUT only where the manifest the merge mirrored is still the current one (``If-Match`` its
ETag, or ``If-None-Match: *`` where there was none). Of two merges started together (a Slurm
``afterok`` merge beside a user's own, a retried pipeline step) one commits; the other, where
the winner committed the same build, returns the winner's snapshot and removes its own
objects (as a second merge in a folder commits nothing new), and fails naming the winner's
snapshot where it committed another build. A backend without conditional PUTs keeps the
plain PUT (see :func:`swap_meta`).
"""

from __future__ import annotations

import functools
import json
import tempfile
import time
import warnings
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from lading.disk.meta import META_FILE
from lading.disk.snapshot import BUILD_PREFIX, MANIFEST
from lading.errors import DuplicateIdError, RemoteChangedError, SourceError, StoreFormatError
from lading.remote.clients import open_client
from lading.remote.fetch import Fetcher
from lading.remote.objects import (
    ObjectClient,
    PermanentError,
    RemoteReadError,
    RemoteWriteError,
    describe,
)
from lading.remote.settings import RemoteSettings
from lading.stores.building.bucket_gc import collect_garbage
from lading.stores.building.bucket_kind import refuse_kind_at
from lading.stores.building.scratch import owned_folder
from lading.stores.building.shardset import (
    BUILD_FILE,
    RUN_FILE,
    RUN_MARK_MOST,
    SEEDED_FILE,
    SHARD_FILE,
    claim_build,
)
from lading.stores.building.upload import put_files

if TYPE_CHECKING:
    from lading.stores.building.pending import BuildToCommit

T = TypeVar("T")


def seed_from_bucket(url: str, settings: RemoteSettings, local: Path, rel: str) -> str | None:
    """Copy into ``local`` what the bucket holds of shard ``rel``'s build that the local
    build's checks read: its ``build.json`` (the first worker's recipe: the claim compares
    this worker's inputs, options and N with it, as in a folder) and, when the shard is whole
    there, its ``shard.json`` (the local build then reports it reused, after the claim). The
    id of the bucket's current snapshot (None: none yet), for :func:`put_run_mark`."""
    bid = rel.split("/", 1)[0]
    fetcher = settings.fetcher(url)
    try:
        for key in (f"{bid}/{BUILD_FILE}", f"{rel}/{SHARD_FILE}"):
            raw = _get_or_none(fetcher, key)
            if raw is None:
                break  # (no build.json: no shard of this build either)
            record = key.endswith(f"/{SHARD_FILE}")
            if record and not _whole_in_bucket(fetcher, rel, raw):
                break  # (damaged there: built and uploaded again, its shard.json last)
            (local / key).parent.mkdir(parents=True, exist_ok=True)
            (local / key).write_bytes(raw)
            if record:
                (local / rel / SEEDED_FILE).write_bytes(b"")
        meta = _get_or_none(fetcher, META_FILE)
    finally:
        fetcher.close()
    try:
        snapshot = json.loads(meta).get("snapshot") if meta else None
    except (ValueError, AttributeError):
        return None
    return snapshot if isinstance(snapshot, str) else None


def _whole_in_bucket(fetcher: Fetcher, rel: str, raw: bytes) -> bool:
    """Whether every file shard ``rel``'s record (``raw``) lists is in the bucket at its size
    (one listing): a shard whose object went missing or was cut is built again by its worker
    run again, as in a folder (it said "already built", and the merge refused it)."""
    try:
        files = json.loads(raw).get("files")
    except (ValueError, AttributeError):
        return True  # (the merge reads it and says what is wrong)
    if not isinstance(files, dict):
        return True
    there = {key.rsplit("/", 1)[-1]: info.size for key, info in fetcher.list(f"{rel}/").items()}
    return all(
        isinstance(info, dict) and there.get(name) == info.get("size")
        for name, info in files.items()
    )


def put_run_mark(url: str, settings: RemoteSettings, bid: str, snapshot: str | None) -> None:
    """Record in the bucket that shards of build ``bid`` ran while ``snapshot`` was its
    current one (:data:`.shardset.RUN_FILE`, as a folder's claim records it)."""
    raw = json.dumps({"after": snapshot}).encode()
    client = open_client(url, settings.backend, settings.options, settings.timeout)
    put_files(client, [(f"{bid}/{RUN_FILE}", raw, len(raw))], timeout=settings.timeout)


def _get_or_none(fetcher: Fetcher, key: str) -> bytes | None:
    """Object ``key``, or None where the bucket has none (a GET, not a listing: a build's
    folder may hold thousands of objects)."""
    try:
        return fetcher.get_object(key)
    except PermanentError:
        return None


def scratch_folder(settings: RemoteSettings, prefix: str) -> AbstractContextManager[Path]:
    """A folder beside the node cache, removed at the end whatever happens; one that a
    killed process left is removed by a later call (:mod:`lading.stores.building.scratch`)."""
    return owned_folder(settings.cache, prefix)


def upload_shard_folder(
    local: Path, rel: str, url: str, settings: RemoteSettings, shard: int | None = None
) -> None:
    """Upload the finished shard ``local/rel`` (``rel``: ``build-<id>/shard-<i>-of-<n>``) to
    ``url``: its build's ``build.json`` where the bucket has none yet (:func:`put_build`),
    its files, then its ``shard.json``."""
    client = open_client(url, settings.backend, settings.options, settings.timeout)
    put_build(client, settings, local, rel, url, shard)
    first = [p for p in sorted((local / rel).iterdir()) if p.name != SHARD_FILE]
    sized: list[tuple[str, bytes | Path, int]] = [
        (p.relative_to(local).as_posix(), p, p.stat().st_size) for p in first
    ]
    put_files(client, sized, timeout=settings.timeout)
    last = local / rel / SHARD_FILE
    key, size = f"{rel}/{SHARD_FILE}", last.stat().st_size
    record: list[tuple[str, bytes | Path, int]] = [(key, last, size)]
    put_files(client, record, timeout=settings.timeout)


def put_build(
    client: ObjectClient,
    settings: RemoteSettings,
    local: Path,
    rel: str,
    url: str,
    shard: int | None,
) -> None:
    """PUT ``build.json`` of shard ``rel``'s build (from ``local``) where the bucket has
    none: a worker that finds another recipe there (other inputs, options or N) is refused as
    a local claim refuses it (``shard``: this worker's number; None, a Ray task's: not
    compared). Never PUT over one there: the first worker's recipe is the build's. The PUT
    is create-only (``If-None-Match: *``), so of two workers racing on an absent
    ``build.json`` one writes it and the other reads the winner's; where the client has no
    create-only PUT (an fsspec filesystem other than s3fs), it writes and reads back, which
    sees the race unless the two PUTs and reads interleave exactly."""
    key = f"{rel.split('/', 1)[0]}/{BUILD_FILE}"
    ours = (local / key).read_bytes()
    fetcher = settings.fetcher(url)
    try:
        theirs = _get_or_none(fetcher, key)
        if theirs is None:
            created = _created(fetcher, client, key, ours, settings)
            theirs = ours if created else fetcher.get_object(key)
    finally:
        fetcher.close()
    recipe = json.loads(ours)
    if theirs == ours or shard is None or "stats" not in recipe:
        return
    with tempfile.TemporaryDirectory(dir=local.parent) as there:
        (Path(there) / key).parent.mkdir()
        (Path(there) / key).write_bytes(theirs)
        try:
            claim_build((Path(there) / key).parent, recipe, shard)
        except StoreFormatError as e:
            raise named_as(e, Path(there), url) from None


def _created(
    fetcher: Fetcher, client: ObjectClient, key: str, data: bytes, settings: RemoteSettings
) -> bool:
    """Whether this call wrote ``key`` by a create-only PUT (False: one was there, or the
    client has none and wrote it over whatever was: the caller reads it back)."""
    what = f"PUT {describe(client.url, key)} (create-only)"
    try:
        return fetcher.run(what, lambda: client.create_async(key, data))
    except NotImplementedError:
        put_files(client, [(key, data, len(data))], timeout=settings.timeout)
        return False


Need = Callable[[dict[str, Any]], list[str]]  # a shard's record -> its files a merge reads


def mirror(
    url: str, settings: RemoteSettings, root: Path, need: Need | None = None
) -> dict[str, Any] | None:
    """Mirror the bucket's builds into ``root`` (see the module doc); the current manifest,
    or None where there is none yet."""
    fetcher = settings.fetcher(url)
    try:
        listing = fetcher.list()
        for key, info in listing.items():
            if not key.startswith(BUILD_PREFIX) or key.count("/") > 2:
                continue
            path = root / key
            path.parent.mkdir(parents=True, exist_ok=True)
            if path.name == RUN_FILE and info.size > RUN_MARK_MOST:
                continue  # not a mark (a hint only: never read whole)
            if path.name in (BUILD_FILE, SHARD_FILE, RUN_FILE):
                path.write_bytes(fetcher.get_object(key))
            else:
                with open(path, "wb") as f:
                    f.truncate(info.size)
        for record_path in root.glob(f"{BUILD_PREFIX}*/*/{SHARD_FILE}") if need else []:
            shard = record_path.parent
            try:
                wanted = need(json.loads(record_path.read_text())) if need else []
            except (ValueError, KeyError, TypeError):
                continue  # damaged: the merge's own check names it
            for name in wanted:
                key = f"{shard.relative_to(root).as_posix()}/{name}"
                if key in listing:
                    (shard / name).write_bytes(fetcher.get_object(key))
        if META_FILE not in listing:
            return None
        try:
            meta = json.loads(fetcher.get_object(META_FILE))
        except (PermanentError, ValueError):
            return None
        return meta if isinstance(meta, dict) else None
    finally:
        fetcher.close()


def named_as(
    error: StoreFormatError | SourceError, root: Path, url: str
) -> StoreFormatError | SourceError:
    """``error`` naming the bucket instead of the mirror (a scratch folder gone once the
    error is read): a :class:`SourceError` (a merge of no documents) keeps its kind."""
    if isinstance(error, SourceError):
        path, reason = (x.replace(str(root), url) for x in (error.path, error.reason))
        return SourceError(path, error.line, reason)
    return StoreFormatError(str(error).replace(str(root), url))


def commit_remote(
    url: str,
    settings: RemoteSettings,
    files: list[tuple[str, Path]],
    raw: bytes,
    previous: dict[str, Any] | None,
) -> str:
    """PUT the new snapshot's ``files``, then its manifest and ``meta.json`` (``raw``, stamped
    as committed now over ``previous``: :func:`~lading.disk.commit.stamped`, so the snapshot
    it replaces is kept for the grace from now, however long the PUTs before took): the
    commit, a compare-and-swap over ``previous``, the manifest the merge mirrored and built
    on (:func:`swap_meta`); then what no reader can still be opening goes, as after a merge in a
    folder (:func:`~lading.stores.building.bucket_gc.collect_garbage`: replaced snapshots past the
    grace and the builds only they used). The snapshot current after it: this one's, or,
    where another merge committed the same build first (two merges of one build started
    together), that merge's: this one's objects are removed, and it commits nothing, as a
    second merge in a folder does under the build lock.

    Raises:
        StoreFormatError: another merge committed another build (or rewrote ``meta.json``)
            since this one mirrored the bucket: naming it; this merge committed nothing.
        RemoteWriteError: a PUT failed.
    """
    from lading.disk.commit import stamped

    client = open_client(url, settings.backend, settings.options, settings.timeout)
    meta = json.loads(raw)
    ours = str(meta["snapshot"])
    manifest = f"{ours}/{MANIFEST}"
    sized: list[tuple[str, bytes | Path, int]] = [
        (k, p, p.stat().st_size) for k, p in files if k != manifest
    ]
    put_files(client, sized, timeout=settings.timeout)
    raw = stamped(meta, previous, time.time())
    for k, p in files:
        if k == manifest:  # (the mirror's copy, as committed)
            p.write_bytes(raw)
    put_files(client, [(manifest, raw, len(raw))], timeout=settings.timeout)
    try:
        theirs = swap_meta(url, settings, raw, previous)
    except StoreFormatError:
        _remove_objects(url, settings, ours, [k for k, _ in files])
        raise
    if theirs is not None and theirs.get("snapshot") != ours:  # (ours: a retry's 412)
        _remove_objects(url, settings, ours, [k for k, _ in files])
        if theirs.get("snapshot") and theirs.get("build_id") == meta.get("build_id"):
            return str(theirs["snapshot"])
        raise _lost(url, theirs, meta)
    try:  # committed: what a failure here leaves is garbage, not damage
        collect_garbage(client, meta, timeout=settings.timeout)
    except OSError as e:  # RemoteReadError included
        warnings.warn(f"{url} is committed; its old snapshots stay: {e}", stacklevel=2)
    return ours


def swap_meta(
    url: str, settings: RemoteSettings, raw: bytes, previous: dict[str, Any] | None
) -> dict[str, Any] | None:
    """PUT ``raw`` as the bucket's ``meta.json`` only where ``previous`` (the manifest the
    merge mirrored; None: there was none) is still the current one: the current manifest is
    read race-free (a HEAD for its ETag, then a GET pinned to it), checked to commit the
    same snapshot as ``previous``, and replaced by a PUT with ``If-Match`` that ETag (where
    there is none, a create-only PUT, ``If-None-Match: *``). None where this call committed
    ``raw``; else the current manifest another writer committed first (``{}`` where it is
    gone or names no snapshot).

    Where the client sends no such PUT (``If-Match`` goes to ``s3://`` buckets only, not to
    ``gs://`` or ``az://`` ones; neither goes through an fsspec filesystem other than s3fs,
    nor to a server answering 501) or gives no ETag, ``meta.json`` is PUT unconditionally,
    as before: a commit landing between the look
    and the PUT is then overwritten (the last PUT wins, and the other merge's snapshot is
    current for no one); only one landing before the look is caught. A server that takes
    ``If-Match`` on a PUT and ignores it is not told apart either."""
    fetcher = settings.fetcher(url)
    try:
        client = fetcher.client
        found = _current(url, fetcher, client)
        if _snapshot(found.meta) != _snapshot(previous):
            return found.meta or {}
        where = describe(client.url, META_FILE)
        etag = found.etag
        try:
            if not found.present:
                swapped = fetcher.run(
                    f"PUT {where} (create-only)", lambda: client.create_async(META_FILE, raw)
                )
            elif etag is None:
                raise NotImplementedError(f"{where} has no ETag")
            else:
                swap = functools.partial(client.replace_async, META_FILE, raw, etag)
                swapped = fetcher.run(f"PUT {where} (If-Match {etag})", swap)
        except NotImplementedError:
            put_files(client, [(META_FILE, raw, len(raw))], timeout=settings.timeout)
            return None
        except RemoteReadError as e:  # the fetcher's words, of a PUT: a write failed
            raise RemoteWriteError(str(e)) from None
        return None if swapped else (_current(url, fetcher, client).meta or {})
    finally:
        fetcher.close()


@dataclass(frozen=True)
class _Current:
    """The bucket's ``meta.json`` as one version: whether there is one, its ETag (None where
    the backend gives none) and its manifest (None where unreadable)."""

    present: bool
    etag: str | None
    meta: dict[str, Any] | None


_LOOKS = 5  # HEAD-then-GET reads of meta.json replaced in between, before giving up


def _current(url: str, fetcher: Fetcher, client: ObjectClient) -> _Current:
    """The current ``meta.json``, its bytes those of the ETag its HEAD gave (the GET pinned
    to it: a version replaced in between is looked at again)."""
    where = describe(client.url, META_FILE)
    for _ in range(_LOOKS):
        info = fetcher.run(f"HEAD {where}", lambda: client.head_async(META_FILE))
        if info is None:
            return _Current(False, None, None)
        etag = info.etag
        if info.size == 0:
            return _Current(True, etag, None)
        try:
            read = functools.partial(client.get_range, META_FILE, 0, info.size, etag)
            data = fetcher.run(f"GET {where}", read)
        except RemoteChangedError:
            continue  # replaced since the HEAD (or gone): look again
        try:
            meta = json.loads(data)
        except ValueError:
            meta = None
        return _Current(True, etag, meta if isinstance(meta, dict) else None)
    raise StoreFormatError(
        f"{url}: {META_FILE} was replaced {_LOOKS} times while this merge read it: other "
        "merges are committing here; this merge committed nothing (run it again)"
    )


def _snapshot(meta: dict[str, Any] | None) -> str | None:
    found = meta.get("snapshot") if meta else None
    return found if isinstance(found, str) else None


class CommitLostError(StoreFormatError):
    """A commit in a bucket lost to another writer's (:func:`commit_remote`): nothing of it
    was committed. ``other`` says what the other writer did (a Ray job words its own fix)."""

    def __init__(self, message: str, other: str) -> None:
        super().__init__(message)
        self.other = other


def _lost(url: str, theirs: dict[str, Any], ours: dict[str, Any]) -> CommitLostError:
    """The one line of a merge whose commit lost to another's of another build."""
    snapshot, build = _snapshot(theirs), theirs.get("build_id")
    if snapshot is None:
        other = f"another writer replaced or removed {META_FILE}"
    else:
        other = f"another merge committed snapshot {snapshot} (build {build})"
    bid = ours.get("build_id")
    return CommitLostError(
        f"{url}: {other} while this merge of build {bid} ran, so this merge committed "
        f"nothing (its snapshot {ours['snapshot']} is removed): run the merge again to see "
        f"what is pending now, or name this build to commit it over that one (--build-id {bid})",
        other,
    )


def _remove_objects(url: str, settings: RemoteSettings, snapshot: str, keys: list[str]) -> None:
    """Delete the objects of ``snapshot``, a commit that did not happen (nothing names them),
    best effort: a failure is warned about (garbage, not damage)."""
    fetcher = settings.fetcher(url)
    try:
        client = fetcher.client
        for key in keys:
            what = f"DELETE {describe(client.url, key)}"
            fetcher.run(what, functools.partial(client.delete_async, key))
    except OSError as e:  # RemoteReadError included
        warnings.warn(
            f"{url}: snapshot {snapshot} was not committed; its objects stay: {e}", stacklevel=3
        )
    finally:
        fetcher.close()


def shard_into_bucket(
    url: str,
    shard: tuple[int, int],
    write: Callable[[Path], Any],
    settings: RemoteSettings,
    bid: str,
    name: str = "store",
) -> Any:
    """Shard ``shard`` of the store (or token corpus: ``name``) at ``url``:
    ``write(local_dest)`` builds it (as :func:`lading.build_shard` into a folder), then it is
    uploaded (see the module doc; the caller checked the bucket writable before reading the
    source). The bucket's ``build.json`` and this shard's ``shard.json`` are copied into the
    folder first, so the build claims it as in a folder (another source, N or options under
    one build id refused) and a shard whole in the bucket is reported reused; either way the
    bucket records that the build's shards ran (:func:`put_run_mark`)."""
    from lading.stores.layout import shard_name

    i, n = shard
    rel = f"{bid}/{shard_name(i, n)}"
    with scratch_folder(settings, "shard-") as scratch:
        local = scratch / name
        current = seed_from_bucket(url, settings, local, rel)  # claimed, or reused, as in a folder
        try:
            with warnings.catch_warnings(record=True) as said:  # (one thread: the build's)
                warnings.simplefilter("always")
                report = write(local)
        except StoreFormatError as e:  # named as the bucket, not the scratch copy
            raise named_as(e, local, url) from None
        finally:
            for w in said:  # its warnings too (records skipped: "... building <scratch>")
                text = str(w.message).replace(str(local), url)
                warnings.warn_explicit(text, w.category, w.filename, w.lineno)
        if not report.reused:
            upload_shard_folder(local, rel, url, settings, i)
        put_run_mark(url, settings, bid, current)
    return replace(report, dest=url, build_id=bid)


def merge_in_bucket(
    url: str,
    settings: RemoteSettings,
    fmt: str,
    build_id: str | None,
    read: Callable[[Path, str], T],
    commit: Callable[[Path, dict[str, Any] | None, BuildToCommit[T]], str],
    *,
    build: str = "lading build",
    need: Need | None = None,
) -> str:
    """Every kind's merge in a bucket: the bucket mirrored into a scratch folder (``need``: the
    columns the kind's checks read), a snapshot of another kind there refused, the build to
    commit taken on the mirror as in a folder (its shards read by ``read``; ``build``: the
    command that builds a shard, in the messages) and handed to the kind's
    ``commit(mirror, current manifest, build)``; the snapshot's id (the current one where that
    build is committed already, or where another merge committed it first: see
    :func:`commit_remote`). Errors of the checks name the bucket, not the mirror."""
    from lading.stores.building.pending import build_to_commit

    with scratch_folder(settings, "merge-") as root:
        previous = mirror(url, settings, root, need)
        refuse_kind_at(url, previous, fmt)
        try:
            merge = build_to_commit(root, previous, build_id, read, build)
        except (StoreFormatError, SourceError) as e:
            raise named_as(e, root, url) from None
        if isinstance(merge, str):
            return merge
        return commit(root, previous, merge)


def store_needs(record: dict[str, Any]) -> list[str]:
    """What a store's merge reads of a shard: its ids (data and offsets) and the offsets of
    the columns read by id (text, tokens)."""
    columns = record["columns"]
    wanted = [columns["ids"]["data"], columns["ids"]["offsets"]]
    return wanted + [columns[c]["offsets"] for c in ("text", "tokens") if c in columns]


def merge_store_remote(url: str, build_id: str | None, settings: RemoteSettings) -> str:
    """Commit the store shards at ``url`` as its new snapshot, in the bucket; its id."""
    from lading.stores.building.merge import Shard, read_shard
    from lading.stores.layout import FORMAT_NAME

    def commit(root: Path, previous: dict[str, Any] | None, merge: BuildToCommit[Shard]) -> str:
        return commit_store_in_bucket(url, settings, root, previous, merge)

    return merge_in_bucket(
        url, settings, FORMAT_NAME, build_id, read_shard, commit, need=store_needs
    )


def refuse_dropping_duplicates(url: str, duplicates: str) -> None:
    """Refuse ``duplicates='first'`` or ``'last'`` for a store built into ``url``, before any
    row is read: a merge in a bucket keeps every row (keeping one of two would rewrite a
    shard's files, which the bucket's merge never does), so shards built so could never be
    merged there (they were refused at the merge, after a whole array had built them)."""
    if duplicates != "error":
        raise ValueError(
            f"{url}: a store merged in a bucket keeps every row (duplicates='error'), so its "
            f"shards cannot be built with duplicates={duplicates!r}: remove the duplicates from "
            "the source, or build the shards into a folder with that option, merge them there "
            "(lading merge DIR) and upload the store"
        )


def commit_store_in_bucket(
    url: str,
    settings: RemoteSettings,
    root: Path,
    previous: dict[str, Any] | None,
    merge: BuildToCommit[Any],
) -> str:
    """``merge``'s shards (read from the bucket's mirror ``root``, made with
    :func:`store_needs`), in order, committed at ``url`` over its manifest ``previous``: the
    id index and manifest written on the mirror, then PUT, ``meta.json`` last and only over
    ``previous`` (:func:`commit_remote`); the snapshot's id (another merge's of the same build
    where that one committed first)."""
    from lading.disk import BuildContext
    from lading.stores.building.parallel import commit_shards
    from lading.stores.layout import FORMAT_NAME

    refuse_dropping_duplicates(url, merge.recipe["options"].get("duplicates", "error"))
    try:
        with BuildContext(root, FORMAT_NAME, collect=False) as build:
            snapshot = commit_shards(build, merge)
    except DuplicateIdError as e:  # (a bucket's shards cannot be built to keep one)
        raise DuplicateIdError(
            e.found, "Remove the duplicate from the source and build the shards again"
        ) from None
    meta = json.loads((root / META_FILE).read_text())
    for name, info in meta["files"].items():
        if name.startswith(BUILD_PREFIX):  # stand-ins here: the bucket has the bytes
            info.pop("spot_crc32", None)
    from lading.stores.building.pending import builds_record

    meta["builds"] = builds_record(root, previous, merge.bid, merge.passed)
    raw = json.dumps(meta, indent=2, sort_keys=True).encode("utf-8")
    (root / snapshot / "manifest.json").write_bytes(raw)
    made = sorted(p for p in (root / snapshot).rglob("*") if p.is_file())
    files = [(p.relative_to(root).as_posix(), p) for p in made]
    return commit_remote(url, settings, files, raw, previous)
