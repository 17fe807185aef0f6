"""The loader announces each batch to a dataset with ``prefetch`` once, ahead of reading it."""

from __future__ import annotations

from typing import Any

import pytest

import lading
from lading.loading.hooks import Hooks
from lading.loading.lookahead import LOOKAHEAD, announcer, step_of


class Recorder:
    """A dataset of ``n`` items that records what the loader announced and when."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.events: list[tuple[str, Any]] = []

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        self.events.append(("read", i))
        return i

    def prefetch(self, batches: list[list[int]], first_step: int, now: int) -> None:
        self.events.append(("announce", (batches, first_step, now)))


def test_every_batch_is_announced_once_before_it_is_read() -> None:
    data = Recorder(100)
    loader = lading.loader(data, 3, collate_fn=list, world=lading.World(0, 1), seed=1)
    loader.set_epoch(2)
    batches = list(loader)
    announced: list[list[int]] = []
    for kind, what in data.events:
        if kind == "announce":
            chunk, first, now = what
            assert first == step_of(2, len(announced)) and now <= first
            announced += chunk
        else:  # a read: its batch was announced, and at most 2 * LOOKAHEAD batches ahead
            assert any(what in b for b in announced)
    assert announced == batches  # each batch once, in order, exactly the loader's


@pytest.mark.slow
def test_with_dataloader_workers_the_main_process_announces_every_batch() -> None:
    data = Recorder(50)  # the workers read their own copies: only announcements are seen here
    loader = lading.loader(data, 4, collate_fn=list, world=lading.World(0, 1), num_workers=2)
    batches = list(loader)
    announced = [b for kind, what in data.events if kind == "announce" for b in what[0]]
    assert announced == batches and all(kind == "announce" for kind, _ in data.events)


def test_a_resumed_loader_announces_from_where_it_resumes() -> None:
    data = Recorder(60)
    loader = lading.loader(data, 4, collate_fn=list, world=lading.World(0, 1))
    it = iter(loader)
    for _ in range(5):
        next(it)
    state = loader.state_dict()
    fresh = Recorder(60)
    resumed = lading.loader(fresh, 4, collate_fn=list, world=lading.World(0, 1))
    resumed.load_state_dict(state)
    rest = list(resumed)
    first = next(what for kind, what in fresh.events if kind == "announce")
    assert first[1] == step_of(0, 5) and first[0][0] == rest[0]


def test_no_announcer_without_prefetch_and_keys_pass_through_unchanged() -> None:
    assert announcer(Hooks.of(object())) is None
    data = Recorder(3)
    announce = announcer(Hooks.of(data), lambda key: [key * 10], ahead=LOOKAHEAD)
    assert announce is not None and list(announce(iter(range(5)), 0, 0)) == [0, 1, 2, 3, 4]
    assert data.events == [("announce", ([[0], [10], [20], [30], [40]], 0, 0))]
