"""The bench's timed window and its replay: efficiency E compares like with like.

E is the replay's time over the loop's on the same steps. The first H100 run read E 0.92 for
packed+prefetch where one long run of each gave 0.995 (benchmarks/RESULTS.md): the window ran in
blocks and the prefetcher (wrapped outside the window's loader) dropped its batches in flight at
every block's ``set_epoch(0)``, while the replay ran in one block. Both are checked here on the
CPU with an explicit prefetch depth, which pulls ahead as on a GPU.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import lading  # noqa: E402
from lading.bench.window import endless, run_replay, run_window  # noqa: E402
from lading.train import LoopConfig, StepResult, Trainer, TrainingTask  # noqa: E402
from lading.world import World  # noqa: E402


class Counted:
    """A map dataset that counts the items read (what the loader pulled)."""

    def __init__(self, n: int) -> None:
        self.n, self.read = n, 0

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        self.read += 1
        return i


class Step(TrainingTask):
    def step(self, batch: Any) -> StepResult:
        return StepResult(None, len(batch))


@pytest.mark.parametrize("items", [10_000, 50])  # 50: the window crosses many epochs
@pytest.mark.parametrize("depth", [1, 2, 3])
def test_a_prefetched_window_pulls_each_batch_once_over_its_blocks(depth: int, items: int) -> None:
    data = Counted(items)
    source = endless(lading.loader(data, 1, shuffle=False), "cpu", True, depth=depth)
    config = LoopConfig(1, progress=False, memory=False, prefetch=False)
    trainer = Trainer(Step(), source, config, World(0, 1), torch.device("cpu"))
    timed = run_window(trainer, seconds=0.05, min_steps=40, warmup=3)
    assert timed.blocks >= 3 and sum(timed.sizes) == timed.steps, timed
    # every batch stepped, plus at most ``depth`` in flight at the end (fewer where the window
    # stopped near an epoch's end: the prefetcher does not pull across it): none dropped
    # between blocks (the old arrangement read 3,089 for 3,075 stepped at depth 2)
    assert 3 + timed.steps <= data.read <= 3 + timed.steps + depth, (data.read, timed)


def test_an_unprefetched_window_reads_exactly_its_steps() -> None:
    data = Counted(10_000)
    source = endless(lading.loader(data, 2, shuffle=False), "cpu", False)
    config = LoopConfig(1, progress=False, memory=False, prefetch=False)
    trainer = Trainer(Step(), source, config, World(0, 1), torch.device("cpu"))
    timed = run_window(trainer, seconds=0.02, min_steps=10, warmup=2)
    assert data.read == 2 * (2 + timed.steps)


class Blocks:
    """A trainer that records the steps of each run."""

    def __init__(self) -> None:
        self.config = LoopConfig(1, progress=False, memory=False)
        self.runs: list[tuple[int, int]] = []

    def run(self) -> None:
        self.runs.append((self.config.total, self.config.warmup))


def test_the_replay_runs_in_the_windows_blocks_after_its_warmup() -> None:
    trainer = Blocks()
    run_replay(trainer, (1, 2, 4, 8, 8), warmup=5)
    assert trainer.runs == [(5, 5), (1, 0), (2, 0), (4, 0), (8, 0), (8, 0)]


class SlowerPeer:
    """A stand-in for ``torch.distributed`` with one other rank, ``late_s`` slower per block:
    what rank 0 of a two-rank cell sees when its peer's batches take longer."""

    def __init__(self, late_s: float) -> None:
        self.late_s = late_s

    def get_world_size(self) -> int:
        return 2

    def all_gather_object(self, out: list[Any], value: Any) -> None:
        out[0], out[1] = value, value + self.late_s

    def broadcast_object_list(self, box: list[Any], src: int = 0) -> None:
        """Rank 0's value stays (what the old window's agreement did)."""


def test_the_window_ends_on_the_slowest_ranks_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    # the peer is 50 ms slower per block: the group spends >= 50 ms a block, so a 0.2 s window
    # is spent after at most 4 blocks. On rank 0's own clock (its steps take microseconds)
    # the old window ran a dozen growing blocks, and the slow rank's window ran on for as long
    # (2 gloo ranks at 5 and 20 ms a batch: summed rows/s 2.1x what the group delivered)
    monkeypatch.setattr("lading.bench.window.process_group", lambda: SlowerPeer(0.05))
    source = endless(lading.loader(Counted(10_000), 1, shuffle=False), "cpu", False)
    config = LoopConfig(1, progress=False, memory=False, prefetch=False)
    trainer = Trainer(Step(), source, config, World(0, 1), torch.device("cpu"))
    timed = run_window(trainer, seconds=0.2, min_steps=1, warmup=2)
    assert timed.blocks <= 4, timed
    # the window is the group's: this rank's own time plus its wait for the peer every block
    assert timed.seconds == pytest.approx(timed.busy_s + 0.05 * timed.blocks), timed


class Sleepy(Counted):
    """Every item takes ``sleep_s`` to read: a loop over it is all waiting."""

    def __init__(self, n: int, sleep_s: float) -> None:
        super().__init__(n)
        self.sleep_s = sleep_s

    def __getitem__(self, i: int) -> int:
        time.sleep(self.sleep_s)
        return super().__getitem__(i)


def test_the_wait_counts_every_blocks_first_batch() -> None:
    # every batch sleeps 10 ms and the step does nothing: the wait is at least 10 ms a step
    # (a sleep never returns early). The loop's clock starts after a block's first batch, so
    # its wait_s left that batch out: blocks of one step (each > a tenth of the 20 ms budget)
    # summed a wait of 0, and `lading bench` published 0.68 where the share was ~1.0
    source = endless(lading.loader(Sleepy(10_000, 0.01), 1, shuffle=False), "cpu", False)
    config = LoopConfig(1, progress=False, memory=False, prefetch=False)
    trainer = Trainer(Step(), source, config, World(0, 1), torch.device("cpu"))
    timed = run_window(trainer, seconds=0.02, min_steps=4, warmup=1)
    assert timed.sizes == (1,) * timed.steps, timed
    assert timed.steps * 0.01 <= timed.wait_s <= timed.busy_s, timed
