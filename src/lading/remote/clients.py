"""Opening a client for a URL: picks the backend (obstore where usable, else fsspec).

It lives apart from :mod:`~lading.remote.objects` (the seam both backends implement) so
that the seam imports neither backend: each backend imports the seam, this module imports them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lading.remote.objects import (
    BACKENDS,
    ObjectClient,
    RemoteNotSupportedError,
    split_url,
)


def _obstore_usable() -> bool:
    """obstore is installed (looked for, not imported) and usable in this process."""
    import importlib.util

    if importlib.util.find_spec("obstore") is None:
        return False  # (client_obstore imports it on first use: importing that proves none)
    from lading.remote import client_obstore

    return client_obstore.usable_here()


def open_client(
    url: str,
    backend: str = "auto",
    options: Mapping[str, Any] | None = None,
    timeout: float | None = None,
) -> ObjectClient:
    """A client for the objects below ``url``.

    Args:
        url: ``s3://bucket/prefix``, ``gs://...``, or any fsspec URL.
        backend: ``"obstore"``, ``"fsspec"``, or ``"auto"``: obstore where it is installed,
            handles the scheme and is usable in this process (see the module docstring),
            else fsspec.
        options: backend options (obstore config keys or fsspec storage options, e.g.
            ``{"endpoint_url": ...}``); the environment supplies the rest.
        timeout: seconds a request of the read path may take (the client's own bound
            under the fetcher's; None: the backend's default).

    Raises:
        ValueError: an unknown backend or a URL without a scheme.
        ImportError: the backend is not installed (the message says what to install).
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose from {sorted(BACKENDS)}")
    scheme, _ = split_url(url)
    if backend == "auto":
        from lading.remote.client_obstore import SCHEMES

        backend = "obstore" if scheme in SCHEMES and _obstore_usable() else "fsspec"
    if backend == "obstore":
        from lading.remote.client_obstore import ObstoreClient

        return ObstoreClient(url, options, timeout)
    from lading.remote.client_fsspec import FsspecClient

    return FsspecClient(url, options, timeout)


def check_reachable(url: str, what: str) -> None:
    """Refuse ``url`` when no client here reaches its scheme (obstore's schemes, or any
    protocol fsspec knows and has installed), in one line naming the fix; before, an unknown
    scheme surfaced as fsspec's "Protocol not known" from deep inside an open.

    Raises:
        RemoteNotSupportedError: naming ``what`` (the call), the scheme and the fix.
    """
    scheme, _ = split_url(url)
    if scheme in ("az", "gs", "s3", "s3a") and _obstore_usable():
        return
    try:
        import fsspec

        fsspec.get_filesystem_class(scheme)
    except ImportError as e:  # fsspec knows it, its package is missing
        raise RemoteNotSupportedError(
            f"{what}: lading cannot reach {url}: {str(e).strip()} (the {scheme}:// client)"
        ) from None
    except ValueError:
        raise RemoteNotSupportedError(
            f"{what}: lading cannot reach {url}: no client knows {scheme}://; use s3://, gs://, "
            "az:// (or another fsspec protocol), or a local folder"
        ) from None
