"""A directory behind an fsspec URL, read under the remote deadline: what ``stage`` copies from.

Every call -- the listing, ``meta.json``, each :data:`BLOCK` range of a file -- is an attempt
of at most ``timeout`` seconds (``LADING_REMOTE_TIMEOUT``, default 20: a remote store's
setting, so one number bounds every remote call lading makes), retried ``retries`` times
with backoff after a reset, a 5xx, a short body or silence, as a remote store's document
GETs are; then :class:`~lading.errors.RemoteReadError`, one line naming the object, the
endpoint and the setting. On an async filesystem (s3fs, gcsfs) an attempt past its time is
cancelled on fsspec's loop (its request dropped); a synchronous one (a local-like protocol)
runs without a deadline.

It lives in the disk room, beside staging, and reads fsspec only: the object clients of the
store room (:mod:`lading.stores.remote`) sit above it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from lading.deadline import DEFAULT_RETRIES, Deadline, remote_timeout
from lading.errors import RemoteReadError

BLOCK = 1 << 22  # 4 MiB a ranged GET: within the deadline at 1 MB/s, few GETs a file
_PERMANENT = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)


def public_endpoint(endpoint: str) -> str:
    """``endpoint`` without a ``user:password@`` part (what an error may show)."""
    scheme, sep, rest = endpoint.partition("://")
    host = rest.rsplit("@", 1)[-1] if sep else endpoint.rsplit("@", 1)[-1]
    return f"{scheme}{sep}{host}" if sep else host


def filesystem(
    url: str,
    options: Mapping[str, Any],
    timeout: float | None,
    doing: str,
    attempts: int | None = None,
) -> tuple[Any, str]:
    """fsspec's filesystem of ``url`` and its root path (``doing``: what needs it, named when
    fsspec is missing). On S3, botocore's own bounds (60 s each by default) are put under
    ``timeout`` (connect: at most 10 s) and its tries to ``attempts`` (None: its default)."""
    try:
        from fsspec.core import url_to_fs
    except ImportError:  # pragma: no cover - torch depends on fsspec
        raise ImportError(
            f"{doing} {url} needs fsspec. To install:\n  pip install 'lading[remote]'"
        ) from None
    options = dict(options)
    if timeout is not None and url.startswith(("s3://", "s3a://")):
        config = dict(options.get("config_kwargs") or {})
        config.setdefault("connect_timeout", min(timeout, 10.0))
        config.setdefault("read_timeout", timeout)
        if attempts is not None:
            config.setdefault("retries", {"max_attempts": attempts})
        options["config_kwargs"] = config
    fs, root = url_to_fs(url.rstrip("/"), **options)
    return fs, str(root).rstrip("/")


class RemoteDir:
    """The objects below ``url`` through fsspec (``options``: its storage options), every
    call within ``timeout`` seconds an attempt and ``retries`` retries."""

    def __init__(
        self,
        url: str,
        options: Mapping[str, Any],
        timeout: float | None = None,
        retries: int = DEFAULT_RETRIES,
    ) -> None:
        self.deadline = Deadline(remote_timeout() if timeout is None else float(timeout), retries)
        self.timeout, self.url = self.deadline.timeout, url.rstrip("/")
        endpoint = options.get("endpoint_url") or (options.get("client_kwargs") or {}).get(
            "endpoint_url"
        )
        self.endpoint = public_endpoint(str(endpoint or os.environ.get("AWS_ENDPOINT_URL", "")))
        # one attempt each: ours are the retries (botocore's 4 of a 503, with its backoff,
        # spent a whole attempt's time inside it)
        self.fs, self.root = filesystem(self.url, options, self.timeout, "staging from", 1)

    def files(self) -> dict[str, dict[str, Any]]:
        """Every object below the URL: relative path -> {size, version (ETag or mtime)}."""
        found = self._call(f"LIST {self.url}/", "find", self.root, detail=True)
        out: dict[str, dict[str, Any]] = {}
        for path, info in sorted(found.items()):
            if info.get("type") == "directory":
                continue
            version = info.get("ETag") or info.get("etag") or info.get("mtime") or ""
            out[path[len(self.root) + 1 :]] = {"size": int(info["size"]), "version": str(version)}
        if not out:
            raise FileNotFoundError(f"{self.url}: no files there to stage")
        return out

    def read(self, rel: str) -> bytes:
        """The whole object ``rel`` (a manifest)."""
        return bytes(self._call(f"GET {self.url}/{rel}", "cat_file", f"{self.root}/{rel}"))

    def blocks(self, rel: str, size: int) -> Iterator[bytes]:
        """The ``size`` bytes of object ``rel``, :data:`BLOCK` at a time, one ranged GET each
        (a short body is retried: a block is never shorter than asked)."""
        for start in range(0, size, BLOCK):
            end = min(size, start + BLOCK)
            what = f"GET {self.url}/{rel} bytes {start}-{end - 1}"
            path = f"{self.root}/{rel}"
            yield self._call(what, "cat_file", path, start=start, end=end, want=end - start)

    def _call(self, what: str, method: str, *args: Any, want: int = -1, **kwargs: Any) -> Any:
        """``fs.<method>(*args, **kwargs)``, retried; ``want``: the bytes it must return."""
        last: BaseException | None = None
        for pause in self.deadline.pauses():
            time.sleep(pause)
            try:
                found = self._once(method, args, kwargs)
            except _PERMANENT:
                raise
            except Exception as e:  # botocore's and aiohttp's errors are not all OSErrors
                last = e
                continue
            if want < 0 or len(found) == want:
                return found
            last = OSError(f"{len(found)} bytes came back for the {want} asked")
        raise RemoteReadError(
            self.deadline.gave_up(what, self.endpoint, last, "; nothing was staged")
        )

    def _once(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """One attempt: on an async filesystem, its coroutine on fsspec's loop, cancelled
        after ``timeout`` seconds."""
        if not getattr(self.fs, "async_impl", False):
            call: Callable[..., Any] = getattr(self.fs, method)
            return call(*args, **kwargs)
        coro = getattr(self.fs, "_" + method)(*args, **kwargs)
        bounded = asyncio.wait_for(coro, self.timeout)
        future = asyncio.run_coroutine_threadsafe(bounded, self.fs.loop)
        try:
            return future.result(self.timeout + 5.0)  # the loop cancels it first
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise
