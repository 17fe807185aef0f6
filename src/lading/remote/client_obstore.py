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
LIST, HEAD, PUT and its conditional forms, multipart upload, DELETE) and the one translation
of obstore's errors into lading's.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from lading.disk.remote import endpoint_of, first_line
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
    sent_more,
    split_url,
    written_at,
)
from lading.threads import register

if TYPE_CHECKING:
    from lading.remote.client_fsspec import FsspecClient

T = TypeVar("T")
SCHEMES: tuple[str, ...] = ("az", "gs", "s3", "s3a")
_FAMILY = {"s3a": "s3"}  # a scheme whose keys and variables are another's
_FSSPEC_PACKAGES = {"s3": "s3fs", "gs": "gcsfs", "az": "adlfs"}  # fsspec's for each scheme
# fsspec-style option names users already pass to `lading stage -o` -> obstore config keys
_ALIASES = {"endpoint_url": "endpoint", "key": "access_key_id", "secret": "secret_access_key"}
# obstore's client options (its ClientConfig), apart from each scheme's store config keys
_CLIENT_KEYS = frozenset(
    [
        "allow_http",
        "allow_invalid_certificates",
        "connect_timeout",
        "default_content_type",
        "default_headers",
        "http1_only",
        "http2_keep_alive_interval",
        "http2_keep_alive_timeout",
        "http2_keep_alive_while_idle",
        "http2_only",
        "pool_idle_timeout",
        "pool_max_idle_per_host",
        "proxy_ca_certificate",
        "proxy_excludes",
        "proxy_url",
        "randomize_addresses",
        "timeout",
        "user_agent",
    ]
)
# each scheme's config keys a message suggests, and what it needs from the environment
_KEYS = {
    "s3": "endpoint, region, access_key_id, secret_access_key, skip_signature",
    "gs": "service_account, service_account_key, application_credentials, base_url, skip_signature",
    "az": "account_name, account_key, sas_key, endpoint, use_emulator, skip_signature",
}
_NEEDS = {
    "s3": "check the AWS variables it read (AWS_REGION, AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, "
    "...), or pass storage_options (region, endpoint, access_key_id, ...)",
    "gs": "check the GOOGLE variables it read (GOOGLE_APPLICATION_CREDENTIALS, "
    "GOOGLE_SERVICE_ACCOUNT, GOOGLE_SERVICE_ACCOUNT_KEY, ...), or pass storage_options "
    "(service_account_key, application_credentials, ...)",
    "az": "set AZURE_STORAGE_ACCOUNT_NAME (with AZURE_STORAGE_ACCOUNT_KEY or "
    "AZURE_STORAGE_SAS_TOKEN), or pass storage_options account_name (with account_key or "
    "sas_key)",
}
# obstore's config keys -> fsspec's storage options, for the fallback of a key obstore cannot
# name (its other keys have no plain fsspec twin: such a client gets no fallback)
_TO_FSSPEC: dict[str, dict[str, str]] = {
    "s3": {
        "endpoint": "endpoint_url",
        "aws_endpoint": "endpoint_url",
        "access_key_id": "key",
        "aws_access_key_id": "key",
        "secret_access_key": "secret",
        "aws_secret_access_key": "secret",
        "session_token": "token",
        "aws_session_token": "token",
        "token": "token",
        "region": "region",
        "aws_region": "region",
        "skip_signature": "anon",
        "aws_skip_signature": "anon",
    },
    "gs": {
        "service_account": "token",
        "service_account_path": "token",
        "application_credentials": "token",
        "skip_signature": "anon",
    },
    "az": {"account_name": "account_name", "account_key": "account_key", "sas_key": "sas_token"},
}
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
        given = _client_options(config)  # (moved out of config)
        self.endpoint = endpoint_of(self.url, config, "obstore")  # the scheme's own variables
        client: dict[str, Any] = {"allow_http": self.endpoint.startswith("http://"), **given}
        self._timeout = timeout
        self._fsspec: FsspecClient | None = None  # made when needed: see _fallback
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
        except BaseException as e:  # a key its Rust side panics on: not an Exception
            if type(e).__name__ != "PanicException":
                raise
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
            if _unnameable(e) is not None:
                return await self._read_through(e, key, etag).get_range(key, start, end, etag)
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
            if len(ranges) == 1:
                return [await self.get_range(key, ranges[0][0], ranges[0][1], etag)]
            rest = self._settled(  # (first: where it raises, no coroutine is left unawaited)
                obstore.get_ranges_async(
                    self._store,
                    key,
                    starts=[a for a, _ in ranges[1:]],
                    ends=[b for _, b in ranges[1:]],
                    coalesce=0,
                )
            )
            pinned = self.get_range(key, ranges[0][0], ranges[0][1], etag)
            first, others = await asyncio.gather(pinned, rest)
            return [first, *(bytes(b) for b in others)]
        except PermanentError:
            raise
        except Exception as e:
            if _unnameable(e) is not None:
                other = self._read_through(e, key, etag)
                sent_more(len(ranges))
                reads = (other.get_range(key, a, b, etag) for a, b in ranges)
                return list(await asyncio.gather(*reads))
            if type(e).__name__ == "RustPanic":  # obstore slicing touching ranges out of a
                # reply shorter than asked panics; a range at a time, a short one is named
                sent_more(len(ranges))
                reads = (self.get_range(key, a, b, etag) for a, b in ranges)
                return list(await asyncio.gather(*reads))
            raise self._error(e, key, pinned=etag is not None) from e

    async def get_async(self, key: str) -> bytes:
        """The whole object ``key`` (the read path: no retries of obstore's own)."""
        import obstore

        try:
            result = await self._settled(obstore.get_async(self._store, key))
            return bytes(await self._settled(result.bytes_async()))
        except Exception as e:
            if _unnameable(e) is not None:
                return await self._fallback(e, "read", key).get_async(key)
            raise self._error(e, key) from e

    async def list_async(self, prefix: str = "") -> dict[str, ObjectInfo]:
        """:meth:`list` on the read path (no retries of obstore's own)."""
        import obstore

        try:
            metas = await self._settled(obstore.list(self._store, prefix or None).collect_async())
        except Exception as e:
            if _unnameable(e) is None:
                raise self._error(e, prefix) from e
            return await self._fallback(e, "list", prefix).list_async(prefix)
        return {m["path"]: _info(m) for m in metas}

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

    async def replace_async(self, key: str, data: bytes, etag: str) -> bool:
        """The conditional PUT (``If-Match: etag``): obstore's update mode, for ``s3://``
        only (checked against S3 and moto). Its Azure and GCS stores are not asked: GCS
        matches a generation, not an ETag, and neither was tried here."""
        import obstore
        from obstore.exceptions import NotFoundError, NotSupportedError, PreconditionError

        scheme = split_url(self.url)[0]
        if _FAMILY.get(scheme, scheme) != "s3":
            raise NotImplementedError(f"no conditional PUT (If-Match) of {scheme}:// here")
        try:
            put = obstore.put_async(self._store, key, data, mode={"e_tag": etag})
            await self._settled(put)
        except (PreconditionError, NotFoundError):  # another version (412), or none (404)
            return False
        except Exception as e:
            if isinstance(e, NotSupportedError) or not_implemented(e):
                raise NotImplementedError(f"{self.endpoint}: {first_line(e)}") from None
            raise self._error(e, key) from e
        return True

    async def head_async(self, key: str) -> ObjectInfo | None:
        """Size and ETag of ``key`` (the read path: no retries of obstore's own), or None."""
        import obstore
        from obstore.exceptions import NotFoundError

        try:
            meta = await self._settled(obstore.head_async(self._store, key))
        except (NotFoundError, FileNotFoundError):
            return None
        except Exception as e:
            raise self._error(e, key) from e
        return _info(meta)

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

    def _fallback(self, error: Exception, doing: str, key: str) -> FsspecClient:
        """fsspec's client of this URL, for a call obstore cannot make: one naming, or a
        listing holding, a key with an empty path segment (``logs//run.txt``) or a ``.`` or
        ``..`` one. S3 stores such keys, and obstore's paths cannot hold them: its whole
        LIST failed (one stray object made every listing of its prefix fail), where fsspec
        lists and reads them as any other.

        Raises:
            PermanentError: fsspec cannot reach this URL here (s3fs, gcsfs or adlfs not
                installed) or the options have no fsspec twin: names the key and the fix.
        """
        if self._fsspec is None:
            from lading.remote.client_fsspec import FsspecClient

            scheme, _ = split_url(self.url)
            names = _TO_FSSPEC[_FAMILY.get(scheme, scheme)]
            try:
                unknown = sorted(k for k in self._config if k not in names)
                if unknown:
                    raise ValueError(f"the options {unknown} have no fsspec twin here")
                options = _fsspec_options(scheme, {names[k]: v for k, v in self._config.items()})
                self._fsspec = FsspecClient(self.url, options, self._timeout)
            except ValueError as e:
                raise _unnameable_error(self.url, doing, key, error, str(e)) from None
            except ImportError:
                package = _FSSPEC_PACKAGES[_FAMILY.get(scheme, scheme)]
                why = f"{package} is not installed (pip install {package}, or 'lading[remote]')"
                raise _unnameable_error(self.url, doing, key, error, why) from None
        return self._fsspec

    def _read_through(self, error: Exception, key: str, etag: str | None) -> FsspecClient:
        """:meth:`_fallback` for a ranged read, refused where it is pinned (``etag``) and
        fsspec's filesystem cannot send the pin (gcsfs, adlfs: only s3fs does): this client
        counts its reads as pinned, and an unpinned one would be trusted as checked."""
        other = self._fallback(error, "read", key)
        if etag is not None and not other.pins:
            why = f"{type(other.fs).__name__} cannot pin a read to the object's ETag"
            raise _unnameable_error(self.url, "read", key, error, why)
        return other

    def __repr__(self) -> str:
        return f"ObstoreClient({self.url!r}, endpoint={self.endpoint!r})"  # never the options

    def get(self, key: str) -> bytes:
        import obstore

        try:
            return bytes(obstore.get(self._admin, key).bytes())
        except Exception as e:
            if _unnameable(e) is not None:
                return self._fallback(e, "read", key).get(key)
            raise self._error(e, key) from e

    def put(self, key: str, data: bytes | Path) -> None:
        import obstore

        obstore.put(self._admin, key, data, chunk_size=UPLOAD_CHUNK)

    def list(self, prefix: str = "") -> dict[str, ObjectInfo]:
        import obstore

        found: dict[str, ObjectInfo] = {}
        try:
            for chunk in obstore.list(self._admin, prefix or None):
                for meta in chunk:
                    found[meta["path"]] = _info(meta)
        except Exception as e:
            if _unnameable(e) is None:
                raise
            return self._fallback(e, "list", prefix).list(prefix)
        return found

    def head(self, key: str) -> ObjectInfo | None:
        import obstore
        from obstore.exceptions import NotFoundError

        try:
            meta = obstore.head(self._admin, key)
        except (NotFoundError, FileNotFoundError):
            return None
        return _info(meta)

    def delete(self, key: str) -> None:
        import obstore

        obstore.delete(self._admin, key)


def _info(meta: Mapping[str, Any]) -> ObjectInfo:
    """A listing's or a HEAD's entry: size, ETag and time of last write."""
    return ObjectInfo(
        int(meta["size"]), meta.get("e_tag"), written=written_at(meta.get("last_modified"))
    )


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


def _fsspec_options(scheme: str, options: dict[str, Any]) -> dict[str, Any]:
    """fsspec's storage options from those :data:`_TO_FSSPEC` renamed (a region and a
    ``skip_signature`` of s3:// go elsewhere there; gs://'s as ``token="anon"``)."""
    anon = str(options.pop("anon", "false")).lower() in ("true", "1", "yes")
    if scheme.startswith("s3"):
        region = options.pop("region", None)
        if region is not None:
            options["client_kwargs"] = {"region_name": region}
        if anon:
            options["anon"] = True
    elif anon:
        options["token"] = "anon"
    return options


def _unnameable(error: Exception) -> str | None:
    """The path of an object obstore cannot name, from its error (a listing's
    ``InvalidPathError``, a call's "Could not parse path"), or None for another error."""
    from obstore.exceptions import InvalidPathError

    text = str(error)
    if not isinstance(error, InvalidPathError) and "Could not parse path" not in text:
        return None
    found = re.search(r'Path "([^"]*)"', text)
    return found.group(1) if found else ""


def _unnameable_error(url: str, doing: str, key: str, error: Exception, why: str) -> PermanentError:
    """The one line of a call obstore cannot make (a key it cannot name) that fsspec cannot
    make instead (``why``): names the object and the fixes; never retried."""
    scheme, rest = split_url(url)
    # a listing's error names the path from the bucket (the URL's prefix in it), a read's the key
    path = _unnameable(error) or key
    where = f"{scheme}://{rest.split('/', 1)[0]}/{path}" if doing == "list" else f"{url}/{key}"
    call = f"LIST {url}/{key}".rstrip("/") if doing == "list" else f"GET {url}/{key}"
    return PermanentError(
        f"{call}: obstore cannot name the object {where} ({first_line(error)}), and fsspec cannot "
        f"{doing} it instead: {why}. Rename that object (copy it to a key without '//', '.' "
        "or '..' segments and delete it) or move it out of this prefix"
    )


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
    first = first_line(error)
    if _unnameable(error) is not None:  # a key obstore cannot name: no retry names it either
        return PermanentError(
            f"{url}/{key}: obstore cannot name this key ({first}); use a key without '//', "
            "'.' or '..' segments"
        )
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


def _client_options(config: dict[str, Any]) -> dict[str, Any]:
    """The HTTP client's options among a store's ``config`` (removed from it): obstore takes
    them apart, and one among the store's keys (``allow_http``, ``aws_allow_http``) panicked
    in its Rust side. Named bare or with the scheme's prefix, as its variables are."""
    found = {}
    for key in list(config):
        bare = key.lower().removeprefix("aws_").removeprefix("google_").removeprefix("azure_")
        if bare in _CLIENT_KEYS:
            found[bare] = config.pop(key)
    return found


def _bad_option(error: BaseException, url: str, options: Mapping[str, Any] | None) -> Exception:
    """obstore's refusal to make a client, as one line: with options given, naming them and
    the scheme's config keys; with none, what the scheme needs from the environment."""
    first = first_line(error).rstrip(".")
    scheme = _FAMILY.get(split_url(url)[0], split_url(url)[0])
    if not options:
        return RemoteURLError(
            f"{url}: obstore could not make a client from the environment (no client options "
            f"were given): {first}; {_NEEDS[scheme]}"
        )
    aliases = f" or fsspec's {sorted(_ALIASES)}" if scheme == "s3" else ""
    return RemoteURLError(
        f"{url}: obstore refused the client options {sorted(options)}: {first}. Use obstore's "
        f"config keys for {scheme}:// (e.g. {_KEYS[scheme]}){aliases}"
    )
