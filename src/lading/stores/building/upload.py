"""Build a store into object storage: build it locally, upload its files, the manifest last.

``lading.build_store(source, "s3://bucket/prefix/name")`` (and ``lading build``) writes the
store to a temporary directory beside the node cache with the local builder, uploads every
file its ``meta.json`` lists (8 at a time; obstore splits large ones into multipart uploads),
and only then ``meta.json``: a PUT replaces an object atomically, so a reader sees the old
manifest or the new one, and the new one only once every file it names is there. A build
that fails or is killed before that last PUT leaves the old store (or none) in place. The
local copy is deleted after the upload: the bucket is the store.

Deadlines: a PUT of ``n`` bytes (a whole file, its parts and their retries) is cancelled
after ``timeout + n / upload_min_rate`` seconds (:func:`put_deadline`; ``LADING_REMOTE_TIMEOUT``
or ``timeout=``, default 20 s, and ``LADING_UPLOAD_MIN_RATE`` or ``upload_min_rate=``, default
1 MiB/s), so a server that goes half-open after the write probe ends the build in one line
naming the endpoint, the object and both settings, with nothing committed. (The upload
client waited up to 30 minutes before: its timeout is that long so that completing a large
multipart upload on a loaded server may take minutes, which the deadline still allows.)

Under torch.distributed every rank may call it with the same arguments: global rank 0 builds
and uploads while the others wait at a barrier, then all open the snapshot rank 0 committed
(its id shared through the group's key-value store). Rank 0's local build
is its own (:func:`~lading.stores.building.group.alone`): it starts no collective of its own.
"""

from __future__ import annotations

import asyncio
import functools
import json
import secrets
import time
import warnings
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from lading.deadline import DEFAULT_RETRIES
from lading.disk import read_meta
from lading.disk.meta import META_FILE
from lading.disk.snapshot import MANIFEST, SNAP_PREFIX, WRITE_PROBE
from lading.errors import RemoteNotFoundError
from lading.remote.clients import open_client
from lading.remote.fetch import TIMEOUT_ENV, Fetcher
from lading.remote.objects import (
    ObjectClient,
    PermanentError,
    RemoteReadError,
    RemoteWriteError,
    describe,
)
from lading.remote.settings import (
    UPLOAD_RATE_ENV,
    RemoteSettings,
    default_timeout,
    default_upload_rate,
    positive_rate,
)
from lading.stores.building.bucket_gc import collect_garbage
from lading.stores.layout import FORMAT_NAME
from lading.stores.remote.store import RemoteStore
from lading.world import process_group

UPLOADS_AT_ONCE = 8


def build_remote(
    build_local: Callable[..., Any],
    source: Any,
    url: str,
    *args: Any,
    cache: str | None = None,
    cache_bytes: int | str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    format_name: str = FORMAT_NAME,
    opener: Callable[..., Any] = RemoteStore,
    timeout: float | None = None,
    upload_min_rate: int | str | None = None,
    **kwargs: Any,
) -> Any:
    """Build ``source`` with ``build_local(source, local_dir, *args, **kwargs)``, upload it
    to ``url`` (manifest last) and open the snapshot it uploaded there with ``opener(url,
    settings, snapshot)`` (a store by default; ``format_name`` is what the local build makes:
    see the module docstring; ``timeout``, ``upload_min_rate``:
    :class:`~lading.remote.settings.RemoteSettings`). Pinned to it: a build committed right
    after (two builds at once) does not change what this one hands back."""
    if kwargs.get("shard") is not None:
        raise ValueError(
            f"build_store(shard=...) builds on a filesystem every rank sees; into {url} each "
            "worker builds its shard with lading.build_shard(source, url, (i, n)) (lading "
            "build SOURCE URL --shard I/N: uploaded once whole), then one "
            "lading.merge_store(url) (lading merge URL) commits it in the bucket"
        )
    deadlines: dict[str, Any] = {}
    if timeout is not None:
        deadlines["timeout"] = float(timeout)
    if upload_min_rate is not None:
        deadlines["upload_min_rate"] = positive_rate(upload_min_rate)
    settings = RemoteSettings.of(cache, cache_bytes, storage_options, **deadlines)
    kwargs.pop("shared_fs", None)  # the local build is this process's alone
    dist = process_group(min_size=2)
    failure: BaseException | None = None
    snapshot: str | None = None
    if dist is None or dist.get_rank() == 0:
        try:
            snapshot = _build_and_upload(
                build_local, source, url, settings, args, kwargs, format_name
            )
        except BaseException as e:  # reach the barrier first, or the other ranks hang forever
            if dist is None:
                raise
            failure = e
    if dist is not None:
        snapshot = _shared_outcome(dist, url, snapshot, failure)
    return opener(url, settings, snapshot=snapshot)


def _shared_outcome(
    dist: Any, url: str, snapshot: str | None, failure: BaseException | None
) -> str | None:
    """Every rank past the barrier with rank 0's outcome, through the group's key-value store
    (no collective of tensors: a device each backend would pick): the snapshot it
    committed, which every rank then opens pinned; its failure, raised on rank 0 as it was
    and on the others as a :class:`RemoteWriteError` saying it. None where the backend has no
    store (the current snapshot is opened, as before)."""
    try:
        from torch.distributed.distributed_c10d import _get_default_store

        store = _get_default_store()
    except (ImportError, RuntimeError, ValueError):
        store = None
    key = f"lading/build_remote/{url}"
    if store is not None and dist.get_rank() == 0:
        said = f"error:{failure}" if failure is not None else f"snapshot:{snapshot or ''}"
        store.set(key, said)
    dist.barrier()  # (rank 0 has committed, or failed)
    if failure is not None:
        raise failure
    if store is None:
        return snapshot
    said = store.get(key).decode("utf-8")
    if said.startswith("error:"):
        raise RemoteWriteError(
            f"{url}: rank 0's build failed, so nothing was committed: {said[len('error:') :]}"
        )
    return said[len("snapshot:") :] or None


def _build_and_upload(
    build_local: Callable[..., Any],
    source: Any,
    url: str,
    settings: RemoteSettings,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    format_name: str = FORMAT_NAME,
) -> str | None:
    """Check, build and upload (see :func:`build_remote`); the snapshot's id (a fresh build
    is never a version 1 store: always one)."""
    what = "store" if format_name == FORMAT_NAME else "token corpus"
    check_writable(url, settings, what)  # before the source is read: a build may take hours
    from lading.stores.building.bucket_kind import check_bucket_kind
    from lading.stores.building.group import alone
    from lading.stores.building.scratch import owned_folder

    check_bucket_kind(url, settings, format_name)  # a corpus never replaces a store
    with owned_folder(settings.cache, "build-") as scratch:  # a killed build's: swept later
        local = scratch / "store"
        with alone():  # this process's copy: no collective while the others are at the barrier
            build_local(source, local, *args, **kwargs)
        client = open_client(url, settings.backend, settings.options, settings.timeout)
        return upload(
            local, client, format_name, timeout=settings.timeout, min_rate=settings.upload_min_rate
        )


def check_writable(url: str, settings: RemoteSettings, what: str = "store") -> None:
    """Write and delete a small probe object below ``url``, under the read path's timeout
    (``what``: the kind being built, ``"store"`` or ``"token corpus"``, for the message).

    Raises:
        RemoteWriteError: one line naming the bucket or endpoint and the fix (no bucket,
            access denied, nothing answering).
    """
    make = functools.partial(open_client, url, settings.backend, settings.options, settings.timeout)
    fetcher = Fetcher(make, in_flight=1, retries=settings.retries, timeout=settings.timeout)
    key = f"{WRITE_PROBE}{secrets.token_hex(4)}"
    try:
        client = fetcher.client
        fetcher.run(f"PUT {describe(url, key)}", lambda: client.put_async(key, b""))
        fetcher.run(f"DELETE {describe(url, key)}", lambda: client.delete_async(key))
    except (PermanentError, RemoteReadError) as e:
        endpoint = getattr(fetcher._client, "endpoint", "") or "the default endpoint"
        bucket = url.partition("://")[2].split("/", 1)[0]
        why = (
            f"bucket {bucket!r} does not exist at {endpoint}; create it or fix the URL"
            if "bucket does not exist" in str(e)
            else str(e)
        )
        raise RemoteWriteError(f"cannot write the {what} to {url}: {why}") from None
    except Exception as e:  # a client's own error: its first line only
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
        raise RemoteWriteError(f"cannot write the {what} to {url}: {first}") from None
    finally:
        fetcher.close()


def put_deadline(size: int, timeout: float, min_rate: int) -> float:
    """Seconds a PUT of ``size`` bytes may take: ``timeout`` (a request's answer) plus the
    bytes at ``min_rate`` bytes a second (84 s for a 64 MiB part at 20 s and 1 MiB/s)."""
    return timeout + size / min_rate


class _PutFailedError(Exception):
    """A PUT's one-line failure, carried out of the fetch loop (not an ``OSError``: the
    fetcher would call that a failed read and retry it)."""


def upload(
    local: Path,
    client: ObjectClient,
    format_name: str = FORMAT_NAME,
    *,
    timeout: float | None = None,
    min_rate: int | str | None = None,
) -> str | None:
    """Upload the store at ``local`` through ``client``: every file under it (what the
    manifest lists), then the snapshot's manifest and ``meta.json``, stamped as committed
    then over the bucket's current manifest (:func:`~lading.disk.commit.stamped`: the
    snapshot replaced is kept for the grace from its replacement), each PUT within
    :func:`put_deadline` of its bytes; the snapshot's id (None for a version 1 store, which
    has none of its own: uploaded as it is).

    Args:
        format_name: what ``local`` must be (a token corpus is ``lading.tokens``).
        timeout: seconds a request may wait for its answer (default ``$LADING_REMOTE_TIMEOUT``
            or 20).
        min_rate: bytes a second a file's upload reaches at least (``1M``; default
            ``$LADING_UPLOAD_MIN_RATE`` or 1 MiB/s).

    Raises:
        RemoteWriteError: a PUT failed or passed its deadline: one line naming the object,
            the endpoint and the settings; the manifest was not written.
        RemoteReadError: the bucket's current manifest could not be read (its history is
            carried into the new one); nothing was committed.
    """
    from lading.disk.commit import stamped

    read_meta(local, format_name)  # a complete store, or the error says what is wrong
    base = default_timeout() if timeout is None else float(timeout)
    rate = default_upload_rate() if min_rate is None else positive_rate(min_rate)
    raw = (local / META_FILE).read_bytes()
    meta = json.loads(raw)
    snapshot = meta.get("snapshot")
    # (a version 1 store has no snapshot of its own: its manifest goes up as it is)
    versioned = isinstance(snapshot, str) and snapshot.startswith(SNAP_PREFIX)
    manifest = f"{snapshot}/{MANIFEST}" if versioned else None
    names = sorted(
        p.relative_to(local).as_posix()
        for p in local.rglob("*")
        if p.is_file() and p.name != META_FILE and not p.name.startswith(".")
    )
    files: list[tuple[str, bytes | Path, int]] = [
        (name, local / name, (local / name).stat().st_size) for name in names if name != manifest
    ]
    stamped_size = (local / META_FILE).stat().st_size + 65536  # (a history added)
    longest = sum(put_deadline(n, base, rate) for _, _, n in files)
    longest += 2 * put_deadline(stamped_size, base, rate)  # the manifest, then meta.json
    # the fetcher hosts the calls on its loop (and waits for obstore's at exit); its own
    # timeout never fires first: each PUT has its deadline
    fetcher = Fetcher(lambda: client, in_flight=UPLOADS_AT_ONCE, retries=0, timeout=longest + 1)
    try:
        _run(fetcher, lambda: _put_all(client, files, base, rate))
        if manifest is not None:
            raw = stamped(meta, _current(client, base), time.time())
            _run(fetcher, lambda: _put_all(client, [(manifest, raw, len(raw))], base, rate))
        _run(fetcher, lambda: _put_all(client, [(META_FILE, raw, len(raw))], base, rate))
    finally:
        fetcher.close()
    try:  # committed: what a failure here leaves is garbage, not damage
        collect_garbage(client, meta, timeout=base)
    except OSError as e:  # RemoteReadError included
        warnings.warn(f"{client.url} is committed; its old snapshots stay: {e}", stacklevel=2)
    return str(snapshot) if versioned else None


def _current(client: ObjectClient, timeout: float) -> dict[str, Any] | None:
    """The bucket's current manifest (read on the read path, retried), or None where there is
    none or it is no manifest (what the commit replaces: its history's next entry)."""
    fetcher = Fetcher(lambda: client, timeout=timeout)
    try:
        found = json.loads(fetcher.get_object(META_FILE))
    except (RemoteNotFoundError, ValueError):
        return None
    finally:
        fetcher.close()
    return found if isinstance(found, dict) and found.get("snapshot") else None


def put_files(
    client: ObjectClient,
    files: list[tuple[str, bytes | Path, int]],
    *,
    timeout: float | None = None,
    min_rate: int | str | None = None,
) -> None:
    """PUT each ``(key, bytes or local file, size)``, :data:`UPLOADS_AT_ONCE` at a time, each
    within :func:`put_deadline` of its bytes (what :func:`upload` does for a store's files;
    a shard of a parallel build uploads through it, its ``shard.json`` in a second call).

    Raises:
        RemoteWriteError: a PUT failed or passed its deadline (naming object and endpoint).
    """
    base = default_timeout() if timeout is None else float(timeout)
    rate = default_upload_rate() if min_rate is None else positive_rate(min_rate)
    longest = sum(put_deadline(n, base, rate) for _, _, n in files)
    fetcher = Fetcher(lambda: client, in_flight=UPLOADS_AT_ONCE, retries=0, timeout=longest + 1)
    try:
        _run(fetcher, lambda: _put_all(client, files, base, rate))
    finally:
        fetcher.close()


def _run(fetcher: Fetcher, work: Callable[[], Awaitable[None]]) -> None:
    try:
        fetcher.run("upload", work)
    except _PutFailedError as e:
        raise RemoteWriteError(f"{e}") from None


async def _put_all(
    client: ObjectClient, files: list[tuple[str, bytes | Path, int]], base: float, rate: int
) -> None:
    """PUT every file, :data:`UPLOADS_AT_ONCE` at a time; at the first failure the others
    are cancelled (their requests dropped) and it is raised."""
    slots = asyncio.Semaphore(UPLOADS_AT_ONCE)

    async def one(key: str, data: bytes | Path, size: int) -> None:
        async with slots:
            await _put(client, key, data, size, base, rate)

    tasks = [asyncio.ensure_future(one(*f)) for f in files]
    try:
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _put(
    client: ObjectClient, key: str, data: bytes | Path, size: int, base: float, rate: int
) -> None:
    """One PUT within :func:`put_deadline`; its failure as one line (the clients' own errors
    run to 26 lines)."""
    # where the client bounds a request (obstore), a request (a part) may take its bytes'
    # time and one that stalls is sent again, as a read's attempt is: the file's deadline
    # has room for DEFAULT_RETRIES more requests (fsspec bounds none: the file's time only)
    part: int | None = getattr(client, "part_bytes", None)
    request = None if part is None else put_deadline(min(size, part), base, rate)
    deadline = put_deadline(size, base, rate) + DEFAULT_RETRIES * (request or 0.0)
    where = f"PUT {describe(client.url, key)} (endpoint {client.endpoint or 'the default'})"
    unchanged = (  # (a store's, a token corpus's or a shard's files: their manifest last)
        "nothing there is committed (the manifest is written last): run the same command again "
        "once the endpoint takes writes"
    )
    try:
        await asyncio.wait_for(client.upload_async(key, data, deadline, request), deadline)
    except asyncio.TimeoutError:
        raise _PutFailedError(
            f"{where} did not finish within {deadline:.3g}s ({base:g}s, timeout= or env "
            f"{TIMEOUT_ENV}, + {size:,} bytes at {rate:,} bytes/s, upload_min_rate= or env "
            f"{UPLOAD_RATE_ENV}{_retries(request)}): is the endpoint up? On a slow link "
            f"raise either; {unchanged}"
        ) from None
    except Exception as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
        raise _PutFailedError(f"{where} failed: {type(e).__name__}: {first}; {unchanged}") from None


def _retries(request: float | None) -> str:
    if request is None:
        return ""
    return f", + {DEFAULT_RETRIES} retries of a stalled request of {request:.3g}s"
