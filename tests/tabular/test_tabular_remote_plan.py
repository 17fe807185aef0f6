"""Issue 48 item 5: a second parquet epoch's hits >= 0.8x Belady's on the chunk trace (the
epoch's order of row groups, known before it starts), at caps of 25 % and 10 % of the files,
as tests/remote/test_plane_order.py checks for documents.

The cache met it already (epoch 2 fetched 0.77 of the bytes it used at 25 %, Belady's line
0.76); the figure did not: a row group split between two chunks is announced at both and read
once (the reader keeps it), and the window's count of what it fetched stayed at 1 after that
read, so the next epoch's read of it from the cache was counted a miss (0.07-0.08 hits against
Belady's 0.24 was measured here before the fix: 0.31x; 0.94x after).
"""

from __future__ import annotations

import time
from pathlib import Path

import fsspec
import numpy as np
import pytest

from belady import belady
from lading.tabular import PartitionedParquet
from lading.tabular.plan import Piece
from lading.tabular.remote import RemoteParquet
from lading.testing import LocalS3
from lading.world import World

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


@pytest.mark.slow  # ~40 s: 2 x 640 row groups through the local S3
@pytest.mark.parametrize("share", [0.25, 0.10])
def test_a_second_epoch_hits_at_least_0_8_ofbelady(
    s3: LocalS3, bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, share: float
) -> None:
    rng = np.random.default_rng(0)
    urls, size = [], 0
    for i in range(4):
        n = 8000
        items = [rng.integers(0, 1000, 12).tolist() for _ in range(n)]
        table = pa.table({"session_id": np.arange(n) + i * n, "items": items})
        path = tmp_path / f"p{i}.parquet"
        pq.write_table(table, path, row_group_size=50)  # ~3 KB a row group, ~11 a region
        size += path.stat().st_size
        fsspec.filesystem("s3").put(str(path), f"s3://{bucket}/s/p{i}.parquet")
        urls.append(f"s3://{bucket}/s/p{i}.parquet")
    trace: list[tuple[str, int]] = []
    read = RemoteParquet.read

    def recorded(self: RemoteParquet, pieces, step, columns=None):  # type: ignore[no-untyped-def]
        pieces = list(pieces)
        if columns is None:
            trace.extend((p.path, p.row_group) for p in pieces)
        return read(self, pieces, step, columns)

    monkeypatch.setattr(RemoteParquet, "read", recorded)
    cap = int(share * size)
    loader = PartitionedParquet(
        urls, 64, columns=["session_id", "items"], list_columns={"items": 12}, world=World(),
        cache=tmp_path / f"cache-{time.time_ns()}", cache_bytes=cap, buffer_rows=50,
    )  # fmt: skip
    figures = []
    for _ in range(2):
        before = loader.cache_stats()
        for _batch in loader:
            pass
        after = loader.cache_stats()
        figures.append((after["hits"] - before["hits"], after["misses"] - before["misses"]))
    loader.close()
    assert loader.remote is not None
    names = {k: i for i, k in enumerate(sorted(set(trace)))}
    sizes = [0] * len(names)
    for (url, group), i in names.items():
        sizes[i] = sum(b - a for a, b in loader.remote.spans(Piece(url, group, 0)))
    ids = [names[k] for k in trace]
    optimum = float(np.mean(belady(ids, sizes, cap - cap // 8)[len(ids) // 2 :]))
    hits, misses = figures[1]
    got = hits / (hits + misses)
    print(f"{share:.0%}: epoch 2 hits {got:.3f}, Belady {optimum:.3f} ({got / optimum:.2f}x)")
    assert got >= 0.8 * optimum
