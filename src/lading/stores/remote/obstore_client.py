"""The obstore backend of :class:`~lading.stores.remote.objects.ObjectClient` (Rust, async).

``get_range`` is one ``await`` of ``obstore.get_range_async`` (or ``get_async`` with a range
and ``If-Match`` when the object's ETag is pinned), so one event-loop thread keeps hundreds of
GETs in flight. obstore's own retries are off (``max_retries: 0``): lading's fetcher retries,
so every request sent is one GET counted.

Fork: obstore runs its requests on a tokio runtime whose threads a ``fork()`` does not copy; a
forked child of a process that used obstore hangs on its first request (seen here: a GET in the
child never returned). :func:`usable_here` says whether this process may use it.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lading.stores.remote.objects import ObjectInfo, PermanentError, split_url

SCHEMES: tuple[str, ...] = ("az", "gs", "s3", "s3a")
# fsspec-style option names users already pass to `lading stage -o` -> obstore config keys
_ALIASES = {"endpoint_url": "endpoint", "key": "access_key_id", "secret": "secret_access_key"}
_ENDPOINT_VARS = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT")
UPLOAD_CHUNK = 64 << 20  # bytes a part of a multipart upload: 20 parts for 1.2 GB, not 240
_first_used_by: int | None = None  # the pid whose use started obstore's runtime


def usable_here() -> bool:
    """False in a process forked from one that already used obstore (it would hang)."""
    return _first_used_by is None or _first_used_by == os.getpid()


def _mark_used() -> None:
    global _first_used_by
    if _first_used_by is None:
        _first_used_by = os.getpid()


class ObstoreClient:
    """Objects below ``url`` through obstore; ``options`` are obstore config keys (fsspec's
    ``endpoint_url``, ``key``, ``secret`` are accepted too)."""

    backend = "obstore"

    def __init__(self, url: str, options: Mapping[str, Any] | None = None) -> None:
        import obstore  # noqa: F401  # ImportError before any state changes
        from obstore.store import from_url

        if not usable_here():
            raise RuntimeError(
                "obstore cannot be used in a process forked from one that used it (its "
                "runtime's threads were not forked); use backend='fsspec' here"
            )
        scheme, _ = split_url(url)
        if scheme not in SCHEMES:
            raise ValueError(f"obstore handles {sorted(SCHEMES)}, not {scheme}:// ({url})")
        self.url = url.rstrip("/")
        config = {_ALIASES.get(k, k): v for k, v in (options or {}).items()}
        endpoint = str(config.get("endpoint") or _env_endpoint())
        client: dict[str, Any] = {"allow_http": endpoint.startswith("http://")}
        _mark_used()
        self._store = from_url(  # type: ignore[call-overload]  # config keys vary by scheme
            self.url, client_options=client, retry_config={"max_retries": 0}, **config
        )
        # uploads, listings, HEADs and deletes keep obstore's own retries (a multipart upload
        # of a 1.2 GB file whose one part failed once was aborted whole without them) and
        # wait long: completing that upload took the loaded local S3 over obstore's 30 s, and
        # the retried complete found the upload gone
        admin = {**client, "timeout": "30min"}
        self._admin = from_url(self.url, client_options=admin, **config)  # type: ignore[call-overload]

    async def get_range(self, key: str, start: int, end: int, etag: str | None = None) -> bytes:
        import obstore

        try:
            if etag is None:
                data = await obstore.get_range_async(self._store, key, start=start, end=end)
                return bytes(data)
            result = await obstore.get_async(
                self._store, key, options={"range": (start, end), "if_match": etag}
            )
            return bytes(await result.bytes_async())
        except Exception as e:
            raise _translate(e, self.url, key) from e

    async def get_ranges(
        self, key: str, ranges: list[tuple[int, int]], etag: str | None = None
    ) -> list[bytes]:
        """Bytes of each ``(start, end)`` of ``key``, one GET a range (never merged:
        ``coalesce=0``), run side by side in Rust for one ``await``. ``get_ranges`` cannot send
        ``If-Match``, so with ``etag`` the first range goes as its own pinned GET beside the
        others: every call checks the object's version once."""
        import obstore

        try:
            if etag is None:
                found = await obstore.get_ranges_async(
                    self._store, key, starts=[a for a, _ in ranges],
                    ends=[b for _, b in ranges], coalesce=0,
                )  # fmt: skip
                return [bytes(b) for b in found]
            pinned = self.get_range(key, ranges[0][0], ranges[0][1], etag)
            if len(ranges) == 1:
                return [await pinned]
            rest = obstore.get_ranges_async(
                self._store, key, starts=[a for a, _ in ranges[1:]],
                ends=[b for _, b in ranges[1:]], coalesce=0,
            )  # fmt: skip
            first, others = await asyncio.gather(pinned, rest)
            return [first, *(bytes(b) for b in others)]
        except PermanentError:
            raise
        except Exception as e:
            raise _translate(e, self.url, key) from e

    def get(self, key: str) -> bytes:
        import obstore

        try:
            return bytes(obstore.get(self._admin, key).bytes())
        except Exception as e:
            raise _translate(e, self.url, key) from e

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


def _env_endpoint() -> str:
    return next((os.environ[v] for v in _ENDPOINT_VARS if os.environ.get(v)), "")


def _translate(error: Exception, url: str, key: str) -> Exception:
    """A permanent failure (missing object, another version) as :class:`PermanentError`; the
    rest as ``OSError`` (retried). Only the first line of obstore's text is kept."""
    from obstore.exceptions import NotFoundError, PreconditionError

    first = (str(error).strip().splitlines() or [type(error).__name__])[0][:300]
    if isinstance(error, (NotFoundError, FileNotFoundError)):
        return PermanentError(f"{url}/{key} does not exist ({first})")
    if isinstance(error, PreconditionError):
        return PermanentError(
            f"{url}/{key} was replaced since this store was opened (its ETag changed: {first})"
        )
    return OSError(f"{type(error).__name__}: {first}")
