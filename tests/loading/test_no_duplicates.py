"""``batching="no_duplicates"`` reads every sample once an epoch, or refuses before a batch.

sentence-transformers' own NoDuplicatesBatchSampler reads every example once an epoch on skewed
data by yielding extra, smaller batches; lading's batch counts are fixed and equal on every rank
(DDP), so a sample it cannot place without a duplicate is never silently swapped for a repeat:
the loader is refused, naming the key's share and the batch size that would fit.
(Against s-t's own route on real data: tests/integrations/test_st_arguments.py.)
"""

from __future__ import annotations

import warnings
from collections import Counter
from typing import Any

import pytest

import lading
from lading import ir
from lading.world import World


def skewed_groups(dominant: int, others: int = 100) -> ir.TrainingGroups:
    """One query with ``dominant`` relevant documents, ``others`` queries with one each."""
    store = lading.InMemoryStore({f"d{i}": f"text {i}" for i in range(400)})
    queries = {f"q{i}": f"query {i}" for i in range(others + 1)}
    qrels = {"q0": {f"d{i}": 1 for i in range(dominant)}}
    qrels.update({f"q{i}": {f"d{100 + i}": 1} for i in range(1, others + 1)})
    return ir.TrainingGroups(store, queries, qrels, group_size=2, sampling="random")


def pairs(items: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(item["qid"], item["doc_ids"][0]) for item in items]


def make(groups: ir.TrainingGroups, batch_size: int = 4, rank: int = 0, world: int = 1) -> Any:
    return lading.loader(
        groups,
        batch_size=batch_size,
        collate_fn=pairs,
        world=World(rank, world),
        batching="no_duplicates",
    )


@pytest.mark.parametrize("world", [1, 2])
def test_a_key_in_more_samples_than_batches_is_refused_before_a_batch(world: int) -> None:
    groups = skewed_groups(60)  # 160 pairs in 40 batches of 4 (1 rank; 2 x 20 on 2): q0 has 60
    with pytest.raises(ValueError) as refused:
        make(groups, world=world)
    message = str(refused.value)
    assert "shared by 60 samples" in message and "40 batches" in message
    assert "batch_size to at most 2" in message and "batching='order'" in message


def test_partly_skewed_data_that_fits_is_read_once_each_with_no_duplicate() -> None:
    groups = skewed_groups(40)  # 140 pairs in 35 batches of 4: q0's 40 do not fit, of 2 they do
    with pytest.raises(ValueError, match="shared by 40 samples"):
        make(groups)
    for world in (1, 2):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            shares = [list(make(groups, 2, r, world)) for r in range(world)]
        read = Counter(p for share in shares for batch in share for p in batch)
        assert len(read) == len(groups) == 140 and set(read.values()) == {1}  # every pair once
        for share in shares:
            assert all(len({q for q, _ in batch}) == len(batch) for batch in share)
