"""One rank's timed window: warm-up steps, then blocks of steps until a time budget is spent.

As ``torch.utils.benchmark``'s ``blocked_autorange``: a window is a number of seconds, not of
steps, so a fast strategy is not timed over 20 ms and a slow one over a second. The steps of a
block double (1, 2, 4, ...) until one block takes a tenth of the budget, and blocks run until
the budget and ``min_steps`` are both reached. Every rank takes the same number of steps (under
DDP a training step is a collective). The ranks meet after every block and take the slowest
rank's time for it: the group delivered its rows over that time, not over a fast rank's own
clock, which leaves out its wait for the others at the meeting. Every rank then decides the
next block's size and whether to go on from the same group clock, so they decide alike, and
the window ends when the group, not rank 0, has spent the budget. The loader runs on across
blocks (:class:`Endless`), never re-reading the warm-up batches. A block's wait is the loop's
(``wait_s``, from its second batch on) plus what the block spent before the loop's clock
started: its first batch's wait, and with several ranks the wait at the loop's start for the
others' first batches. A loader-mode step is mostly that wait, and a block of one step is all
of it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any, NamedTuple

from lading.loading.resumable import Resumable
from lading.world import process_group

BLOCKS_PER_WINDOW = 10  # a block grows to a tenth of the budget: ~10 decisions per window


class Measured(NamedTuple):
    """What one rank measured over its window."""

    rows: int
    steps: int
    seconds: float  # the group's window: the slowest rank's time summed over the blocks
    wait_s: float  # this rank's wait for batches, every block's first included
    blocks: int
    cpu_s: float  # CPU time of the rank and its DataLoader workers over the blocks
    sizes: tuple[int, ...] = ()  # steps of each block, in order (the replay repeats them)
    busy_s: float = 0.0  # this rank's own time in its blocks (its wait for the others left out)


class Endless:
    """A loader whose batches run on from one :meth:`Trainer.run` to the next.

    Args:
        loader: a lading loader (:class:`~lading.loading.Resumable`).

    The loop restarts every run at epoch 0 (``set_epoch(0)``); here that is ignored and the
    epochs follow one another, so every block reads batches no block read before.
    """

    def __init__(self, loader: Resumable) -> None:
        self.loader, self._fresh = loader, False
        self._it: Iterator[Any] | None = None
        loader.set_epoch(0)

    @property
    def epoch(self) -> int:
        return int(self.loader.epoch)

    def set_epoch(self, epoch: int) -> None:
        """Ignored: the stream of batches goes on (see the class)."""

    def __len__(self) -> int:
        return len(self.loader)

    def remaining(self) -> int:
        """Never 0: the batches go on into the next epoch (see the class)."""
        return int(self.loader.remaining()) or len(self.loader)

    def position(self) -> Any:
        return self.loader.position()

    def __iter__(self) -> Iterator[Any]:
        while True:
            if self._it is None:
                self._it, self._fresh = iter(self.loader), True
            it = self._it
            for batch in it:  # resumed where the last run stopped
                self._fresh = False
                yield batch
            if self._fresh:
                raise ValueError(f"the loader gave no batch in epoch {self.loader.epoch}")
            self._it = None  # iterated again, the loader reads its next epoch

    def state_dict(self, at: Any = None) -> dict[str, Any]:
        return dict(self.loader.state_dict(at=at))

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.loader.load_state_dict(state)


def _slowest(seconds: float) -> float:
    """The largest of every rank's ``seconds`` (``seconds`` itself when no group is up).

    The ranks meet here, so they start their next block together: the slowest rank's time
    for a block is the group's.
    """
    dist = process_group()
    if dist is None:
        return seconds
    every: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(every, seconds)
    return float(max(every))


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and its live children (DataLoader workers).

    Unlike the wall clock, it hardly moves when other work shares the cores: samples per
    CPU-second say what the data path costs, samples/s what it delivered on this machine now.
    """
    import psutil

    me = psutil.Process()
    total = 0.0
    for process in [me, *me.children(recursive=True)]:
        try:
            times = process.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


def run_window(trainer: Any, seconds: float, min_steps: int, warmup: int) -> Measured:
    """Warm up, then time blocks of steps until ``seconds`` and ``min_steps`` are reached.

    ``trainer`` is a :class:`lading.train.Trainer` over an :class:`Endless` loader; its config's
    ``total`` and ``warmup`` are set here for each block.
    """
    config = trainer.config
    if warmup:
        config.total = config.warmup = warmup  # untimed
        trainer.run()
    config.warmup = 0
    rows = steps = blocks = 0
    spent = busy_s = wait_s = cpu_s = 0.0
    size, sizes = 1, []
    _slowest(0.0)  # the ranks start the first block together, whatever their warm-up took
    while True:
        config.total = size
        cpu = cpu_seconds()
        started = time.perf_counter()
        result = trainer.run()
        block_s = time.perf_counter() - started
        cpu_s += cpu_seconds() - cpu
        rows, steps, blocks = rows + result.rows, steps + size, blocks + 1
        sizes.append(size)
        before_clock = max(0.0, block_s - result.seconds)  # the first batch's wait
        busy_s, wait_s = busy_s + block_s, wait_s + result.wait_s + before_clock
        group_s = _slowest(block_s)  # the same on every rank: so are the decisions below
        spent += group_s
        if group_s < seconds / BLOCKS_PER_WINDOW:
            size *= 2
        if spent >= seconds and steps >= min_steps:
            return Measured(rows, steps, spent, wait_s, blocks, cpu_s, tuple(sizes), busy_s)


def run_replay(trainer: Any, sizes: tuple[int, ...], warmup: int) -> float:
    """Seconds of ``trainer`` (over a replay of batches) run in blocks of ``sizes`` steps, after
    a warm-up: the blocks of the window it is compared with, so that what a block costs
    besides its steps (the loop's start, the GPU's queue drained at its end) weighs on both
    sides of the efficiency alike (timed in one block, the replay made E read 0.92-0.96 on an
    H100 where one long run of each gave 0.995, benchmarks/RESULTS.md)."""
    config = trainer.config
    if warmup:
        config.total = config.warmup = warmup
        trainer.run()
    config.warmup = 0
    spent = 0.0
    for size in sizes:
        config.total = size
        started = time.perf_counter()
        trainer.run()
        spent += time.perf_counter() - started
    return spent


def endless(loader: Resumable, device: Any, prefetch: bool, depth: int | None = None) -> Endless:
    """``loader`` as a bench window reads it: its batches run on from block to block and, with
    ``prefetch``, through one :class:`~lading.device.DevicePrefetcher` inside the
    :class:`Endless`, so the batches in flight carry over from one block to the next as in one
    long run. Outside it (the loop's own prefetcher) every block's ``set_epoch(0)`` dropped
    them: ``depth`` batches collated and copied for nothing per block, which a real run pays
    once. The loop's config must then have ``prefetch=False``."""
    if not prefetch:
        return Endless(loader)
    from lading.device import DevicePrefetcher

    return Endless(DevicePrefetcher(loader, device, depth))
