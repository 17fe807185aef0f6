"""Keys dealt to DataLoader workers a group at a time, and the batches put back in the keys' order.

A DataLoader hands the ``j``-th index of its sampler to worker ``j % num_workers`` and returns
the results in that order. A workload whose batches share costly reads (parquet: a batch is a
slice of a shuffled chunk of row groups, decoded whole) would have every worker decode every
chunk if its batches were handed out in turn. So the loader deals whole *groups* (a chunk's
batches) to one worker each: the sampler yields, round after round, each worker's next key (a
worker whose group ran out gets the next group of the order, or a blank when none is left),
every key tagged with its place in the order; the main process keeps what arrives before its
turn and yields the batches in the order of the keys. The batches are thus those of one
process, whatever the worker count, and each chunk is decoded once. The price is memory in
the main process: batches wait there for their turn, up to about ``num_workers - 1`` groups.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import Any, NamedTuple


class Dealt(NamedTuple):
    """A key and its place in the order (``key`` None: a blank, which builds nothing)."""

    place: int
    key: Any


def deal(keys: Iterable[Any], group: Callable[[Any], Hashable], workers: int) -> Iterator[Dealt]:
    """``keys`` in the order a DataLoader of ``workers`` must be given them so that each
    consecutive run of keys of one ``group`` is built by one worker, in order."""
    order = enumerate(keys)
    queues: list[deque[Dealt]] = [deque() for _ in range(workers)]
    ahead = next(order, None)  # the first key not yet dealt: it starts the next group

    def refill(queue: deque[Dealt]) -> None:
        nonlocal ahead
        assert ahead is not None
        first = group(ahead[1])
        while ahead is not None and group(ahead[1]) == first:
            queue.append(Dealt(*ahead))
            ahead = next(order, None)

    while True:
        for queue in queues:
            if not queue and ahead is not None:
                refill(queue)
        if not any(queues):
            return
        for queue in queues:
            yield queue.popleft() if queue else Dealt(-1, None)


def in_order(built: Iterator[tuple[int, Any]]) -> Iterator[Any]:
    """The batches of ``built`` (``(place, batch)`` as the workers return them, blanks at
    place -1) in the order of their places."""
    waiting: dict[int, Any] = {}
    due = 0
    for place, batch in built:
        if place < 0:
            continue
        waiting[place] = batch
        while due in waiting:
            yield waiting.pop(due)
            due += 1
