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
    again = [(E + 1, 20, 30), (E + 2, 0, 10), (2 * E, 0, 10), (2 * E + 1, 50, 60)]
    _plan(kept, again, E + 1, 0)  # again within the epoch: what the plan before kept stays
    assert kept.starts is not None and kept.starts["o"].tolist() == [20, 30]
    # a budget that holds the whole next epoch keeps everything: nothing goes around
    _plan(kept, [(E + 1, 20, 30), (2 * E, 0, 10), (2 * E + 1, 50, 60)], E + 1, 20)
    assert kept.starts is None and kept.split(needs) == ([], needs)


def test_a_plan_that_tells_no_read_of_the_next_epoch_keeps_what_the_budget_holds() -> None:
    """A plan of one epoch at a time (the next epoch untold) whose epoch the budget holds says
    of no read that it is far: every read goes through the cache, that epoch's and, planned
    next with its own next epoch, the first reads of the next (they went through: the cap has
    them). It kept only the repeated reads: at a cap holding the corpus every epoch fetched
    everything again. An epoch larger than the budget keeps its repeated reads, as before."""
    kept = Kept()
    needs = [Need("o", a, a + 10, 0) for a in (0, 10, 20)]
    _plan(kept, [(0, 0, 10), (1, 10, 20), (2, 20, 30), (3, 10, 20)], 0, 20)  # 40 bytes > 20
    assert kept.starts is not None and kept.starts["o"].tolist() == [10]  # the repeated one
    kept = Kept()
    _plan(kept, [(0, 0, 10), (1, 10, 20), (2, 20, 30)], 0, 100)
    assert kept.starts is None and kept.split(needs) == ([], needs)
    _plan(kept, [(E, 20, 30), (E + 1, 0, 10), (E + 2, 10, 20), (2 * E, 0, 10),
                 (2 * E + 1, 10, 20), (2 * E + 2, 20, 30)], E, 10)  # fmt: skip
    assert kept.starts is None  # epoch 1's reads: all went through the plan before
    _plan(kept, [(2 * E, 0, 10), (2 * E + 1, 10, 20), (2 * E + 2, 20, 30),
                 (3 * E, 0, 10), (3 * E + 1, 10, 20)], 2 * E, 10)  # fmt: skip
    assert kept.starts is not None and kept.starts["o"].tolist() == [0]  # epoch 2: the one
