"""Tell a dataset which items the next batches hold, before the loader asks for them.

A loader's order is known in advance (``(seed, epoch)`` fix it), so a dataset whose items live
far away (a store in object storage) can fetch the next batches' documents while the current
ones train, and keep in its cache what the rest of the epoch reads first. This is the one way a
loader tells its order ahead: the dataset's ``prefetch`` and ``plan`` hooks
(:mod:`lading.loading.hooks`, where every hook of a map-style dataset is written down) hear it.

The loader (:class:`~lading.loading.loader.Loader`) calls the announcer as it hands out batch
keys, in the process that iterates it (with DataLoader workers: the main process, ahead of the
workers): ``prefetch`` every ``LOOKAHEAD`` batches for the ``LOOKAHEAD`` to ``2 * LOOKAHEAD``
batches ahead (on into the next epoch's first batches as an epoch ends, not announced again
by the next pass), and with no batches (``prefetch([], next, now)``) as each batch between is
handed out, so a store moves its window on even where DataLoader workers do the reads; batch
``j`` at step ``first_step + j`` (``now``: the step about to be read);
``plan`` once an iteration, at its start, with every batch left in the epoch and the next
epoch's (an epoch's end decides what the next one's start finds cached). Steps are ``epoch *
STEPS_PER_EPOCH + batch``: one clock for every rank, which reads batch ``b`` of an epoch at the
same time as the others. What it does affects speed only: a dataset reads the same items
without it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from lading.loading.hooks import Hooks
from lading.step import STEPS_PER_EPOCH as STEPS_PER_EPOCH
from lading.step import step_of

LOOKAHEAD = 8  # batches: at 64 documents a batch, 512-1,024 documents planned together

Announce = Callable[..., Iterator[Any]]
"""``(batch keys, epoch, first batch[, the next epoch's keys]) -> batch keys``: yields a loader's
batch keys as they come and announces the batches ahead."""


def announcer(
    hooks: Hooks, items: Callable[[Any], list[Any]] = list, ahead: int = LOOKAHEAD
) -> Announce | None:
    """``(batch keys, epoch, first batch) -> batch keys`` that announces batches to the
    dataset's ``prefetch`` (and ``plan``) hook as it yields their keys, each as ``items(key)``
    (the keys the dataset is asked for); None when the dataset has no ``prefetch``."""
    prefetch, plan = hooks.prefetch, hooks.plan
    if prefetch is None:
        return None
    told_next: dict[int, int] = {}  # epoch -> its first batches the last pass announced

    def announce(
        batches: Iterator[Any], epoch: int, first: int, following: Iterator[Any] | None = None
    ) -> Iterator[Any]:
        keys = list(batches)
        after = list(following) if following is not None else []
        if plan is not None:  # the order left in the epoch and the next epoch's: what to keep
            steps = [step_of(epoch, first + j) for j in range(len(keys))]
            steps += [step_of(epoch + 1, j) for j in range(len(after))]
            plan([items(key) for key in keys + after], steps[0] if steps else 0, steps)
        # the next epoch's first batches were announced as this one ended: not again
        done = told_next.pop(epoch, 0) if first == 0 else 0
        return _announced(keys, items, prefetch, epoch, first, ahead, after, done, told_next)

    return announce


def _announced(
    batches: list[Any],
    items: Callable[[Any], list[Any]],
    prefetch: Callable[..., Any],
    epoch: int,
    first: int,
    ahead: int,
    after: list[Any],
    done: int,
    told_next: dict[int, int],
) -> Iterator[Any]:
    """Yield ``batches`` announcing each window ahead; the window runs on into the next epoch's
    first batches (``after``) as this one ends, so its start finds them fetched (an epoch of
    4 batches otherwise waits a whole fetch at every start: measured 340-500 ms a start at
    30 ms GETs, benchmarks/remote_step.py). A batch that announces nothing new calls
    ``prefetch([], next step not announced, now)``: with DataLoader workers nothing reads in
    this process, and a remote store fetches what its window deferred only as steps pass."""
    told = min(done, len(batches))  # batches 0 .. told - 1 (from the first yielded) announced
    n = len(batches)
    for b, batch in enumerate(batches):
        if told < min(b + ahead, n + len(after)):
            upto = min(b + 2 * ahead, n + len(after))
            if told < n:
                chunk = [items(batches[j]) for j in range(told, min(upto, n))]
                prefetch(chunk, step_of(epoch, first + told), step_of(epoch, first + b))
            if upto > n:  # into the next epoch (its batch 0 is step_of(epoch + 1, 0))
                start = max(told, n) - n
                chunk = [items(after[j]) for j in range(start, upto - n)]
                prefetch(chunk, step_of(epoch + 1, start), step_of(epoch, first + b))
                told_next[epoch + 1] = upto - n
            told = upto
        elif b:  # nothing new: the loader moved on (a store fetches what it deferred)
            e, j = (epoch, first + told) if told < n else (epoch + 1, told - n)
            prefetch([], step_of(e, j), step_of(epoch, first + b))
        yield batch
