"""Build a store into object storage: build it locally, upload its files, the manifest last.

``lading.build_store(source, "s3://bucket/prefix/name")`` (and ``lading build``) writes the
store to a temporary directory beside the node cache with the local builder, uploads every
file its ``meta.json`` lists (8 at a time; obstore splits large ones into multipart uploads),
and only then ``meta.json``: a PUT replaces an object atomically, so a reader sees the old
manifest or the new one, and the new one only once every file it names is there. A build
that fails or is killed before that last PUT leaves the old store (or none) in place. The
local copy is deleted after the upload: the bucket is the store.

Under torch.distributed every rank may call it with the same arguments: global rank 0 builds
and uploads while the others wait at a barrier, then all open the store.
"""

from __future__ import annotations

import calendar
import contextlib
import functools
import itertools
import json
import secrets
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from lading.disk import read_meta
from lading.disk.commit import units
from lading.disk.meta import META_FILE
from lading.disk.snapshot import MANIFEST, SNAP_PREFIX, grace_seconds
from lading.stores.layout import FORMAT_NAME
from lading.stores.remote.clients import open_client
from lading.stores.remote.fetch import Fetcher
from lading.stores.remote.objects import (
    ObjectClient,
    PermanentError,
    RemoteReadError,
    RemoteWriteError,
    describe,
)
from lading.stores.remote.settings import RemoteSettings
from lading.stores.remote.store import RemoteStore
from lading.world import process_group

UPLOADS_AT_ONCE = 8
_PROBE = ".lading-write-probe-"  # the object a build writes and deletes before it starts


def build_remote(
    build_local: Callable[..., Any],
    source: Any,
    url: str,
    *args: Any,
    cache: str | None = None,
    cache_bytes: int | str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    format_name: str = FORMAT_NAME,
    opener: Callable[[str, RemoteSettings], Any] = RemoteStore,
    **kwargs: Any,
) -> Any:
    """Build ``source`` with ``build_local(source, local_dir, *args, **kwargs)``, upload it
    to ``url`` (manifest last) and open it there with ``opener(url, settings)`` (a store by
    default; ``format_name`` is what the local build makes: see the module docstring)."""
    if kwargs.get("shard") is not None:
        raise ValueError(
            f"a parallel build (shard=) straight into {url} is not supported yet: build the "
            "shards into a folder and merge them there (lading build --shard I/N, lading "
            "merge), then upload the store with lading.stores.building.upload.upload(folder, "
            "lading.stores.remote.clients.open_client(url)), the manifest last"
        )
    settings = RemoteSettings.of(cache, cache_bytes, storage_options)
    kwargs.pop("shared_fs", None)  # the local build is this process's alone
    dist = process_group(min_size=2)
    failure: BaseException | None = None
    if dist is None or dist.get_rank() == 0:
        try:
            _build_and_upload(build_local, source, url, settings, args, kwargs, format_name)
        except BaseException as e:  # reach the barrier first, or the other ranks hang forever
            if dist is None:
                raise
            failure = e
    if dist is not None:
        dist.barrier()
        if failure is not None:
            raise failure
    return opener(url, settings)


def _build_and_upload(
    build_local: Callable[..., Any],
    source: Any,
    url: str,
    settings: RemoteSettings,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    format_name: str = FORMAT_NAME,
) -> None:
    check_writable(url, settings)  # before the source is read: a build may take hours
    settings.cache.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="build-", dir=settings.cache))
    try:
        local = scratch / "store"
        build_local(source, local, *args, **kwargs)
        upload(local, open_client(url, settings.backend, settings.options), format_name)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def check_writable(url: str, settings: RemoteSettings) -> None:
    """Write and delete a small probe object below ``url``, under the read path's timeout.

    Raises:
        RemoteWriteError: one line naming the bucket or endpoint and the fix (no bucket,
            access denied, nothing answering).
    """
    make = functools.partial(open_client, url, settings.backend, settings.options, settings.timeout)
    fetcher = Fetcher(make, in_flight=1, retries=settings.retries, timeout=settings.timeout)
    key = f"{_PROBE}{secrets.token_hex(4)}"
    try:
        client = fetcher.client
        fetcher.run(f"PUT {describe(url, key)}", lambda: client.put_async(key, b""))
        client.delete(key)
    except (PermanentError, RemoteReadError) as e:
        endpoint = getattr(fetcher._client, "endpoint", "") or "the default endpoint"
        bucket = url.partition("://")[2].split("/", 1)[0]
        why = (
            f"bucket {bucket!r} does not exist at {endpoint}; create it or fix the URL"
            if "bucket does not exist" in str(e)
            else str(e)
        )
        raise RemoteWriteError(f"cannot write the store to {url}: {why}") from None
    except Exception as e:  # a client's own error: its first line only
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
        raise RemoteWriteError(f"cannot write the store to {url}: {first}") from None
    finally:
        fetcher.close()


def upload(local: Path, client: ObjectClient, format_name: str = FORMAT_NAME) -> None:
    """Upload the store at ``local`` through ``client``: every file under it (what the
    manifest lists, and any per-snapshot manifest), then ``meta.json``. ``format_name``: what
    ``local`` must be (a token corpus is ``lading.tokens``)."""
    read_meta(local, format_name)  # a complete store, or the error says what is wrong
    names = sorted(
        p.relative_to(local).as_posix()
        for p in local.rglob("*")
        if p.is_file() and p.name != META_FILE and not p.name.startswith(".")
    )
    with ThreadPoolExecutor(UPLOADS_AT_ONCE, thread_name_prefix="lading-upload") as pool:
        for done in pool.map(lambda name: _put(client, name, local / name), names):
            del done
    raw = (local / META_FILE).read_bytes()
    _put(client, META_FILE, raw)  # the commit
    collect_garbage(client, json.loads(raw))


def _put(client: ObjectClient, key: str, data: bytes | Path) -> None:
    """``client.put``, its failure as one line (the clients' own errors run to 26 lines)."""
    try:
        client.put(key, data)
    except Exception as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
        raise RemoteWriteError(
            f"PUT {describe(client.url, key)} failed: {type(e).__name__}: {first}; the store "
            "there is unchanged (its manifest is written last)"
        ) from None


def collect_garbage(client: ObjectClient, current: dict[str, Any]) -> list[str]:
    """Delete the objects of ``snap-`` folders no snapshot within the grace still uses; the
    folders removed. A snapshot was replaced when the next one was committed (its manifest's
    ``committed_at``; its id's UTC time where that is missing)."""
    listing = client.list()
    manifests: dict[str, dict[str, Any]] = {}
    for key in listing:
        snap, _, rest = key.partition("/")
        if snap.startswith(SNAP_PREFIX) and rest == MANIFEST:
            with contextlib.suppress(Exception):  # unreadable: judged by its id's time
                manifests[snap] = json.loads(client.get(key))
    snaps = {k.split("/", 1)[0] for k in listing if k.startswith(SNAP_PREFIX)}

    def committed(snap: str) -> float:
        return float(manifests.get(snap, {}).get("committed_at") or _time(snap))

    order = sorted(snaps, key=committed)
    now, grace = time.time(), grace_seconds()
    keep = {str(current.get("snapshot"))}
    for older, newer in itertools.pairwise(order):
        if now - committed(newer) < grace:
            keep.add(older)
    used = set(units(current))
    for snap in keep:
        used |= units(manifests.get(snap, {}))
    gone = snaps - keep - used  # build- folders (parallel builds) are left alone
    doomed = [k for k in listing if k.split("/", 1)[0] in gone]
    doomed.sort(key=lambda k: not k.endswith(MANIFEST))  # a manifest first: pinned readers hear
    with ThreadPoolExecutor(UPLOADS_AT_ONCE, thread_name_prefix="lading-gc") as pool:
        list(pool.map(client.delete, doomed))
    return sorted(gone)


def _time(snapshot: str) -> float:
    """The UTC time in a snapshot id (``snap-20261126T061759Z-f2041710``); 0 if none."""
    try:
        stamp = snapshot.removeprefix(SNAP_PREFIX).split("-", 1)[0]
        return float(calendar.timegm(time.strptime(stamp, "%Y%m%dT%H%M%SZ")))
    except ValueError:
        return 0.0
