"""The fsspec backend of :class:`~lading.stores.remote.objects.ObjectClient`: any protocol
fsspec reaches (``s3fs``, ``gcsfs``, ``adlfs``, ...), and the fallback where obstore is not
installed or not usable (a forked DataLoader worker, see
:mod:`~lading.stores.remote.obstore_client`).

An async filesystem (s3fs, gcsfs) runs each ranged read as a coroutine on fsspec's own loop
thread, awaited from the caller's loop, so many stay in flight without a thread each; a
synchronous one reads in the loop's default thread pool. fsspec survives a fork (it resets its
loop in the child). It cannot pin an object's ETag on a ranged read: a replaced object is
caught by its length only, so the obstore backend is preferred where it works.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lading.stores.remote.objects import ObjectInfo, PermanentError


class FsspecClient:
    """Objects below ``url`` through fsspec; ``options`` are its storage options."""

    backend = "fsspec"

    def __init__(self, url: str, options: Mapping[str, Any] | None = None) -> None:
        try:
            from fsspec.core import url_to_fs
        except ImportError:  # pragma: no cover - torch depends on fsspec
            raise ImportError(
                f"reading {url} needs fsspec. To install:\n  pip install 'lading[remote]'"
            ) from None
        self.url = url.rstrip("/")
        self.fs, root = url_to_fs(self.url, **dict(options or {}))
        self.root = root.rstrip("/")

    def _path(self, key: str) -> str:
        return f"{self.root}/{key}" if key else self.root

    async def get_range(self, key: str, start: int, end: int, etag: str | None = None) -> bytes:
        path = self._path(key)
        try:
            if getattr(self.fs, "async_impl", False):
                coro = self.fs._cat_file(path, start=start, end=end)
                future = asyncio.run_coroutine_threadsafe(coro, self.fs.loop)
                return bytes(await asyncio.wrap_future(future))
            loop = asyncio.get_running_loop()
            data = await loop.run_in_executor(None, self._cat, path, start, end)
            return bytes(data)
        except FileNotFoundError:
            raise PermanentError(f"{self.url}/{key} does not exist") from None
        except OSError:
            raise
        except Exception as e:  # botocore and aiohttp errors are not OSErrors: retry them
            first = (str(e).strip().splitlines() or [""])[0][:300]
            raise OSError(f"{type(e).__name__}: {first}") from e

    def _cat(self, path: str, start: int, end: int) -> bytes:
        return bytes(self.fs.cat_file(path, start=start, end=end))

    def get(self, key: str) -> bytes:
        try:
            return bytes(self.fs.cat_file(self._path(key)))
        except FileNotFoundError:
            raise PermanentError(f"{self.url}/{key} does not exist") from None

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
        out: dict[str, ObjectInfo] = {}
        for path, info in found.items():
            if info.get("type") == "directory":
                continue
            rel = path[len(self.root) + 1 :] if path.startswith(self.root + "/") else path
            out[rel] = ObjectInfo(int(info["size"]), _etag(info))
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
        return ObjectInfo(int(info["size"]), _etag(info))

    def delete(self, key: str) -> None:
        path = self._path(key)
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(path)
        self.fs.invalidate_cache(path)


def _etag(info: Mapping[str, Any]) -> str | None:
    found = info.get("ETag") or info.get("etag")
    return str(found) if found else None
