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
import re
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from lading.deadline import DEFAULT_RETRIES, Deadline, failure, remote_timeout
from lading.errors import (
    RemoteAccessError,
    RemoteChangedError,
    RemoteNotFoundError,
    RemoteReadError,
    RemoteURLError,
)

BLOCK = 1 << 22  # 4 MiB a ranged GET: within the deadline at 1 MB/s, few GETs a file
_PERMANENT = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)
CREDENTIALS = (
    "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE), storage_options "
    "(key/secret), an instance role"
)
# the family of each scheme whose clients read credentials and an endpoint from the environment
_FAMILY = {"s3": "s3", "s3a": "s3", "gs": "gs", "gcs": "gs", "az": "az", "abfs": "az"}
_FAMILY.update({"abfss": "az", "adl": "az", "azure": "az"})
# where each family's clients look for credentials (obstore's variables, as its docs name them)
_CREDENTIALS = {
    "s3": CREDENTIALS,
    "gs": "GOOGLE_APPLICATION_CREDENTIALS (or GOOGLE_SERVICE_ACCOUNT, "
    "GOOGLE_SERVICE_ACCOUNT_KEY), storage_options (service_account_key; gcsfs: token), "
    "gcloud's application-default login, the instance's service account",
    "az": "AZURE_STORAGE_ACCOUNT_NAME with AZURE_STORAGE_ACCOUNT_KEY or AZURE_STORAGE_SAS_TOKEN "
    "(or AZURE_CLIENT_ID, AZURE_CLIENT_SECRET and AZURE_TENANT_ID), storage_options "
    "(account_name with account_key or sas_key; adlfs: sas_token), a managed identity",
}
# where each family's endpoint is set: the variables each backend reads, first set wins
ENDPOINT_VARS: dict[tuple[str, str], tuple[str, ...]] = {
    ("s3", "obstore"): ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT"),
    ("s3", "fsspec"): ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"),  # botocore's
    ("gs", "obstore"): ("GOOGLE_BASE_URL",),
    ("gs", "fsspec"): ("STORAGE_EMULATOR_HOST",),  # gcsfs's
    ("az", "obstore"): ("AZURE_STORAGE_ENDPOINT", "AZURE_ENDPOINT"),
}
_SET_ENDPOINT = {
    "s3": "AWS_ENDPOINT_URL, storage_options endpoint_url",
    "gs": "GOOGLE_BASE_URL (gcsfs: STORAGE_EMULATOR_HOST), storage_options base_url",
    "az": "AZURE_STORAGE_ACCOUNT_NAME, AZURE_STORAGE_ENDPOINT, storage_options account_name",
}
_ENDPOINT_OPTIONS = ("endpoint_url", "endpoint", "aws_endpoint", "base_url", "account_url")
# schemes whose URL names the server itself (scheme://host:port/path): that is the endpoint
_HOST_SCHEMES = ("http", "https", "ftp", "sftp", "ssh", "smb", "hdfs", "webhdfs", "webdav")
# asked for keys when nothing else gave them: a refusal or an error there means none were found
_NO_KEYS = ("NoCredentialsError", "PartialCredentialsError")  # botocore's, by name
_METADATA = ("169.254.169.254", "/latest/api/token", "/latest/meta-data")
NO_CREDENTIALS = "no credentials"  # what a client says for :func:`denied` when it found none


def public_endpoint(endpoint: str) -> str:
    """``endpoint`` without a ``user:password@`` part (what an error may show)."""
    scheme, sep, rest = endpoint.partition("://")
    host = rest.rsplit("@", 1)[-1] if sep else endpoint.rsplit("@", 1)[-1]
    return f"{scheme}{sep}{host}" if sep else host


def endpoint_of(url: str, options: Mapping[str, Any] | None = None, backend: str = "fsspec") -> str:
    """Where a ``backend`` client's calls for ``url`` go, for messages (no credentials in it;
    ``""`` for the backend's default): the endpoint option given, else the variable that
    backend reads for the URL's scheme (``AWS_ENDPOINT_URL`` for s3:// only,
    ``GOOGLE_BASE_URL`` for gs://, ``AZURE_STORAGE_ENDPOINT`` for az://), else the URL's own
    host for a scheme that names one (``http://host:port``, ``ftp://host``)."""
    options = options or {}
    kwargs = options.get("client_kwargs")
    given = next((options[k] for k in _ENDPOINT_OPTIONS if options.get(k)), None) or (
        kwargs.get("endpoint_url") if isinstance(kwargs, Mapping) else None
    )
    if given:
        return public_endpoint(str(given))
    scheme, _, rest = url.partition("://")
    family = _FAMILY.get(scheme.lower())
    if family is not None:
        names = ENDPOINT_VARS.get((family, backend), ())
        return public_endpoint(next((os.environ[v] for v in names if os.environ.get(v)), ""))
    host = rest.split("/", 1)[0]
    return public_endpoint(f"{scheme}://{host}") if scheme in _HOST_SCHEMES and host else ""


def _family(url: str) -> str | None:
    return _FAMILY.get(url.partition("://")[0].lower())


def credentials_for(url: str) -> str:
    """Where the clients of ``url``'s scheme look for credentials (for a message)."""
    family = _family(url)
    if family is not None:
        return _CREDENTIALS[family]
    scheme = url.partition("://")[0]
    return f"the storage_options of fsspec's {scheme}:// filesystem (user and password, headers)"


# schemes whose URL is bucket/key: an empty segment names nothing (file:///x is a path)
BUCKET_SCHEMES = ("s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "oss", "r2")
_LOOKS_LIKE_URL = re.compile(r"(s3a?|gs|gcs|az|abfss?)(?::/+|/+)([^/].*)", re.I)


def check_url(url: str) -> None:
    """Refuse an object-store URL that cannot name an object: an upper-case scheme
    (``S3://``: fsspec said "Protocol not known: S3") or an empty path segment
    (``s3://bucket//name``: obstore printed a Rust debug dump, S3 would read another key).

    Raises:
        RemoteURLError: naming the URL and the one it likely meant.
    """
    scheme, sep, rest = url.partition("://")
    if not sep or not scheme:
        return
    if scheme != scheme.lower():
        raise RemoteURLError(
            f"{url}: a URL's scheme is lower case; did you mean {scheme.lower()}://{rest}?"
        )
    path = rest.rstrip("/")
    if scheme in BUCKET_SCHEMES and (path.startswith("/") or "//" in path):
        fixed = "/".join(part for part in path.split("/") if part)
        raise RemoteURLError(
            f"{url}: an empty path segment ('//' or no bucket) names no object; did you mean "
            f"{scheme}://{fixed}?"
        )


def meant_url(path: str | os.PathLike[str]) -> str:
    """``" (did you mean s3://bucket/x?)"`` for a local path that is a mistyped URL
    (``s3:/bucket/x``, ``s3//bucket/x``), else ``""``: said where no such folder exists."""
    found = _LOOKS_LIKE_URL.fullmatch(os.fspath(path))
    if found is None:
        return ""
    return f" (did you mean {found.group(1).lower()}://{found.group(2)}?)"


def _where(url: str, key: str, endpoint: str) -> str:
    name = f"{url.rstrip('/')}/{key}" if key else url.rstrip("/")
    return f"{name} (endpoint {endpoint or 'the default endpoint'})"


def bucket_of(url: str) -> str:
    """``"s3://bucket/a/b"`` -> ``"bucket"``."""
    return url.partition("://")[2].split("/", 1)[0]


def denied(url: str, key: str, endpoint: str, said: str) -> RemoteAccessError:
    """The one line of a call the server refused (401/403), or made without credentials:
    where credentials come from and the bucket's policy; a refusal is never retried."""
    # (a 401 with keys set says "lacked valid authentication credentials": refused, not none)
    family, looked = _family(url), credentials_for(url)
    if any(m in said for m in _METADATA) or said == NO_CREDENTIALS:
        public = ""
        if family is not None:
            noun = "container" if family == "az" else "bucket"
            public = f", or for a public {noun} pass storage_options={{'skip_signature': True}}"
        return RemoteAccessError(
            f"{_where(url, key, endpoint)}: no credentials found (looked in {looked}); "
            f"set them{public}"
        )
    if family is None:
        return RemoteAccessError(
            f"{_where(url, key, endpoint)}: access denied ({said}); check the credentials "
            f"({looked})"
        )
    noun = "container" if family == "az" else "bucket"
    return RemoteAccessError(
        f"{_where(url, key, endpoint)}: access denied ({said}); check the credentials "
        f"({looked}) and the {noun}'s policy for {bucket_of(url)!r}"
    )


def no_bucket(url: str, endpoint: str) -> RemoteNotFoundError:
    """The one line of a call to a bucket that is not there."""
    family = _family(url)
    noun = "container" if family == "az" else "bucket"
    setting = f" ({_SET_ENDPOINT[family]})" if family is not None else ""
    error = RemoteNotFoundError(
        f"{url}: {noun} {bucket_of(url)!r} does not exist at "
        f"{endpoint or 'the default endpoint'}; check the URL and the endpoint{setting}, or "
        f"create the {noun}"
    )
    error.no_bucket = True
    return error


def no_object(url: str, key: str, endpoint: str) -> RemoteNotFoundError:
    """The one line of a GET of an object that is not there (its bucket is)."""
    return RemoteNotFoundError(f"{_where(url, key, endpoint)} does not exist")


def changed(url: str, key: str, endpoint: str, said: str = "") -> RemoteChangedError:
    """The one line of a read of an object deleted or overwritten since the snapshot that
    lists it was opened (a 404, or another ETag)."""
    why = f" ({said})" if said else ""
    return RemoteChangedError(
        f"{_where(url, key, endpoint)} was deleted or overwritten since the snapshot was "
        f"opened{why}: reopen the store, or rebuild it"
    )


def refused(status_text: str) -> bool:
    """Whether a client's text of an error is an HTTP 401 or 403 (obstore reports a LIST's
    as a generic error; botocore names S3's codes: a wrong key or secret)."""
    return any(m in status_text for m in _REFUSED)


_REFUSED = (
    "403 Forbidden",
    "401 Unauthorized",
    "AccessDenied",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "ExpiredToken",
    "InvalidToken",
)


def filesystem(
    url: str,
    options: Mapping[str, Any],
    timeout: float | None,
    doing: str,
    attempts: int | None = None,
) -> tuple[Any, str]:
    """fsspec's filesystem of ``url`` and its root path (``doing``: what needs it, named when
    fsspec is missing). On S3, botocore's own bounds (60 s each by default) are put under
    ``timeout`` (connect: at most 10 s) and its tries to ``attempts`` (None: its default),
    botocore's and s3fs's own loops alike (the instance is then this caller's, not fsspec's
    shared one, whose tries are its other users')."""
    try:
        from fsspec.core import url_to_fs
    except ImportError:  # pragma: no cover - torch depends on fsspec
        raise ImportError(
            f"{doing} {url} needs fsspec. To install:\n  pip install 'lading[remote]'"
        ) from None
    check_url(url)
    options = dict(options)
    tries = None  # s3fs's own loop's, where this caller sets them (on an instance of its own)
    if timeout is not None and url.startswith(("s3://", "s3a://")):
        config = dict(options.get("config_kwargs") or {})
        config.setdefault("connect_timeout", min(timeout, 10.0))
        config.setdefault("read_timeout", timeout)
        if attempts is not None:
            config.setdefault("retries", {"total_max_attempts": attempts})  # (not max_attempts)
            options.setdefault("skip_instance_cache", True)
            tries = attempts
        options["config_kwargs"] = config
    try:
        fs, root = url_to_fs(url.rstrip("/"), **options)
    except OSError as e:  # a filesystem that connects when made (ftp://, sftp://, ...)
        said = f"{type(e).__name__}: {first_line(e)}"
        if isinstance(e, PermissionError):
            raise denied(url, "", endpoint_of(url, options), said) from e
        if isinstance(e, FileNotFoundError):
            raise RemoteNotFoundError(f"{doing} {url}: {said}; check the URL") from e
        host = public_endpoint(url.partition("://")[2].split("/", 1)[0])
        raise RemoteReadError(
            f"{doing} {url}: could not reach {host} ({said}); check the host name and port "
            "in the URL, that the server is up and reachable from here, and the storage_options"
        ) from e
    except ImportError as e:  # fsspec's own words ("Install s3fs to access S3") name no extra
        raise ImportError(
            f"{doing} {url} needs fsspec's filesystem for it ({e}). To install: pip install "
            "'lading[remote]' (s3:// through obstore or s3fs; other schemes: fsspec's package "
            "for them, such as gcsfs or adlfs)"
        ) from None
    if tries is not None and isinstance(getattr(fs, "retries", None), int):
        fs.retries = tries  # s3fs's loop around botocore's (a timeout, a reset, SlowDown)
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
        self.endpoint = endpoint_of(self.url, options, "fsspec")
        # one attempt each: ours are the retries (botocore's 4 of a 503, with its backoff,
        # spent a whole attempt's time inside it)
        self.options = dict(options)  # their names only ever printed
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
        for attempt, pause in enumerate(self.deadline.pauses(), 1):
            time.sleep(pause)
            try:
                found = self._once(method, args, kwargs)
            except _PERMANENT as e:
                raise self._final(e, args[0] if args else "") from None
            except TypeError as e:  # s3fs passes storage options on to botocore's session
                raise RemoteURLError(
                    f"{self.url}: the storage options {sorted(self.options)} were not all "
                    f"understood ({first_line(e)}); check their names in the docs of "
                    f"{type(self.fs).__name__}"
                ) from None
            except Exception as e:  # botocore's and aiohttp's errors are not all OSErrors
                if refused(str(e)) or type(e).__name__ in _NO_KEYS:
                    raise self._final(e, args[0] if args else "") from None
                if isinstance(e, (asyncio.TimeoutError, concurrent.futures.TimeoutError)):
                    self.deadline.no_answer(what, self.endpoint, attempt)
                last = e
                continue
            if want < 0 or len(found) == want:
                return found
            last = OSError(f"{len(found)} bytes came back for the {want} asked")
        raise RemoteReadError(
            self.deadline.gave_up(what, self.endpoint, last, "; nothing was staged")
        )

    def _final(self, error: BaseException, path: object) -> BaseException:
        """A failure retrying cannot fix, as one line of the remote family where it is one
        (no bucket, no object, access denied, no credentials)."""
        text = f"{type(error).__name__}: {first_line(error)}"
        key = str(path)[len(self.root) + 1 :] if str(path).startswith(self.root + "/") else ""
        if isinstance(error, FileNotFoundError):
            if "bucket" in str(error).lower():
                return no_bucket(self.url, self.endpoint)
            return no_object(self.url, key, self.endpoint)
        if isinstance(error, PermissionError) or refused(str(error)):
            return denied(self.url, key, self.endpoint, text)
        if type(error).__name__ in _NO_KEYS:
            return denied(self.url, key, self.endpoint, NO_CREDENTIALS)
        return error

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


def first_line(error: BaseException) -> str:
    """An error's first line (300 characters at most; its type's name where it says nothing),
    with the operating system's reason where a client's debug dump holds it further down
    (:func:`lading.deadline.failure`)."""
    return failure(error)
