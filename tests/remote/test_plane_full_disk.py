"""Reads of the node cache when the disk under it is full: the bytes of every span, whatever
the spans are, fetched around the cache; the claims of a process that met the full disk go.

Found by two reviews of the full-disk change (2026-12-07): the first version raised
``RemoteReadError`` ("not in the GETs made for it") for overlapping spans whose union passes
a region (the locality shuffle's reads: a region each, sharing a token with the next), where
the ledger could not record an object; and a carried block whose write met ENOSPC raised a
plain ``OSError`` that the read did not take for the full disk it was.
"""

from __future__ import annotations

import errno
import os
import warnings
from pathlib import Path

import pytest

from lading.errors import OutOfSpaceError
from lading.remote.cache import NodeCache, node_of
from lading.remote.cache.claims import Claims
from lading.remote.cache.ledger import Ledger
from lading.remote.clients import open_client
from lading.remote.fetch import Fetcher

DATA = os.urandom(12_000)
SOURCES = {"text.bin": DATA, "b.bin": DATA[::-1]}
CASES = {  # regions of 5,000 bytes (a 10,000-byte cap)
    "overlapping past a region": [("text.bin", 0, 3000), ("text.bin", 2999, 6000)],
    "duplicate, empty, two objects": [
        ("text.bin", 10, 20),
        ("text.bin", 10, 20),
        ("text.bin", 5, 5),
        ("b.bin", 0, 100),
        ("text.bin", 15, 30),
    ],
    "larger than a region": [("text.bin", 0, 11_000)],
    "overlapping, larger than a region": [("text.bin", 0, 100), ("text.bin", 50, 11_000)],
}


def _cache(tmp_path: Path) -> NodeCache:
    folder = tmp_path / "objects"
    folder.mkdir()
    for name, data in SOURCES.items():
        (folder / name).write_bytes(data)
    url = f"file://{folder}"
    return NodeCache(
        node_of(tmp_path / "cache", 10_000), Fetcher(lambda: open_client(url, "fsspec")), url
    )


def _full(*args: object, **kwargs: object) -> None:
    raise OutOfSpaceError(errno.ENOSPC, "the disk under this node cache is full")


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("refused", ["claim", "object"])
def test_every_span_reads_its_bytes_around_a_full_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str, refused: str
) -> None:
    cache = _cache(tmp_path)
    monkeypatch.setattr(Claims, "claim", _full)
    if refused == "object":
        monkeypatch.setattr(Ledger, "object_id", _full)
    spans = CASES[case]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # (said once: tested elsewhere)
        got = cache.read(spans)
    assert got == [SOURCES[k][a:b] for k, a, b in spans]
    cache.close()


def test_a_claim_whose_writes_meet_a_full_disk_releases_and_reads_around(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a claim's transaction, its carried blocks are written and its GETs started; a
    full disk there (ENOSPC from the data file) raised a bare ``OSError`` the read did not
    take for a full disk, and before this change's first version left the claims held. Now
    the claims go and the read fetches around the cache."""

    def no_room(self: Claims, *args: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    cache = _cache(tmp_path)
    monkeypatch.setattr(Claims, "_start", no_room)  # (in the same step as the carried writes)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        assert cache.read([("text.bin", 0, 100), ("b.bin", 0, 50)]) == [DATA[:100], DATA[::-1][:50]]
    with cache.ledger.read() as conn:
        held = conn.execute("SELECT count(*) FROM blocks WHERE owner IS NOT NULL").fetchone()[0]
    assert held == 0
    cache.close()
