"""Which lading kind a bucket's destination holds, checked before a build or a commit there.

A token corpus committed over a document store (or the reverse) leaves a destination that no
longer opens; a local build refuses it by the folder's ``meta.json``
(:meth:`lading.disk.BuildContext.check_ours`), and these do the same for a URL: before any
source is read (:func:`check_bucket_kind`) and over the manifest a merge mirrored
(:func:`refuse_kind_at`).
"""

from __future__ import annotations

import json
from typing import Any

from lading.disk.meta import META_FILE
from lading.remote.objects import PermanentError
from lading.remote.settings import RemoteSettings


def check_bucket_kind(url: str, settings: RemoteSettings, fmt: str) -> None:
    """Refuse to build a snapshot of format ``fmt`` at ``url`` where its ``meta.json`` holds
    another lading kind (a token corpus over a document store: it would no longer open), as
    a local build refuses it; before any source is read.

    Raises:
        FileExistsError: naming both kinds.
    """
    fetcher = settings.fetcher(url)
    try:
        meta = json.loads(fetcher.get_object(META_FILE))
    except (PermanentError, ValueError):
        return  # none there (or not a manifest: the commit replaces it)
    finally:
        fetcher.close()
    refuse_kind_at(url, meta, fmt)


def refuse_kind_at(url: str, meta: Any, fmt: str) -> None:
    """Refuse to commit a snapshot of format ``fmt`` over ``meta`` (the manifest at ``url``,
    or None) when that is another lading kind.

    Raises:
        FileExistsError: naming both kinds.
    """
    from lading.disk.build import KINDS, refuse_other_kind

    other = meta.get("format") if isinstance(meta, dict) else None
    if isinstance(other, str) and other.startswith("lading."):
        refuse_other_kind(url, other, fmt, KINDS.get(fmt, fmt))
