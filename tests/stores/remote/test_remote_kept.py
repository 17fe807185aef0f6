"""Which documents a remote store keeps in its node cache for a later read, and which it
fetches around it (:mod:`lading.stores.remote.kept`), from a plan's arrays."""

from __future__ import annotations

import numpy as np

from lading.remote.ranges import Need
from lading.step import STEPS_PER_EPOCH
from lading.stores.remote.kept import Kept

E = STEPS_PER_EPOCH


def _plan(kept: Kept, reads: list[tuple[int, int, int]], first_step: int, budget: int) -> None:
    """``reads``: (step, start, end) of one object ``o``, ranges of 10 bytes."""
    steps, starts, ends = (np.array(x, dtype=np.int64) for x in zip(*reads))
    kept.plan((["o"], np.zeros(len(reads), np.int64), starts, ends, steps), first_step, budget)


def test_the_next_epochs_first_reads_up_to_the_budget_and_this_epochs_repeats_are_kept() -> None:
    kept = Kept()
    assert kept.split([Need("o", 0, 10, 0)]) == ([], [Need("o", 0, 10, 0)])  # no plan: through
    # epoch 0 reads 0, 10, 20 and 10 again; epoch 1 reads 30, 20, 0 in that order
    _plan(kept, [(0, 0, 10), (1, 10, 20), (2, 20, 30), (3, 10, 20),
                 (E, 30, 40), (E + 1, 20, 30), (E + 2, 0, 10)], 0, 20)  # fmt: skip
    assert kept.starts is not None and kept.starts["o"].tolist() == [10, 20, 30]
    needs = [Need("o", a, a + 10, 0) for a in (0, 10, 20, 30)]
    around, through = kept.split(needs)
    assert [n.start for n in around] == [0] and [n.start for n in through] == [10, 20, 30]
    # the next epoch's plan: its first reads (kept by the plan before) stay kept
    _plan(kept, [(E, 30, 40), (E + 1, 20, 30), (E + 2, 0, 10), (2 * E, 0, 10)], E, 0)
    assert kept.starts is not None
    assert kept.starts["o"].tolist() == [20, 30]  # (budget 0: none of epoch 2's)
    _plan(kept, [(E + 1, 20, 30), (E + 2, 0, 10)], E + 1, 10)  # again within the epoch
    assert kept.starts is not None and kept.starts["o"].tolist() == [20, 30]
    # a budget that holds the whole next epoch keeps everything: nothing goes around
    _plan(kept, [(E + 1, 20, 30), (2 * E, 0, 10), (2 * E + 1, 50, 60)], E + 1, 20)
    assert kept.starts is None and kept.split(needs) == ([], needs)
