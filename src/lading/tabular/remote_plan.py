"""What the loader announces of a remote parquet dataset: the row groups each batch key reads.

A chunk (``buffer_rows`` rows: one or two row groups) is read whole at the first of its
batches and kept for the others, so only that batch's key names row groups; the loader core
(:mod:`lading.loading.announce`) hands them to :class:`~lading.tabular.remote.RemoteParquet`
a window ahead to fetch, and the epoch's whole order to evict by.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lading.loading.runs import Runs
from lading.tabular.plan import Piece, epoch_pieces, share_of_runs

# chunks announced ahead: a chunk (buffer_rows) is one or two row groups, one GET of ~30 ms
# each, read at its first batch; measured on YOOCHOOSE days in 2,048-row groups, 256-row
# batches (a chunk every 8 batches), cold cache: 1 chunk ahead ~67k sessions/s, 4 ~160k, 8
# ~130k (the local S3 at 30 ms a GET, a loaded 2-core machine: noisy)
CHUNKS_AHEAD = 4


def announced_reads(workload: Any) -> Callable[[Any], list[Piece]]:
    """``key -> the row groups the batch at key reads``: a chunk's row groups at the first of
    its batches asked about in a row (its first batch, or the first after a resume mid-chunk:
    the chunk is read whole then and kept), nothing at its other batches. The announcer asks
    about keys in order (the epoch's for the plan, then a window at a time to fetch)."""
    ordered: dict[int, list[Piece]] = {}
    last: list[tuple[int, int, int, int]] = []  # the chunk of the key asked about last

    def reads(key: Any) -> list[Piece]:
        chunk, starts, stops = key.chunks[0]
        ident = (key.epoch, key.segment, key.reader, chunk)
        if last and last[0] == ident:
            return []
        last[:] = [ident]
        if key.epoch not in ordered:
            if len(ordered) > 1:
                ordered.pop(min(ordered))
            ordered[key.epoch] = epoch_pieces(
                workload.pieces, workload.reading.seed, key.epoch, workload.reading.shuffle
            )
        share = share_of_runs(ordered[key.epoch], Runs(starts, stops))
        return list({f.piece: None for f in share.fragments})

    return reads
