"""Batches without a duplicate: an epoch's reading order regrouped so no key repeats in a batch.

In-batch-negative losses (MultipleNegativesRankingLoss and kin) score every other row of a
batch as a negative, so two groups of one query in a batch train a relevant document as a
negative. sentence-transformers' ``NoDuplicatesBatchSampler`` avoids that by walking a shuffled
list and deferring each sample whose values are already in the batch being filled; this is the
same walk, with two changes lading's loaders need:

- it fills a *fixed* list of slots (every rank's batches, step by step), so the batch count
  stays the plan's, equal on every rank, and known before the epoch (``len()``, DDP);
- when the walk runs out of samples that fit a slot (conflicts pile up at the end of an epoch:
  one query with a fifth of the pairs), the slot is topped up with samples from the start of
  the order that fit it, and then each sample the walk could not place is swapped in: in place
  of a top-up, or into an earlier slot whose one conflicting sample (or any one, if none
  conflicts) moves to the top-up's place. Only what no such swap places is left out, and only
  as many top-ups stay, read twice this epoch; both counts are returned, and the loader
  refuses such an epoch rather than read some samples twice and leave others out. (s-t instead
  yields extra, smaller batches beyond its advertised length, which DDP's equal step counts
  forbid.) A key shared by more samples than the epoch has batches can never be placed: the
  loader refuses that before arranging (:func:`most_shared`).

Everything is a function of the reading order and the keys, so it is deterministic in
``(seed, epoch)`` and identical on every rank, each of which computes it whole and keeps its own
slots.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import numpy.typing as npt


class Arranged(NamedTuple):
    """Items of each slot, in slot order; pool positions left unread (more slots than places:
    the pool less the slots, plus one per repeat); places holding a repeat (one per sample the
    walk and the swaps could not place without a duplicate)."""

    slots: list[npt.NDArray[np.int64]]
    left_out: int
    repeated: int


def arrange(
    pool: npt.NDArray[np.int64],
    sizes: Sequence[int],
    keys: npt.NDArray[np.int64],
) -> Arranged:
    """Fill slots of ``sizes`` from ``pool`` (items in reading order) without a repeated key.

    Args:
        pool: the items, in the order they would be read.
        sizes: the size of each slot, in filling order.
        keys: row ``p`` holds the keys of ``pool[p]`` (queries, documents…); no key may occur
            in two items of one slot. Any integers, one row per pool position.

    Raises:
        ValueError: a slot cannot be filled even with repeats (fewer distinct keys in the whole
            pool than a batch needs); the message says which slot and what to lower.
    """
    n = len(pool)
    rows = _Rows(keys)
    following = np.arange(1, n + 1, dtype=np.int64)  # a singly linked list over pool positions
    if n:
        following[-1] = -1
    head = 0 if n else -1
    slots: list[list[int]] = []  # pool positions of each slot
    top_ups: list[tuple[int, int]] = []  # (slot, place) of each top-up
    for slot, size in enumerate(sizes):
        taken: set[int] = set()
        batch: list[int] = []
        previous, current = -1, head
        while current != -1 and len(batch) < size:
            after = int(following[current])
            if taken.isdisjoint(rows[current]):  # take it out of the list
                batch.append(current)
                taken.update(rows[current])
                if previous == -1:
                    head = after
                else:
                    following[previous] = after
            else:  # deferred to a later slot, its place in the order kept
                previous = current
            current = after
        if len(batch) < size:
            top_ups += [(slot, place) for place in _top_up(batch, taken, size, rows)]
        if len(batch) < size:
            raise ValueError(
                f"no_duplicates: slot {slot} holds only {len(batch)} of {size} items without a "
                f"repeated key, even with repeats: the {n} items have too few distinct queries "
                "or documents for this batch size; lower batch_size"
            )
        slots.append(batch)
    left: list[int] = []
    while head != -1:
        left.append(head)
        head = int(following[head])
    left = [p for p in left if not (top_ups and _swap_in(p, slots, top_ups, rows))]
    return Arranged([pool[s] for s in slots], len(left), len(top_ups))


class _Rows:
    """The keys of pool position ``p`` as a list, made when asked: a list of lists for all of
    them would cost ~400 bytes a sample (200 MB for MS MARCO's 500k pairs) every epoch."""

    def __init__(self, keys: npt.NDArray[np.int64]) -> None:
        self.keys = keys

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, p: int) -> list[int]:
        keys: list[int] = self.keys[p].tolist()
        return keys


def _top_up(batch: list[int], taken: set[int], size: int, rows: _Rows) -> list[int]:
    """Add positions from the start of the pool that fit ``batch`` until it holds ``size``."""
    places = []
    for p in range(len(rows)):
        if len(batch) >= size:
            break
        if taken.isdisjoint(rows[p]):
            places.append(len(batch))
            batch.append(p)
            taken.update(rows[p])
    return places


def _keys_but(slot: list[int], place: int, rows: _Rows) -> set[int]:
    return {k for i, p in enumerate(slot) if i != place for k in rows[p]}


def _swap_in(p: int, slots: list[list[int]], top_ups: list[tuple[int, int]], rows: _Rows) -> bool:
    """Place left-over position ``p`` instead of a top-up, directly or by one swap."""
    mine = rows[p]
    for u, (t, place) in enumerate(top_ups):
        around = _keys_but(slots[t], place, rows)  # the top-up's slot without it
        if around.isdisjoint(mine):
            slots[t][place] = p
            del top_ups[u]
            return True
        for s, slot in enumerate(slots):
            if s == t:
                continue
            clashing = [i for i, q in enumerate(slot) if not set(rows[q]).isdisjoint(mine)]
            if len(clashing) > 1:
                continue
            for i in clashing or range(len(slot)):  # the one clash, or anyone, moves out
                if around.isdisjoint(rows[slot[i]]):
                    slots[t][place], slot[i] = slot[i], p
                    del top_ups[u]
                    return True
    return False


def most_shared(keys: npt.NDArray[np.int64]) -> int:
    """The most samples one key is in (a key twice in one sample's row counts once): no
    arrangement of fewer slots than that reads every sample once without a duplicate."""
    if not keys.size:
        return 0
    rows = np.sort(keys.reshape(len(keys), -1), axis=1)
    fresh = np.ones(rows.shape, dtype=bool)
    fresh[:, 1:] = rows[:, 1:] != rows[:, :-1]
    return int(np.unique(rows[fresh], return_counts=True)[1].max())
