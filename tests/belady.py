"""Belady's optimum of a cache of ``cap`` bytes on a trace: what the node cache's hits are
measured against (documents, parquet row groups)."""

from __future__ import annotations

import heapq


def belady(trace: list[int], sizes: list[int], cap: int) -> list[bool]:
    """Hits of keeping the documents needed soonest (evict the furthest next use)."""
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
