"""An object of an open snapshot overwritten in place in the bucket (same size, other bytes).

A GET sends ``If-Match`` with the ETag the snapshot recorded at most once a second an object
(:data:`lading.remote.fetch.PIN_S`), so reads within a second of the last check may return
the new bytes (documented). What must not happen: the new bytes staying in the node cache
once the replacement was seen, served again to this process, another, or a reopen (two
versions mixed)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import lading
from conftest import write
from lading.errors import RemoteChangedError
from lading.remote.clients import open_client
from lading.testing import LocalS3


def _read(store: Any, ids: list[str]) -> list[str] | str:
    try:
        return list(store.get_many(ids))
    except RemoteChangedError:
        return "changed"


def test_blocks_of_a_replaced_object_are_dropped_once_it_is_seen(
    s3: LocalS3, bucket: str, tmp_path: Path
) -> None:
    """Read within the second after the overwrite: the new bytes, cached. Once a pinned GET
    is refused, they were served again after the error and after a reopen (``EVIL`` text
    under ids of the old snapshot). Now the object's blocks are dropped from the ledger when
    the refusal is seen and every later GET of it is pinned: each read after it is the old
    bytes or ``RemoteChangedError``, in this store and in a reopened one."""
    source = write(
        tmp_path / "docs.tsv", "".join(f"d{i}\ttext of document {i}\n" for i in range(200))
    )
    url = f"s3://{bucket}/docs"
    lading.build_store(source, url, cache=str(tmp_path / "up"), progress=False)
    cache = tmp_path / "node"
    store = lading.open_store(url, cache=cache, cache_bytes="1M")
    assert _read(store, ["d1"]) == ["text of document 1"]  # pinned: checked now
    client = open_client(url)
    name = next(n for n in client.list() if n.endswith("text.bin"))
    client.put(name, client.get(name).replace(b"text of document", b"EVIL of document"))
    _read(store, ["d150"])  # within the second: may be the new bytes (cached)
    time.sleep(1.2)
    assert _read(store, ["d120"]) == "changed"  # a pinned GET: refused
    for ids in (["d150"], ["d150", "d1"]):
        got = _read(store, ids)
        assert got == "changed" or all("EVIL" not in text for text in got), got
    store.close()
    again = lading.open_store(url, cache=cache, cache_bytes="1M")
    for ids in (["d150"], ["d1", "d150"], ["d120"]):
        got = _read(again, ids)
        assert got == "changed" or all("EVIL" not in text for text in got), got
    again.close()
