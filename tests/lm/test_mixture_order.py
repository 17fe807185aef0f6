"""The mixture's schedule and the Feistel order it relies on: exact, even, and cheap."""

from __future__ import annotations

import os

import numpy as np
import pytest

from lading.lm.windows import smooth_schedule
from lading.loading.order import feistel_permutation, feistel_value

SEED = int(os.environ.get("LADING_TEST_SEED", "0"))


def test_feistel_in_python_equals_numpy() -> None:
    # batches of up to 64 indices are permuted in Python integers, more in numpy: one order
    print(f"LADING_TEST_SEED={SEED}")
    rng = np.random.default_rng(SEED)
    for n in (1, 2, 5, 17, 4096, 4097, 10**6 + 3, 2**40 + 1):
        index = rng.integers(0, n, 200)
        key = tuple(int(k) for k in rng.integers(0, 100, 3))
        whole = feistel_permutation(index, n, 7, *key)  # > 64: numpy
        small = np.concatenate(
            [feistel_permutation(index[i : i + 50], n, 7, *key) for i in range(0, 200, 50)]
        )
        assert np.array_equal(whole, small), n
        assert [feistel_value(int(i), n, 7, *key) for i in index[:5]] == whole[:5].tolist()
        if n <= 4097:  # a bijection of [0, n)
            assert sorted(feistel_permutation(np.arange(n), n, 3, *key).tolist()) == list(range(n))


@pytest.mark.parametrize("counts", [(500, 300, 200), (1, 999), (7, 0, 3), (1234, 1, 77, 400)])
def test_schedule_is_exact_and_even(counts: tuple[int, ...]) -> None:
    corpus_of, rank_of = smooth_schedule(counts)
    n = sum(counts)
    assert len(corpus_of) == n
    for i, c in enumerate(counts):  # every window of every corpus once, in rank order
        assert rank_of[corpus_of == i].tolist() == list(range(c))
    # every prefix holds each corpus within a bounded number of windows of its share (a
    # corpus's count at time t is within 1/2 of t * count, the prefix within K/2 of t * n),
    # where a uniform shuffle strays by ~sqrt(prefix)
    bound = 0.5 + len(counts) / 2
    seen = np.zeros(len(counts))
    for k, i in enumerate(corpus_of.tolist(), start=1):
        seen[i] += 1
        assert np.all(np.abs(seen - k * np.array(counts) / n) <= bound + 1e-9), (k, seen)
