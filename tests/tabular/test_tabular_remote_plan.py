"""Issue 48 item 2, the target: a second parquet epoch's hits >= 0.8x Belady's on the chunk
trace (the epoch's order of row groups, known before it starts), at caps of 25 % and 10 % of
the files, as tests/remote/test_plane_order.py checks for documents.

Not met yet (xfail, strict: it fails the run once met, to be made a plain test). Measured
here: 0.06-0.08 of reads hit against Belady's 0.27 at 25 %, 0.03 against 0.11 at 10 %
(0.22-0.32x). Tried without gain: ranking regions by their soonest use (0.062 at 25 %),
carrying forward every block before Belady's line when a region goes (0.066), passing
``planned`` on parquet reads (0.077), ``Planner(near=16)`` (0.066). The node cache is not
where it is lost: the same-sized blocks (640 of 2.7-3.2 KB, each once an epoch in a new
order) replayed through ``NodeCache`` and ``Planner`` as tests/remote/test_plane_order.py
does (one block a step, planned, announced 8-16 ahead) hit 0.227 against Belady's 0.217 at
25 % and 0.091 against 0.086 at 10 %. The parquet route's announce (a chunk's row groups at
its first batch, 4 chunks ahead, reads on the read-ahead thread) is what to look at next.
"""

from __future__ import annotations

import heapq
import time
from pathlib import Path

import fsspec
import numpy as np
import pytest

from lading.tabular import PartitionedParquet
from lading.tabular.plan import Piece
from lading.tabular.remote import RemoteParquet
from lading.testing import LocalS3
from lading.world import World

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def _belady(trace: list[int], sizes: list[int], cap: int) -> list[bool]:
    """Hits of keeping the blocks needed soonest (evict the furthest next use)."""
    nexts, last = [0] * len(trace), {}
    for i in range(len(trace) - 1, -1, -1):
        nexts[i], last[trace[i]] = last.get(trace[i], 1 << 60), i
    held: dict[int, int] = {}
    heap: list[tuple[int, int]] = []
    used, hits = 0, []
    for i, d in enumerate(trace):
        hits.append(d in held)
        if d not in held:
            while used + sizes[d] > cap:
                far, x = heapq.heappop(heap)
                if held.get(x) == -far:
                    used -= sizes[x]
                    del held[x]
            used += sizes[d]
        held[d] = nexts[i]
        heapq.heappush(heap, (-nexts[i], d))
    return hits


@pytest.mark.slow  # ~40 s: 2 x 640 row groups through the local S3
@pytest.mark.xfail(strict=True, reason="issue 48 item 2: 0.22-0.32x Belady measured, 0.8x asked")
@pytest.mark.parametrize("share", [0.25, 0.10])
def test_a_second_epoch_hits_at_least_0_8_of_belady(
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
    optimum = float(np.mean(_belady(ids, sizes, cap - cap // 8)[len(ids) // 2 :]))
    hits, misses = figures[1]
    got = hits / (hits + misses)
    print(f"{share:.0%}: epoch 2 hits {got:.3f}, Belady {optimum:.3f} ({got / optimum:.2f}x)")
    assert got >= 0.8 * optimum
