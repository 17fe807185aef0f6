"""The obstore backend of :class:`~lading.remote.objects.ObjectClient` (Rust, async).

``get_range`` is one ``await`` of ``obstore.get_range_async`` (or ``get_async`` with a range
and ``If-Match`` when the object's ETag is pinned), so one event-loop thread keeps hundreds of
GETs in flight. obstore's own retries are off (``max_retries: 0``): lading's fetcher retries,
so every request sent is one GET counted.

Fork: obstore runs its requests on a tokio runtime whose threads a ``fork()`` does not copy; a
forked child of a process that used obstore hangs on its first request (seen here: a GET in the
child never returned). :func:`usable_here` says whether this process may use it: the rule at
fork is :mod:`lading.threads`'s, as every thread's of the plane.

Over 400 lines, as one idea: one class, each call of the client (ranged and whole GETs,
LIST, PUT, multipart upload, DELETE) and the one translation of obstore's errors into
lading's.
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

from lading.disk.remote import public_endpoint as public_endpoint  # (fsspec's uses it too)
from lading.errors import RemoteURLError, missing_package
from lading.remote.objects import (
    ObjectInfo,
    PermanentError,
    changed,
    denied,
    no_bucket,
    no_object,
    not_implemented,
    refused,
    split_url,
)
from lading.threads import register

T = TypeVar("T")
SCHEMES: tuple[str, ...] = ("az", "gs", "s3", "s3a")
# fsspec-style option names users already pass to `lading stage -o` -> obstore config keys
_ALIASES = {"endpoint_url": "endpoint", "key": "access_key_id", "secret": "secret_access_key"}
_ENDPOINT_VARS = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT")
UPLOAD_CHUNK = 64 << 20  # bytes a part of a multipart upload: 20 parts for 1.2 GB, not 240


class _Runtime:
    """obstore's runtime in this process: started (by a first client), or lost at a fork."""

    def __init__(self) -> None:
        self.started = self.lost = False
        register(self, "fetch")

    def forked(self) -> None:
        self.lost = self.lost or self.started  # its threads stayed in the parent

    def close(self) -> None:
        """Nothing to end: the runtime's requests end by their own timeouts."""


_RUNTIME = _Runtime()


def usable_here() -> bool:
    """False in a process forked from one that already used obstore (it would hang)."""
    return not _RUNTIME.lost


class ObstoreClient:
    """Objects below ``url`` through obstore; ``options`` are obstore config keys (fsspec's
    ``endpoint_url``, ``key``, ``secret`` are accepted too)."""

    backend = "obstore"

    def __init__(
        self, url: str, options: Mapping[str, Any] | None = None, timeout: float | None = None
    ) -> None:
        try:
            import obstore  # noqa: F401  # ImportError before any state changes
            from obstore.store import from_url
        except ImportError:
            raise missing_package(f"backend='obstore' for {url}", "obstore", "remote") from None

        if not usable_here():
            raise RuntimeError(
                "obstore cannot be used in a process forked from one that used it (its "
                "runtime's threads were not forked); use backend='fsspec' here"
            )
        scheme, _ = split_url(url)
        if scheme not in SCHEMES:
            raise ValueError(f"obstore handles {sorted(SCHEMES)}, not {scheme}:// ({url})")
        self.url = url.rstrip("/")
        self._pending: set[asyncio.Future[Any]] = set()  # obstore calls not yet ended
        config = {_ALIASES.get(k, k): v for k, v in (options or {}).items()}
        endpoint = str(config.get("endpoint") or _env_endpoint())
        self.endpoint = public_endpoint(endpoint)
        client: dict[str, Any] = {"allow_http": endpoint.startswith("http://")}
        _RUNTIME.started = True
        # the read path (ranged GETs, the manifest, the listing): no retries of obstore's own
        # (lading's fetcher retries and counts), and each request ends by itself within the
        # fetcher's timeout, so a half-open server leaves no request running on the runtime
        reader = dict(client)
        if timeout is not None:
            reader["timeout"] = f"{max(1, int(timeout * 1000))}ms"
            reader["connect_timeout"] = f"{max(1, int(min(timeout, 10.0) * 1000))}ms"
        try:
            self._store = from_url(  # type: ignore[call-overload]  # config keys vary by scheme
                self.url, client_options=reader, retry_config={"max_retries": 0}, **config
            )
        except Exception as e:  # an unknown key: obstore's text ends in a Rust debug dump
            raise _bad_option(e, self.url, options) from None
        # the sync calls (put, get, list, head, delete: tools, tests, the bench's publish)
        # keep obstore's own retries (a multipart upload of a 1.2 GB file whose one part
        # failed once was aborted whole without them) and wait long: completing that upload
        # took the loaded local S3 over obstore's 30 s, and the retried complete found the
        # upload gone. A build's upload does not use them: see upload_async
        admin = {**client, "timeout": "30min"}
        self._admin = from_url(self.url, client_options=admin, **config)  # type: ignore[call-overload]
        self._client_options, self._config = client, config  # for _uploader (never printed)
        self._uploaders: dict[tuple[float, float], Any] = {}  # bounds (s) -> store (42 ms)

    async def get_range(self, key: str, start: int, end: int, etag: str | None = None) -> bytes:
        import obstore

        try:
            if etag is None:
                data = await self._settled(
                    obstore.get_range_async(self._store, key, start=start, end=end)
                )
                return bytes(data)
            result = await self._settled(
                obstore.get_async(
                    self._store, key, options={"range": (start, end), "if_match": etag}
                )
            )
            return bytes(await self._settled(result.bytes_async()))
        except Exception as e:
            raise self._error(e, key, pinned=etag is not None) from e

    async def get_ranges(
        self, key: str, ranges: list[tuple[int, int]], etag: str | None = None
    ) -> list[bytes]:
        """Bytes of each ``(start, end)`` of ``key``, one GET a range but where ranges touch
        or overlap (obstore sends those as one request even at ``coalesce=0``: no byte between
        ranges is ever fetched; :func:`lading.remote.fetch.requests_sent` counts them), run
        side by side in Rust for one ``await``. ``get_ranges`` cannot send
        ``If-Match``, so with ``etag`` the first range goes as its own pinned GET beside the
        others: every call checks the object's version once."""
        import obstore

        try:
            if etag is None:
                found = await self._settled(
                    obstore.get_ranges_async(
                        self._store,
                        key,
                        starts=[a for a, _ in ranges],
                        ends=[b for _, b in ranges],
                        coalesce=0,
                    )
                )
                return [bytes(b) for b in found]
            pinned = self.get_range(key, ranges[0][0], ranges[0][1], etag)
            if len(ranges) == 1:
                return [await pinned]
            rest = self._settled(
                obstore.get_ranges_async(
                    self._store,
                    key,
                    starts=[a for a, _ in ranges[1:]],
                    ends=[b for _, b in ranges[1:]],
                    coalesce=0,
                )
            )
            first, others = await asyncio.gather(pinned, rest)
            return [first, *(bytes(b) for b in others)]
        except PermanentError:
            raise
        except Exception as e:
            raise self._error(e, key, pinned=etag is not None) from e

    async def get_async(self, key: str) -> bytes:
        """The whole object ``key`` (the read path: no retries of obstore's own)."""
        import obstore

        try:
            result = await self._settled(obstore.get_async(self._store, key))
            return bytes(await self._settled(result.bytes_async()))
        except Exception as e:
            raise self._error(e, key) from e

    async def list_async(self, prefix: str = "") -> dict[str, ObjectInfo]:
        """:meth:`list` on the read path (no retries of obstore's own)."""
        import obstore

        try:
            metas = await self._settled(obstore.list(self._store, prefix or None).collect_async())
        except Exception as e:
            raise self._error(e, prefix) from e
        return {m["path"]: ObjectInfo(int(m["size"]), m.get("e_tag")) for m in metas}

    async def put_async(self, key: str, data: bytes) -> None:
        import obstore

        try:
            await self._settled(obstore.put_async(self._store, key, data))
        except Exception as e:
            raise self._error(e, key) from e

    async def create_async(self, key: str, data: bytes) -> bool:
        import obstore
        from obstore.exceptions import AlreadyExistsError

        try:
            await self._settled(obstore.put_async(self._store, key, data, mode="create"))
        except AlreadyExistsError:
            return False
        except Exception as e:
            if not_implemented(e):  # a server without conditional writes
                raise NotImplementedError(f"{self.endpoint}: {e}") from None
            raise self._error(e, key) from e
        return True

    @property
    def part_bytes(self) -> int:
        """Bytes a request of an upload carries at most (a part of a multipart upload)."""
        return UPLOAD_CHUNK

    async def upload_async(
        self, key: str, data: bytes | Path, timeout: float, request: float | None = None
    ) -> None:
        """Write object ``key`` from bytes or a file (a multipart upload of
        :data:`UPLOAD_CHUNK` parts above that size), for a caller that waits ``timeout``
        seconds and then cancels the call: the cancel reaches Rust, which drops the requests
        (none runs on). obstore's own retries stay on (a reset part is sent again, not the
        whole file), within ``timeout`` rounded up to a power of two seconds
        (:meth:`_uploader`: a backstop should the cancel never come); each request may take
        ``request`` seconds (rounded up likewise; default ``timeout``): a part that stalls is
        given up and sent again, as a read's attempt is.

        The one obstore call lading cancels (a read is left to end by itself, see
        :meth:`_settled`): an upload may be minutes from its own end. Rust sees the cancel
        within a millisecond and takes the GIL once more to see it, long before the
        fetcher's ``close`` (whose ``settle`` waits 20 ms with the GIL released) lets the
        process exit: 0 aborts in 40 cold ``lading build`` runs cancelled this way."""
        import obstore

        store = self._uploader(timeout, request)
        call = asyncio.ensure_future(obstore.put_async(store, key, data, chunk_size=UPLOAD_CHUNK))
        self._pending.add(call)  # drain() waits for it at exit; a cancel ends it at once
        call.add_done_callback(_forget(self._pending))
        try:
            await call  # not shielded: the caller's timeout cancels the upload itself
        except Exception as e:
            raise self._error(e, key) from e

    def _uploader(self, timeout: float, request: float | None = None) -> Any:
        """The store uploads of ``timeout`` seconds go through: each request (a PUT, a part,
        the completion of a multipart upload) within ``request`` (default ``timeout``) and
        obstore's retries within ``timeout``, each rounded up to a power of two (few stores
        a client: making one takes 42 ms)."""
        from obstore.store import from_url

        bound = _pow2(timeout)
        each = min(bound, _pow2(request if request is not None else timeout))
        if (bound, each) not in self._uploaders:
            options = {
                **self._client_options,
                "timeout": f"{int(each * 1000)}ms",
                "connect_timeout": f"{int(min(each, 10.0) * 1000)}ms",
            }
            retry = {"max_retries": 10, "retry_timeout": timedelta(seconds=bound)}
            self._uploaders[bound, each] = from_url(  # type: ignore[call-overload]
                self.url, client_options=options, retry_config=retry, **self._config
            )
        return self._uploaders[bound, each]

    async def delete_async(self, key: str) -> None:
        """Remove object ``key`` (absent is fine) on the read path: one attempt within the
        client's timeout, retried by the fetcher."""
        import obstore

        try:
            await self._settled(obstore.delete_async(self._store, key))
        except Exception as e:
            raise self._error(e, key) from e

    async def _settled(self, call: Awaitable[T]) -> T:
        """Await an obstore call without ever cancelling it: a caller that gives up (a
        timeout) stops waiting, the call runs on to its own end (the client's timeout) and
        is counted in :meth:`drain` until then. A call Rust completes after the interpreter
        began to exit aborts the process (it takes the GIL from a tokio thread: SIGABRT,
        "Fatal Python error: Aborted", seen in cold ``lading get`` runs)."""
        future = asyncio.ensure_future(call)
        self._pending.add(future)
        future.add_done_callback(_forget(self._pending))
        return await asyncio.shield(future)

    def drain(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for every obstore call this client started to end
        (call from any thread but its loop's, while that loop runs); whether they all did."""
        deadline = time.monotonic() + timeout
        while any(not f.done() for f in list(self._pending)):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)
        return True

    def _error(self, error: Exception, key: str, pinned: bool = False) -> Exception:
        return _translate(error, self.url, key, self.endpoint, pinned)

    def __repr__(self) -> str:
        return f"ObstoreClient({self.url!r}, endpoint={self.endpoint!r})"  # never the options

    def get(self, key: str) -> bytes:
        import obstore

        try:
            return bytes(obstore.get(self._admin, key).bytes())
        except Exception as e:
            raise self._error(e, key) from e

    def put(self, key: str, data: bytes | Path) -> None:
        import obstore

        obstore.put(self._admin, key, data, chunk_size=UPLOAD_CHUNK)

    def list(self, prefix: str = "") -> dict[str, ObjectInfo]:
        import obstore

        found: dict[str, ObjectInfo] = {}
        for chunk in obstore.list(self._admin, prefix or None):
            for meta in chunk:
                found[meta["path"]] = ObjectInfo(int(meta["size"]), meta.get("e_tag"))
        return found

    def head(self, key: str) -> ObjectInfo | None:
        import obstore
        from obstore.exceptions import NotFoundError

        try:
            meta = obstore.head(self._admin, key)
        except (NotFoundError, FileNotFoundError):
            return None
        return ObjectInfo(int(meta["size"]), meta.get("e_tag"))

    def delete(self, key: str) -> None:
        import obstore

        obstore.delete(self._admin, key)


def _pow2(seconds: float) -> float:
    return float(2 ** math.ceil(math.log2(max(seconds, 0.25))))


def _forget(pending: set[asyncio.Future[Any]]) -> Callable[[asyncio.Future[Any]], None]:
    """A done-callback: drop the call from ``pending`` and retrieve its outcome (a call
    nobody awaits any more would log "exception was never retrieved")."""

    def done(future: asyncio.Future[Any]) -> None:
        pending.discard(future)
        if not future.cancelled():
            future.exception()

    return done


def _env_endpoint() -> str:
    return next((os.environ[v] for v in _ENDPOINT_VARS if os.environ.get(v)), "")


def _translate(
    error: Exception, url: str, key: str, endpoint: str = "", pinned: bool = False
) -> Exception:
    """A failure retrying cannot fix (no bucket, no object, access denied, no credentials,
    another version) as one of :class:`~lading.errors.RemotePermanentError`'s family; the rest
    as ``OSError`` (retried). Only the first line of obstore's text is kept. ``pinned``: the
    read named the version the snapshot lists, so a missing object was deleted since."""
    from obstore.exceptions import (
        NotFoundError,
        PermissionDeniedError,
        PreconditionError,
        UnauthenticatedError,
    )

    if isinstance(error, PermanentError):
        return error
    text = str(error)
    first = (text.strip().splitlines() or [type(error).__name__])[0][:300]
    if "NoSuchBucket" in text:
        return no_bucket(url, endpoint)
    if isinstance(error, (PermissionDeniedError, UnauthenticatedError)) or refused(text):
        return denied(url, key, endpoint, first)
    if any(m in text for m in ("169.254.169.254", "/latest/api/token")):  # no keys found
        return denied(url, key, endpoint, first)
    if isinstance(error, (NotFoundError, FileNotFoundError)):
        return changed(url, key, endpoint) if pinned else no_object(url, key, endpoint)
    if isinstance(error, PreconditionError):
        return changed(url, key, endpoint, "its ETag changed")
    return OSError(f"{type(error).__name__}: {first}")


def _bad_option(error: Exception, url: str, options: Mapping[str, Any] | None) -> Exception:
    """obstore's refusal of a client option as one line naming the key and the fix."""
    first = (str(error).strip().splitlines() or [type(error).__name__])[0][:300]
    given = sorted(options or {})
    return RemoteURLError(
        f"{url}: obstore refused the client options {given}: {first} Use obstore's config "
        "keys (e.g. endpoint, region, access_key_id, secret_access_key, skip_signature) or "
        f"fsspec's {sorted(_ALIASES)}"
    )
