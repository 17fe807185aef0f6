"""The fsspec backend of :class:`~lading.remote.objects.ObjectClient`: any protocol
fsspec reaches (``s3fs``, ``gcsfs``, ``adlfs``, ...), and the fallback where obstore is not
installed or not usable (a forked DataLoader worker, see
:mod:`~lading.remote.client_obstore`).

An async filesystem (s3fs, gcsfs) runs each ranged read as a coroutine on fsspec's own loop
thread, awaited from the caller's loop, so many stay in flight without a thread each; a
synchronous one reads in the loop's default thread pool. fsspec survives a fork (it resets its
loop in the child). It cannot pin an object's ETag on a ranged read: a replaced object is
caught by its length only, so the obstore backend is preferred where it works.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
from collections.abc import Coroutine, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

from lading.disk.remote import endpoint_of, filesystem
from lading.remote import objects
from lading.remote.objects import ObjectInfo, PermanentError, written_at

T = TypeVar("T")


class FsspecClient:
    """Objects below ``url`` through fsspec; ``options`` are its storage options."""

    backend = "fsspec"

    def __init__(
        self, url: str, options: Mapping[str, Any] | None = None, timeout: float | None = None
    ) -> None:
        self.url = url.rstrip("/")
        options = dict(options or {})
        # botocore's own timeouts bound a request the fetcher gave up on; the fetcher's
        # asyncio timeout is the deadline callers see. One try each, as obstore's: the
        # fetcher retries and counts; with botocore's own, each of its attempts at a 503 sent
        # 4-5 GETs it never counted and waited out the attempt's timeout (a forked worker's
        # error came after 8.4 s where obstore's came after 0.4)
        self.fs, self.root = filesystem(self.url, options, timeout, "reading", 1)
        # the scheme's own: AWS_ENDPOINT_URL for s3:// only, an http:// URL's host, ...
        self.endpoint = endpoint_of(self.url, options, "fsspec")

    def __repr__(self) -> str:
        return f"FsspecClient({self.url!r}, endpoint={self.endpoint!r})"  # never the options

    @property
    def pins(self) -> bool:
        """Whether a read with an ETag sends it (``If-Match``): s3fs only. Elsewhere (gcsfs,
        adlfs, ...) the read is unpinned, and the node cache keeps its bytes unconfirmed."""
        return hasattr(self.fs, "_call_s3")

    async def _on_fs(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """``fs.<method>(*args, **kwargs)`` from the caller's loop: the async one on fsspec's
        loop, or the sync one in the loop's thread pool."""
        if getattr(self.fs, "async_impl", False):
            coro = getattr(self.fs, "_" + method)(*args, **kwargs)
            return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.fs.loop))
        call = functools.partial(getattr(self.fs, method), *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(None, call)

    async def get_async(self, key: str) -> bytes:
        """The whole object ``key`` (the read path; see :meth:`get`)."""
        with self._errors(key):
            return bytes(await self._on_fs("cat_file", self._path(key)))

    async def put_async(self, key: str, data: bytes) -> None:
        with self._errors(key, writing=True):
            await self._on_fs("pipe_file", self._path(key), data)

    async def create_async(self, key: str, data: bytes) -> bool:
        """s3fs's create-only PUT (``If-None-Match: *``); other fsspec filesystems may take
        ``mode="create"`` and overwrite anyway, so they are not asked."""
        pipe = getattr(self.fs, "_pipe_file", None)
        takes_mode = pipe is not None and "mode" in inspect.signature(pipe).parameters
        if "s3" not in _protocols(self.fs) or not takes_mode:  # (s3fs before 2024.12: none)
            raise NotImplementedError(f"no create-only PUT through {type(self.fs).__name__}")
        try:
            with self._errors(key, writing=True):
                await self._on_fs("pipe_file", self._path(key), data, mode="create")
        except FileExistsError:
            return False
        except OSError as e:
            if objects.not_implemented(e):  # a server without conditional writes
                raise NotImplementedError(f"{self.endpoint}: {e}") from None
            raise
        return True

    async def replace_async(self, key: str, data: bytes, etag: str) -> bool:
        """s3fs's conditional PUT (``If-Match: etag``); other fsspec filesystems have none."""
        if "s3" not in _protocols(self.fs) or not self.pins:
            raise NotImplementedError(
                f"no conditional PUT (If-Match) through {type(self.fs).__name__}"
            )
        path = self._path(key)
        try:
            with self._errors(key, writing=True):
                sends = await self._on_loop(self._sends_if_match())
                if sends:
                    replaced: bool = await self._on_loop(self._replace_s3(key, data, etag))
        except OSError as e:
            if objects.not_implemented(e):  # a server without conditional writes
                raise NotImplementedError(f"{self.endpoint}: {e}") from None
            raise
        finally:
            self.fs.invalidate_cache(path)
        if not sends:
            raise NotImplementedError(f"this botocore sends no If-Match on a PUT ({self.endpoint})")
        return replaced

    async def _on_loop(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro`` (an s3fs call of lading's own) on fsspec's loop."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.fs.loop))

    async def _sends_if_match(self) -> bool:
        """Whether s3fs's botocore knows ``IfMatch`` on ``put_object``: s3fs drops a
        parameter its botocore does not know, so with one that lacks it (before 1.35.x) the
        conditional PUT would go out unconditional, silently."""
        await self.fs.set_session()
        helper = getattr(self.fs, "_kwargs_helper", None)
        return helper is not None and "IfMatch" in helper.filter_dict("put_object", {"IfMatch": 1})

    async def _replace_s3(self, key: str, data: bytes, etag: str) -> bool:
        """One ``put_object`` with ``IfMatch=etag``: False where S3 answers 412 (another
        version) or NoSuchKey (none)."""
        bucket, name, _ = self.fs.split_path(self._path(key))
        try:
            await self.fs._call_s3("put_object", Bucket=bucket, Key=name, Body=data, IfMatch=etag)
        except Exception as e:
            if _s3_code(e) in ("PreconditionFailed", "NoSuchKey"):
                return False
            raise
        return True

    async def head_async(self, key: str) -> ObjectInfo | None:
        """Size and ETag of ``key`` on the read path (a HEAD, not a cached listing), or None."""
        path = self._path(key)
        self.fs.invalidate_cache(path)
        try:
            with self._errors(key):
                info = await self._on_fs("info", path)
        except FileNotFoundError:
            return None
        if info.get("type") == "directory":
            return None
        return _info(info)

    async def upload_async(
        self, key: str, data: bytes | Path, timeout: float, request: float | None = None
    ) -> None:
        """Write object ``key`` from bytes or a file, for a caller that cancels the call
        after ``timeout`` seconds (the cancel reaches the coroutine on fsspec's loop;
        ``request`` is not used: fsspec bounds no single part)."""
        path = self._path(key)
        with self._errors(key, writing=True):
            if isinstance(data, Path):
                await self._on_fs("put_file", str(data), path)
            else:
                await self._on_fs("pipe_file", path, data)
        self.fs.invalidate_cache(path)

    async def delete_async(self, key: str) -> None:
        """Remove object ``key`` (absent is fine) on the read path."""
        path = self._path(key)
        with self._errors(key), contextlib.suppress(FileNotFoundError):
            await self._on_fs("rm_file", path)
        self.fs.invalidate_cache(path)

    async def list_async(self, prefix: str = "") -> dict[str, ObjectInfo]:
        """:meth:`list` on the read path."""
        base = self._path(prefix.rstrip("/")) if prefix else self.root
        try:
            with self._errors(prefix, listing=True):
                found = await self._on_fs("find", base, None, False, True)  # path, depth, ...
        except FileNotFoundError as e:
            if isinstance(e, PermanentError):
                raise
            return {}
        return self._listed(found)

    @contextlib.contextmanager
    def _errors(
        self, key: str, pinned: bool = False, writing: bool = False, listing: bool = False
    ) -> Iterator[None]:
        """What retrying cannot fix as one of :class:`~lading.errors.RemotePermanentError`'s
        family (no bucket, no object, a pinned object gone since the snapshot was opened,
        access denied, no credentials; not retried); botocore's and aiohttp's other errors,
        which are not ``OSError``, become ``OSError``, which the fetcher retries. A listing's
        missing prefix is left to the caller (an empty listing)."""
        try:
            yield
        except PermanentError:
            raise
        except FileNotFoundError as e:
            text = str(e)
            if "bucket" in text.lower() or writing:
                raise objects.no_bucket(self.url, self.endpoint) from None
            if listing:
                raise
            if pinned:
                raise objects.changed(self.url, key, self.endpoint) from None
            raise objects.no_object(self.url, key, self.endpoint) from None
        except Exception as e:
            text = f"{type(e).__name__}: {_first_line(e)}"
            if _no_keys(e):
                raise objects.denied(self.url, key, self.endpoint, objects.NO_CREDENTIALS) from None
            if isinstance(e, PermissionError) or objects.refused(str(e)):
                raise objects.denied(self.url, key, self.endpoint, text) from None
            if isinstance(e, OSError):
                raise
            raise OSError(text) from e

    def _path(self, key: str) -> str:
        return f"{self.root}/{key}" if key else self.root

    async def get_range(self, key: str, start: int, end: int, etag: str | None = None) -> bytes:
        path = self._path(key)
        with self._errors(key, pinned=etag is not None):
            if etag is not None and self.pins:  # s3fs: the pin is sent
                pinned = asyncio.run_coroutine_threadsafe(
                    self._pinned_s3(key, start, end, etag), self.fs.loop
                )
                found: bytes = await asyncio.wrap_future(pinned)
                return found
            if getattr(self.fs, "async_impl", False):
                coro = self.fs._cat_file(path, start=start, end=end)
                future = asyncio.run_coroutine_threadsafe(coro, self.fs.loop)
                return bytes(await asyncio.wrap_future(future))
            loop = asyncio.get_running_loop()
            data = await loop.run_in_executor(None, self._cat, path, start, end)
            return bytes(data)

    async def _pinned_s3(self, key: str, start: int, end: int, etag: str) -> bytes:
        """Bytes ``[start, end)`` of an s3fs object, by one GET with ``If-Match: etag``
        (``cat_file`` cannot send it): another version is refused, never read."""
        bucket, name, _ = self.fs.split_path(self._path(key))
        try:
            response = await self.fs._call_s3(
                "get_object",
                Bucket=bucket,
                Key=name,
                Range=f"bytes={start}-{end - 1}",
                IfMatch=etag,
            )
        except Exception as e:
            if any(m in str(e) for m in ("PreconditionFailed", "Precondition Failed", "(412)")):
                raise objects.changed(self.url, key, self.endpoint, "its ETag changed") from None
            raise
        try:
            return bytes(await response["Body"].read())
        finally:
            response["Body"].close()

    def _cat(self, path: str, start: int, end: int) -> bytes:
        return bytes(self.fs.cat_file(path, start=start, end=end))

    def get(self, key: str) -> bytes:
        with self._errors(key):
            return bytes(self.fs.cat_file(self._path(key)))

    def put(self, key: str, data: bytes | Path) -> None:
        path = self._path(key)
        if isinstance(data, Path):
            self.fs.put_file(str(data), path)
        else:
            self.fs.pipe_file(path, data)
        self.fs.invalidate_cache(path)

    def list(self, prefix: str = "") -> dict[str, ObjectInfo]:
        base = self._path(prefix.rstrip("/")) if prefix else self.root
        try:
            found = self.fs.find(base, detail=True)
        except FileNotFoundError:
            return {}
        return self._listed(found)

    def _listed(self, found: Mapping[str, Any]) -> dict[str, ObjectInfo]:
        out: dict[str, ObjectInfo] = {}
        for path, info in found.items():
            if info.get("type") == "directory":
                continue
            rel = path[len(self.root) + 1 :] if path.startswith(self.root + "/") else path
            out[rel] = _info(info)
        return out

    def head(self, key: str) -> ObjectInfo | None:
        path = self._path(key)
        self.fs.invalidate_cache(path)
        try:
            info = self.fs.info(path)
        except FileNotFoundError:
            return None
        if info.get("type") == "directory":
            return None
        return _info(info)

    def delete(self, key: str) -> None:
        path = self._path(key)
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(path)
        self.fs.invalidate_cache(path)


def _protocols(fs: Any) -> tuple[str, ...]:
    found = getattr(fs, "protocol", ())
    return (found,) if isinstance(found, str) else tuple(found)


def _s3_code(error: BaseException) -> str | None:
    """S3's error code (``PreconditionFailed``, ``NoSuchKey``, ...) of botocore's error behind
    ``error`` (s3fs raises its own ``OSError`` from it), or None."""
    seen: BaseException | None = error
    while seen is not None:
        response = getattr(seen, "response", None)
        if isinstance(response, dict):
            code = response.get("Error", {}).get("Code")
            return str(code) if code is not None else None
        seen = seen.__cause__ or seen.__context__
    return None


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [""])[0][:300]


def _etag(info: Mapping[str, Any]) -> str | None:
    found = info.get("ETag") or info.get("etag")
    return str(found) if found else None


def _info(info: Mapping[str, Any]) -> ObjectInfo:
    """A listing's or ``info``'s entry: size, version tag and time of last write."""
    written = None
    for name in _WRITTEN:
        written = written_at(info.get(name))
        if written is not None:
            break
    return ObjectInfo(int(info["size"]), _etag(info), _modified(info), written)


# where fsspec's filesystems put an object's time of last write: local and SFTP, s3fs, adlfs,
# gcsfs, others, memory://
_WRITTEN = ("mtime", "LastModified", "last_modified", "updated", "modified", "created")


def _modified(info: Mapping[str, Any]) -> str | None:
    """The modification time an fsspec listing gives where it gives no ETag (``memory://``'s
    ``created``, a local or SFTP file's ``mtime``, ...), as text; None where it gives none."""
    if _etag(info) is not None:
        return None
    for name in _WRITTEN:
        found = info.get(name)
        if found is not None:
            return str(found)
    return None


def _no_keys(error: BaseException) -> bool:
    """botocore's "Unable to locate credentials" (NoCredentialsError), by name: botocore is
    an optional import."""
    return type(error).__name__ in ("NoCredentialsError", "PartialCredentialsError")
