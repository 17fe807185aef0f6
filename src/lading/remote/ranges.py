"""The range planner: the byte ranges some batches need, sorted and coalesced into GETs.

One GET to object storage costs ~25-30 ms however few bytes it carries (DESIGN.md, Little's
law), so neighbouring ranges are worth fetching as one when the bytes between them are few.
But merging across large gaps inflates what is read (obstore's ``get_ranges`` merges anything
under 1 MB apart: for 350-byte passages that is thousands of times the bytes used). So:

- overlapping and touching ranges merge (no byte is wasted) up to ``max_block`` bytes; past
  it the rest of a range starts a block of its own (a node cache's blocks are at most a
  region: the locality shuffle's ranges are a region each and share a token with the
  next, and merged, the window's first block found no place and every block behind it
  waited for its read; a single range larger than ``max_block`` stays one block);
- a gap of at most ``max_gap`` bytes may be merged across, smallest gaps first, while the
  wasted bytes stay within ``max_waste`` of the useful ones (0.1: at most 1.1 bytes fetched
  per byte used) and a block stays within ``max_block`` bytes;
- ``barrier(key, end, start)`` forbids a merge (a cached block lies in the gap: merging would
  fetch it again, and blocks must stay disjoint).

Every block is fetched by one GET, so GETs <= blocks <= distinct ranges, by construction.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import NamedTuple

DEFAULT_GAP = 64 * 1024  # bytes; bench_remote.py measures 0 .. 256 KiB
DEFAULT_WASTE = 0.1  # 0.25 left no room: at 2% of 100k documents 1.36x fetched / used
DEFAULT_BLOCK = 8 << 20  # a GET of 8 MiB takes ~80 ms more at 100 MB/s: enough per request
NO_STEP = 1 << 62  # the step of a range needed at no known time

Barrier = Callable[[str, int, int], bool]


class Need(NamedTuple):
    """Bytes ``[start, end)`` of object ``key``, first needed at ``step`` (a batch number)."""

    key: str
    start: int
    end: int
    step: int = NO_STEP


class Block(NamedTuple):
    """One GET: bytes ``[start, end)`` of ``key``; ``step`` is its earliest need's."""

    key: str
    start: int
    end: int
    step: int

    @property
    def size(self) -> int:
        return self.end - self.start


def coalesce(
    needs: Iterable[Need],
    max_gap: int = DEFAULT_GAP,
    max_waste: float = DEFAULT_WASTE,
    max_block: int = DEFAULT_BLOCK,
    barrier: Barrier | None = None,
) -> list[Block]:
    """The GETs that fetch ``needs``, ordered by the step they are first needed at.

    Args:
        needs: ranges to fetch (empty ones are dropped, duplicates merged).
        max_gap: largest gap (bytes) merged across.
        max_waste: gap bytes fetched at most, as a share of the useful bytes.
        max_block: largest block merged across a gap or from overlapping ranges (a single
            range may be larger).
        barrier: ``(key, end, start) -> True`` where the gap ``[end, start)`` may not be merged.

    Raises:
        ValueError: a negative or inverted range, or a negative limit.
    """
    if max_gap < 0 or max_waste < 0 or max_block < 1:
        raise ValueError(
            f"max_gap={max_gap}, max_waste={max_waste}, max_block={max_block}: "
            "gap and waste must be >= 0, max_block >= 1"
        )
    runs = _runs(needs, max_block)
    useful = sum(end - start for _, start, end, _ in runs)
    # candidate merges: (gap, index of the run on its left), smallest first
    gaps = sorted(
        (runs[i + 1][1] - runs[i][2], i)
        for i in range(len(runs) - 1)
        if runs[i][0] == runs[i + 1][0] and runs[i + 1][1] - runs[i][2] <= max_gap
    )
    budget = max_waste * useful
    left = list(range(len(runs)))  # left[i]: first run of i's group (valid at group ends)
    right = list(range(len(runs)))  # right[i]: last run of i's group (valid at group starts)
    joined = [False] * len(runs)  # joined[i]: run i and i + 1 are one block
    for gap, i in gaps:
        if gap > budget:
            break
        first, last = left[i], right[i + 1]
        if runs[last][2] - runs[first][1] > max_block:
            continue
        if barrier is not None and barrier(runs[i][0], runs[i][2], runs[i + 1][1]):
            continue  # asked only of gaps within the budget: a query each (the cache's)
        budget -= gap
        joined[i] = True
        left[last], right[first] = first, last
    blocks: list[Block] = []
    start = 0
    for i in range(len(runs)):
        if not joined[i]:
            group = runs[start : i + 1]
            step = min(r[3] for r in group)
            blocks.append(Block(group[0][0], group[0][1], group[-1][2], step))
            start = i + 1
    blocks.sort(key=lambda b: (b.step, b.key, b.start))
    return blocks


def _runs(needs: Iterable[Need], max_block: int) -> list[tuple[str, int, int, int]]:
    """Non-empty ranges sorted by (key, start), overlapping or touching ones merged while the
    run stays within ``max_block`` bytes; past it, a range's bytes beyond the run start the
    next run (runs are disjoint; a run's step is its bytes' earliest need)."""
    ordered = []
    for key, start, end, step in needs:
        if start < 0 or end < start:
            raise ValueError(f"range [{start}, {end}) of {key!r}: need 0 <= start <= end")
        if end > start:
            ordered.append((key, start, end, step))
    ordered.sort()
    runs: list[tuple[str, int, int, int]] = []
    for key, start, end, step in ordered:
        # every run it overlaps holds bytes needed at its step (runs split at max_block: it
        # may start inside one before the last)
        j = len(runs) - 1
        while j >= 0 and runs[j][0] == key and runs[j][2] > start:
            if runs[j][1] < end and runs[j][3] > step:
                runs[j] = (*runs[j][:3], step)
            j -= 1
        if runs and runs[-1][0] == key and start <= runs[-1][2]:
            last = runs[-1]
            if end <= last[2]:
                continue
            if end - last[1] <= max_block:
                runs[-1] = (key, last[1], end, min(last[3], step))
                continue
            start = last[2]  # the rest starts a run of its own
        runs.append((key, start, end, step))
    return runs
