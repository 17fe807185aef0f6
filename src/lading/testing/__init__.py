"""What a user needs to try lading offline: a local S3 (:class:`LocalS3`).

``python -m lading.testing`` starts it and prints its URL on the first line; ``with LocalS3()
as s3:`` starts it for a block of Python (it sets ``AWS_ENDPOINT_URL`` and test credentials,
which child processes inherit). moto serves the buckets on loopback, behind a proxy that gives
every request a real S3 GET's latency (30 ± 10 ms), counts requests and injects faults: remote
stores (``s3://...``) built, read and measured without a cloud account.
Needs the ``s3local`` extra: ``pip install 'lading[s3local]'`` (moto's server, aiohttp).
"""

from __future__ import annotations

from lading.testing.localserver import LocalS3

__all__ = ["LocalS3"]
