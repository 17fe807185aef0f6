"""The object-store seam: ranged reads, whole-object get/put, list and head, for any backend.

A store lives under a URL prefix (``s3://bucket/prefix/name``, ``gs://...``, anything fsspec
reaches); keys are paths below it (``meta.json``, ``text.bin``). Two backends implement
:class:`ObjectClient`:

- :mod:`~lading.remote.client_obstore` (``obstore``, Rust): one ranged GET is one
  ``await``, so a single thread keeps hundreds in flight for ~30 us of CPU each. Its client is
  unusable in a process *forked* from one that already used it (the tokio runtime's threads
  are not forked: a GET hangs forever), so such a child falls back to fsspec.
- :mod:`~lading.remote.client_fsspec` (``s3fs``, ``gcsfs``, ...): any fsspec protocol.

Credentials and the endpoint come from the standard environment (``AWS_ACCESS_KEY_ID``,
``AWS_ENDPOINT_URL``, ``GOOGLE_APPLICATION_CREDENTIALS``, ...) or ``options``; they are never
logged or put in an error message. Neither backend's own range merging is used (obstore's
``get_ranges`` merges anything under 1 MB apart): lading plans its ranges itself
(:mod:`lading.remote.ranges`), and each backend's own retries are off, so that a GET
counted is a request sent (:mod:`lading.remote.fetch` retries).
"""

from __future__ import annotations

import contextvars
import datetime
import errno
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from lading.disk.remote import NO_CREDENTIALS as NO_CREDENTIALS
from lading.disk.remote import bucket_of as bucket_of
from lading.disk.remote import changed as changed
from lading.disk.remote import check_url as check_url
from lading.disk.remote import denied as denied
from lading.disk.remote import no_bucket as no_bucket
from lading.disk.remote import no_object as no_object
from lading.disk.remote import refused as refused
from lading.errors import RemotePermanentError as PermanentError  # noqa: F401  # never retried
from lading.errors import RemoteReadError as RemoteReadError  # one class with staging's
from lading.errors import RemoteURLError
from lading.errors import RemoteWriteError as RemoteWriteError

BACKENDS: tuple[str, ...] = ("auto", "fsspec", "obstore")

# requests a client's call sent beyond those the call stands for (a fallback's, a range at a
# time), counted into the tally its caller set here: the fetcher's ``gets`` is requests sent
EXTRA_REQUESTS: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar(
    "lading_extra_requests", default=None
)


def sent_more(n: int) -> None:
    """Count ``n`` requests a client's call sent beyond those it stands for (its caller's
    tally in :data:`EXTRA_REQUESTS`, if any)."""
    tally = EXTRA_REQUESTS.get()
    if tally is not None:
        tally[0] += n


@dataclass(frozen=True)
class ObjectInfo:
    """What a listing says of one object: its size and version tag (an ETag, or None), and
    where a store gives no ETag, its modification time as text (``modified``; None where the
    store gives neither): a version to tell a rewrite at the same size by, never a pin.
    ``written``: when the store says the object was last written, POSIX seconds (S3's
    ``LastModified``; None where the listing gives no time): how old a bucket's leftovers
    are (:mod:`lading.stores.building.bucket_gc`), never part of a version."""

    size: int
    etag: str | None
    modified: str | None = None
    written: float | None = field(default=None, compare=False)


def written_at(value: object) -> float | None:
    """A listing's time of last write as POSIX seconds: a ``datetime`` (naive taken as UTC),
    a number of seconds, or ISO 8601 text (``2026-12-07T02:37:13.000Z``); None otherwise."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            value = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.timezone.utc)
        return value.timestamp()
    return None


def is_remote(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a URL of object storage (``s3://``, ``gs://``, ...), not a local path.
    A Windows drive (``C:\\x``) has no ``://``.

    Raises:
        RemoteURLError: ``path`` is a ``file://`` URL. Every caller takes the local path as
            given, so ``file:///x`` would be the folder ``./file:/x`` under the working
            directory (on a cluster, under each worker's); the error names the path to pass.
    """
    text = os.fspath(path)
    if text.startswith("file://"):
        local = text.removeprefix("file://")
        raise RemoteURLError(
            f"{text}: a file:// URL is not taken for a local store, corpus or dataset; pass the "
            f"path {local} itself (as given, the URL would be a folder named 'file:' under "
            f"{os.getcwd()})"
        )
    return "://" in text


class RemoteNotSupportedError(RemoteURLError):
    """An object-store URL given to a part of lading that reads and writes local paths only,
    or of a scheme no client here reaches."""


def refuse_remote(path: str | os.PathLike[str], what: str, fix: str) -> None:
    """Raise :class:`RemoteNotSupportedError` where ``path`` is an object-store URL: ``what``
    names the call, ``fix`` the local route. Without it a URL became a folder named ``s3:``
    (a build) or "does not exist" (an open)."""
    if is_remote(path):
        raise RemoteNotSupportedError(
            f"{what} takes a local folder, not the URL {os.fspath(path)}: {fix}"
        )


def split_url(url: str) -> tuple[str, str]:
    """``"s3://bucket/a/b"`` -> ``("s3", "bucket/a/b")``, the trailing slash dropped.

    Raises:
        ValueError: no ``scheme://``, or nothing after it.
        RemoteURLError: an upper-case scheme or an empty path segment (:func:`check_url`).
    """
    check_url(url)
    scheme, sep, rest = url.partition("://")
    rest = rest.strip("/")
    if not sep or not scheme or not rest:
        raise ValueError(
            f"{url!r} is not an object-store URL; expected scheme://bucket/prefix "
            "(e.g. s3://my-bucket/corpora/msmarco)"
        )
    return scheme, rest


class ObjectClient(Protocol):
    """What lading needs of object storage, below one URL prefix."""

    url: str
    backend: str
    endpoint: str  # where requests go (no credentials in it), for messages; "" if default

    async def get_range(self, key: str, start: int, end: int, etag: str | None = None) -> bytes:
        """Bytes ``[start, end)`` of object ``key`` (one GET); ``etag`` pins the version.

        Raises:
            PermanentError: the object is missing or (with ``etag``) was replaced.
            OSError: anything a retry may fix (a 5xx, a dropped connection).
        """

    async def get_async(self, key: str) -> bytes:
        """The whole object ``key`` (read path: one attempt, retried by the fetcher).

        Raises:
            PermanentError: the object or its bucket is missing.
            OSError: anything a retry may fix.
        """

    async def list_async(self, prefix: str = "") -> dict[str, ObjectInfo]:
        """:meth:`list` on the read path (one attempt, retried by the fetcher)."""

    async def put_async(self, key: str, data: bytes) -> None:
        """Write small object ``key`` (one attempt, under the read path's timeout: a probe)."""

    async def create_async(self, key: str, data: bytes) -> bool:
        """Write small object ``key`` only where none exists (S3's ``If-None-Match: *``), one
        attempt: True where this call wrote it, False where one was there (its bytes
        unchanged), so that of two writers racing on an absent object exactly one wins.

        Raises:
            NotImplementedError: the backend sends no create-only PUT.
        """

    async def replace_async(self, key: str, data: bytes, etag: str) -> bool:
        """Write small object ``key`` only where its current ETag is ``etag`` (S3's
        ``If-Match``), one attempt: True where this call replaced it, False where the object
        is another version or gone (HTTP 412 or 404; its bytes unchanged), so that of two
        writers replacing the same version exactly one wins (a compare-and-swap).

        Raises:
            NotImplementedError: the backend sends no conditional PUT (an fsspec filesystem
                other than s3fs, a botocore that has no ``IfMatch``, a server answering 501).
        """

    async def head_async(self, key: str) -> ObjectInfo | None:
        """Size and ETag of ``key`` on the read path (one attempt, retried by the fetcher), or
        None where it does not exist."""

    async def upload_async(
        self, key: str, data: bytes | Path, timeout: float, request: float | None = None
    ) -> None:
        """Write object ``key`` from bytes or a local file, for a caller that cancels the
        call after ``timeout`` seconds: the cancel stops its requests; the backend's own
        retries (a reset or stalled part of a multipart upload, each request given
        ``request`` seconds where the backend can bound one) run within that time."""

    async def delete_async(self, key: str) -> None:
        """Remove object ``key`` (absent is fine; one attempt, retried by the fetcher)."""

    def get(self, key: str) -> bytes:
        """The whole object ``key``."""

    def put(self, key: str, data: bytes | Path) -> None:
        """Write object ``key`` from bytes or a local file (replacing it)."""

    def list(self, prefix: str = "") -> dict[str, ObjectInfo]:
        """Every object below ``prefix``: key (relative to the URL) -> size and ETag."""

    def head(self, key: str) -> ObjectInfo | None:
        """Size and ETag of ``key``, or None when it does not exist."""

    def delete(self, key: str) -> None:
        """Remove object ``key`` (absent is fine)."""


def not_implemented(error: BaseException) -> bool:
    """Whether ``error`` is a server's 501 Not Implemented (an S3-compatible server without
    conditional writes answers ``If-None-Match: *`` or ``If-Match`` so), as obstore and s3fs
    report it."""
    text = str(error)
    return getattr(error, "errno", None) == errno.ENOSYS or "Not Implemented" in text


def exists(client: ObjectClient, key: str) -> bool:
    """Whether object ``key`` exists below the client's URL."""
    return client.head(key) is not None


def describe(url: str, key: str, start: int | None = None, end: int | None = None) -> str:
    """``s3://bucket/store/text.bin bytes 100-199`` (an inclusive range, as HTTP writes it)."""
    where = f"{url.rstrip('/')}/{key}"
    return where if start is None or end is None else f"{where} bytes {start}-{end - 1}"
