"""Dealing keys to DataLoader workers a group at a time, and putting the batches back in order."""

from __future__ import annotations

import os
import random

import pytest

from lading.loading.deal import deal, in_order

SEED = int(os.environ.get("LADING_TEST_SEED", "0"))


@pytest.mark.parametrize("workers", [1, 2, 3, 4])
def test_each_group_goes_to_one_worker_and_the_order_comes_back(workers: int) -> None:
    print(f"LADING_TEST_SEED={SEED}")
    rng = random.Random(SEED + workers)
    for _ in range(50):
        sizes = [rng.randint(1, 6) for _ in range(rng.randint(0, 12))]
        keys = [(g, k) for g, size in enumerate(sizes) for k in range(size)]
        dealt = list(deal(keys, lambda key: key[0], workers))
        worker_of: dict[int, set[int]] = {}
        for j, item in enumerate(dealt):  # a DataLoader hands index j to worker j % workers
            if item.key is not None:
                assert keys[item.place] == item.key
                worker_of.setdefault(item.key[0], set()).add(j % workers)
        assert all(len(w) == 1 for w in worker_of.values()), worker_of
        per_worker = [
            [d.place for d in dealt[w::workers] if d.key is not None] for w in range(workers)
        ]
        assert all(p == sorted(p) for p in per_worker)  # each worker builds its keys in order
        assert len(dealt) <= len(keys) + workers * max(sizes, default=0)  # few blanks
        built = [(d.place, None if d.key is None else ("batch", d.key)) for d in dealt]
        assert list(in_order(iter(built))) == [("batch", key) for key in keys]
