"""How a remote store is read: the node cache's directory and cap, the client, the planner.

Defaults come from the environment, so a command that takes a store path (``lading train``,
``lading bench``) reads ``s3://`` stores without new flags: the node cache is ``remote/`` in
lading's cache folder (``$LADING_CACHE``, else ``$XDG_CACHE_HOME/lading``, else
``~/.cache/lading``: the folder ``lading bench`` keeps its data in), and its cap is
``LADING_REMOTE_CACHE_BYTES`` (``8G``, ``500M``, a byte count; default 8 GiB, or half the free
space of that filesystem if less).
Credentials and endpoints are the object store's own variables (``AWS_ENDPOINT_URL``, ...).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lading.deadline import remote_timeout
from lading.remote.fetch import DEFAULT_IN_FLIGHT, DEFAULT_RETRIES, Fetcher
from lading.remote.ranges import DEFAULT_GAP, DEFAULT_WASTE

if TYPE_CHECKING:
    from lading.remote.cache import NodeCache

CACHE_ENV = "LADING_CACHE"
CACHE_BYTES_ENV = "LADING_REMOTE_CACHE_BYTES"
DEFAULT_CACHE_BYTES = 8 << 30
UPLOAD_RATE_ENV = "LADING_UPLOAD_MIN_RATE"
# bytes/s an uploaded file is assumed to move at, at least: 8 files at once need 8 MiB/s
# (64 Mb/s) of uplink; a 1.2 GB file may take 20 min before a silent server is called dead
DEFAULT_UPLOAD_RATE = 1 << 20
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SECRET = re.compile(r"secret|key|token|password|passwd|credential|session|auth|sas", re.I)
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)


def parse_bytes(value: int | str, what: str = "cache_bytes") -> int:
    """``8G`` -> 8 GiB, ``500M``, ``1.5T``, ``123`` (bytes) -> bytes.

    Raises:
        ValueError: naming ``what``, the value and the forms accepted.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise ValueError(f"{what}={value}: need >= 0 bytes")
        return value
    found = _SIZE.match(str(value))
    if found is None:
        raise ValueError(
            f"{what}={value!r}: expected bytes as a number with an optional K, M, G or T "
            "(binary units), e.g. 8G or 500M"
        )
    return int(float(found.group(1)) * _UNITS[found.group(2).upper()])


def default_cache_dir() -> Path:
    """``remote/`` in ``$LADING_CACHE`` (``~`` expanded), else in ``$XDG_CACHE_HOME/lading``,
    else in ``~/.cache/lading`` (the rule of ``lading.bench.data.cache_dir``)."""
    env = os.environ.get(CACHE_ENV)
    if env:  # (~ expanded: "~/x" made ./~/x in the current folder)
        return Path(env).expanduser() / "remote"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "lading" / "remote"


def _check_folder(directory: Path) -> None:
    """Refuse a cache path that is a file, or lies below one, naming ``cache=`` and the fix
    (else the first write into it fails on an inner path, naming neither)."""
    for at in (directory, *directory.parents):
        if at.exists():
            if not at.is_dir():
                raise ValueError(
                    f"cache={os.fspath(directory)!r}: {at} is a file, and the node cache is a "
                    "folder; pass a folder on node-local disk (or leave cache out for "
                    f"{default_cache_dir()})"
                )
            return


def _cap_in_environment() -> bool:
    """Whether ``$LADING_REMOTE_CACHE_BYTES`` asks for a cap (set, and not blank: a blank is
    none asked, as :func:`default_cache_bytes` reads it)."""
    return bool(os.environ.get(CACHE_BYTES_ENV, "").strip())


def default_cache_bytes(directory: Path) -> int:
    """``$LADING_REMOTE_CACHE_BYTES``, else 8 GiB or half the free space where the cache is."""
    env = os.environ.get(CACHE_BYTES_ENV, "").strip()
    if env:
        return parse_bytes(env, CACHE_BYTES_ENV)
    probe = directory
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return min(DEFAULT_CACHE_BYTES, shutil.disk_usage(probe).free // 2)


def default_timeout() -> float:
    """``$LADING_REMOTE_TIMEOUT`` (seconds a remote call may take per attempt), else 20: the
    one reading of it, shared with staging a URL (:func:`lading.disk.remote.remote_timeout`).

    Raises:
        ValueError: the variable is not a positive number.
    """
    return remote_timeout()


def default_upload_rate() -> int:
    """``$LADING_UPLOAD_MIN_RATE`` (bytes a second, ``1M``, ``50M``), else 1 MiB/s.

    Raises:
        ValueError: the variable is not a positive byte count.
    """
    env = os.environ.get(UPLOAD_RATE_ENV)
    return DEFAULT_UPLOAD_RATE if not env else positive_rate(env, UPLOAD_RATE_ENV)


def positive_rate(value: int | str, what: str = "upload_min_rate") -> int:
    """A rate in bytes a second (``1M``, ``500K``, a number) > 0.

    Raises:
        ValueError: naming ``what``, the value and the forms accepted.
    """
    rate = parse_bytes(value, what)
    if rate <= 0:
        raise ValueError(f"{what}={value!r}: expected bytes a second > 0, e.g. 1M or 50M")
    return rate


def redacted(options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` with the value of every key that may hold a secret (``secret``, ``key``,
    ``token``, ``password``, ``session``, ...) replaced by ``***``, nested dicts too."""
    return {
        k: redacted(v) if isinstance(v, Mapping) else "***" if _SECRET.search(str(k)) else v
        for k, v in options.items()
    }


@dataclass(frozen=True)
class RemoteSettings:
    """Everything a remote store needs besides its URL (pickled with it to workers).

    Attributes:
        cache: the node cache directory (node-local disk; every process of the node shares it).
        cache_bytes: the node cache's hard cap in bytes of cached blocks: the payload file's size.
        backend: ``"auto"``, ``"obstore"`` or ``"fsspec"`` (see
            :func:`lading.remote.clients.open_client`).
        options: backend options (e.g. ``{"endpoint_url": ...}``); credentials are better in
            the environment: these are pickled to workers (never printed: the repr redacts
            every value whose key may name a secret).
        policy: eviction policy, ``"next-use"`` (default: the region whose blocks are
            needed latest goes) or ``"fifo"`` (the region filled longest ago: a baseline); see
            :mod:`lading.remote.cache.places`.
        in_flight, retries: the fetcher's (:class:`~lading.remote.fetch.Fetcher`).
        timeout: seconds each attempt of every call on the read path may take (open, list,
            stage, read), default ``$LADING_REMOTE_TIMEOUT`` or 20; a call fails after
            ``retries + 1`` attempts with an error naming the endpoint, the object and this.
        upload_min_rate: bytes a second a build's upload of one file is assumed to reach
            at least, default ``$LADING_UPLOAD_MIN_RATE`` or 1 MiB: a PUT of ``n`` bytes
            (a whole file, obstore's retries of its parts included) fails after
            ``timeout + n / upload_min_rate`` seconds, naming the object and both settings.
        max_gap, max_waste: the planner's (see :func:`~lading.remote.ranges.coalesce`).
        index_bytes: the cache folder's bytes besides the payload file (staged indexes,
            parquet footers, the ledger): default sized from the snapshot opened
            (:func:`lading.remote.stage.index_budget`); the folder holds at most
            ``cache_bytes + index_bytes``.
        cap_given: ``cache_bytes`` was asked for; a folder made with another cap is then
            refused (else the folder's own cap is taken).
        region_bytes: the payload's region size (default: :mod:`lading.remote.cache.regions`).
    """

    cache: Path
    cache_bytes: int
    backend: str = "auto"
    options: Mapping[str, Any] = field(default_factory=dict, repr=False)
    policy: str = "next-use"
    in_flight: int = DEFAULT_IN_FLIGHT
    retries: int = DEFAULT_RETRIES
    timeout: float = field(default_factory=default_timeout)
    upload_min_rate: int = field(default_factory=default_upload_rate)
    max_gap: int = DEFAULT_GAP
    max_waste: float = DEFAULT_WASTE
    index_bytes: int | None = None  # the folder besides the payload (None: remote.stage's)
    cap_given: bool = True  # cache_bytes was asked for (else the folder's own, if made before)
    region_bytes: int | None = None  # the payload's regions (default: regions.Layout.of)

    def __repr__(self) -> str:
        shown = {f.name: getattr(self, f.name) for f in fields(self)}
        shown["options"] = redacted(self.options)
        return "RemoteSettings(" + ", ".join(f"{k}={v!r}" for k, v in shown.items()) + ")"

    def fetcher(self, url: str, pin_every: bool = False) -> Fetcher:
        """A fetcher of ``url``'s objects with these settings, under the node's one cap on
        requests in flight (``cache/inflight``, shared by every process of the node). The
        first call of every remote open: the cache folder's entries are checked here
        (:func:`lading.remote.cache.folder.check`), before anything is staged in it.

        Raises:
            CacheFolderError: an entry lading owns in the cache folder is a link.
        """
        from lading.remote.cache.folder import INFLIGHT, check
        from lading.remote.clients import open_client

        check(Path(self.cache))

        make = functools.partial(open_client, url, self.backend, self.options, self.timeout)
        return Fetcher(
            make,
            in_flight=self.in_flight,
            retries=self.retries,
            timeout=self.timeout,
            node=Path(self.cache) / INFLIGHT,
            pin_every=pin_every,
        )

    def index_budget(self, staged: int) -> int:
        """The cache folder's bytes besides the payload file, for a snapshot staging ``staged``
        bytes (:func:`lading.remote.stage.index_budget`)."""
        from lading.remote.stage import index_budget

        return index_budget(self.index_bytes, self.folder_cap(), staged)

    def folder_cap(self) -> int:
        """The cap the cache folder holds to: the one given, else the folder's own (made
        before, by its first user: a process that names no cap takes it), else the default
        it will be made with."""
        if self.cap_given:
            return self.cache_bytes
        from lading.remote.cache.node import node_of, release

        node = node_of(self.cache, self.cache_bytes, False, self.region_bytes)
        try:
            return node.layout.size
        finally:
            release(node)

    def node_cache(
        self,
        fetcher: Fetcher,
        namespace: str,
        etags: Mapping[str, str | None],
        versions: Mapping[str, str] | None = None,
    ) -> NodeCache:
        """The view of the node cache these settings name for one snapshot's objects
        (``versions``: each object's, where the namespace does not fix it)."""
        from lading.remote.cache import NodeCache, node_of

        node = node_of(self.cache, self.cache_bytes, self.cap_given, self.region_bytes)
        return NodeCache(
            node,
            fetcher,
            namespace,
            etags,
            versions=versions,
            policy=self.policy,
            max_gap=self.max_gap,
            max_waste=self.max_waste,
        )

    def check_cap(self) -> None:
        """Refuse, before any request, a cache folder made with another cap than the one
        given (a reader that opens its node cache at its first read, as parquet datasets do,
        met the refusal at its first batch, in a DataLoader worker wrapped in its traceback).

        Raises:
            CacheSettingsError: the folder was made with another cap.
        """
        if self.cap_given:
            from lading.remote.cache.node import node_of, release

            release(node_of(self.cache, self.cache_bytes, True, self.region_bytes))

    @classmethod
    def from_environment(cls) -> RemoteSettings:
        """The defaults: the cache directory and cap the environment gives (module doc)."""
        cache = default_cache_dir()
        return cls(cache, default_cache_bytes(cache), cap_given=_cap_in_environment())

    @classmethod
    def of(
        cls,
        cache: str | os.PathLike[str] | None,
        cache_bytes: int | str | None,
        options: Mapping[str, Any] | None = None,
        **more: Any,
    ) -> RemoteSettings:
        """Settings from the arguments of ``open_store``; ``None`` means the default.

        Raises:
            TypeError: an unknown setting, naming the known ones.
        """
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(more) - known)
        if unknown:
            raise TypeError(f"unknown remote store settings {unknown}; known: {sorted(known)}")
        if cache is not None and not os.fspath(cache).strip():  # (the current folder was it)
            raise ValueError(
                f"cache={cache!r}: an empty path would make the current folder the node "
                f"cache; name a folder on node-local disk, or leave cache out for "
                f"{default_cache_dir()}"
            )
        directory = Path(cache).expanduser() if cache is not None else default_cache_dir()
        _check_folder(directory)
        cap = (
            parse_bytes(cache_bytes) if cache_bytes is not None else default_cache_bytes(directory)
        )
        if isinstance(more.get("index_bytes"), str):
            more["index_bytes"] = parse_bytes(more["index_bytes"], "index_bytes")
        if isinstance(more.get("upload_min_rate"), str):
            more["upload_min_rate"] = positive_rate(more["upload_min_rate"])
        given = cache_bytes is not None or _cap_in_environment()
        made = cls(directory, cap, options=dict(options or {}), cap_given=given)
        return replace(made, **more)
