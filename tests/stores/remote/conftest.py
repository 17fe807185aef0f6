"""A local S3 for the remote-store tests: moto behind the latency proxy (30 ms ± 10 per request)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from lading.stores.remote.localserver import LocalS3

_buckets = itertools.count()


@pytest.fixture(scope="session")
def s3() -> Iterator[LocalS3]:
    """The local S3 (one server for the session; tests use buckets of their own)."""
    pytest.importorskip("moto.server", reason="the local S3 needs moto: pip install 'moto[server]'")
    pytest.importorskip("aiohttp", reason="the local S3's proxy needs aiohttp")
    with LocalS3(latency=0.03, jitter=0.01) as server:
        yield server


@pytest.fixture
def bucket(s3: LocalS3) -> str:
    """A fresh bucket on the local S3; the proxy's counters and faults are reset."""
    name = f"bucket-{next(_buckets)}"
    s3.make_bucket(name)
    s3.reset()
    return name
