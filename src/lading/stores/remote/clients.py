"""Opening a client for a URL: picks the backend (obstore where usable, else fsspec).

It lives apart from :mod:`~lading.stores.remote.objects` (the seam both backends implement) so
that the seam imports neither backend: each backend imports the seam, this module imports them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lading.stores.remote.objects import BACKENDS, ObjectClient, split_url


def _obstore_usable() -> bool:
    try:
        from lading.stores.remote import client_obstore
    except ImportError:
        return False
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
        from lading.stores.remote.client_obstore import SCHEMES

        backend = "obstore" if scheme in SCHEMES and _obstore_usable() else "fsspec"
    if backend == "obstore":
        from lading.stores.remote.client_obstore import ObstoreClient

        return ObstoreClient(url, options, timeout)
    from lading.stores.remote.client_fsspec import FsspecClient

    return FsspecClient(url, options, timeout)
