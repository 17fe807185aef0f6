"""The loader announces each batch to a dataset with ``prefetch`` once, ahead of reading it."""

from __future__ import annotations

from typing import Any

import pytest

import lading
from lading.loading.announce import LOOKAHEAD, announcer, step_of
from lading.loading.hooks import Hooks


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


def _by_epoch(events: list[tuple[str, Any]]) -> dict[int, list[list[int]]]:
    """The announced batches of each epoch, checked to come in step order with ``now`` not
    after them."""
    announced: dict[int, list[list[int]]] = {}
    for kind, what in events:
        if kind == "announce":
            chunk, first, now = what
            mine = announced.setdefault(first >> 32, [])
            assert first == step_of(first >> 32, len(mine)) and now <= first
            mine += chunk
    return announced


def test_every_batch_is_announced_once_before_it_is_read() -> None:
    data = Recorder(100)
    loader = lading.loader(data, 3, collate_fn=list, world=lading.World(0, 1), seed=1)
    loader.set_epoch(2)
    passes = [list(loader), list(loader)]  # epochs 2 and 3
    seen: list[list[int]] = []
    for kind, what in data.events:
        if kind == "announce":
            seen += what[0]
        else:  # a read: its batch was announced before
            assert any(what in b for b in seen)
    announced = _by_epoch(data.events)
    assert announced[2] == passes[0] and announced[3] == passes[1]  # each once, in order
    nxt = lading.loader(Recorder(100), 3, collate_fn=list, world=lading.World(0, 1), seed=1)
    nxt.set_epoch(4)
    assert announced[4] == list(nxt)[: len(announced[4])]  # epoch 4's first ones, as read


def test_the_next_epoch_is_announced_before_this_one_ends() -> None:
    """An epoch's first batches are announced while the one before is read (a short epoch
    would otherwise wait for a whole fetch at every start), and not again at its start."""
    data = Recorder(30)
    loader = lading.loader(data, 3, collate_fn=list, world=lading.World(0, 1), seed=1)
    passes = [list(loader) for _ in range(3)]  # epochs 0, 1, 2
    events = data.events
    reads = [i for i, (kind, _) in enumerate(events) if kind == "read"]
    before_end = [what for kind, what in events[: reads[29]] if kind == "announce"]  # epoch 0's
    assert any(w[1] == step_of(1, 0) and w[0][0] == passes[1][0] for w in before_end)
    announced = _by_epoch(events)
    assert [announced[e] for e in range(3)] == passes  # each batch once, in order


@pytest.mark.slow
def test_with_dataloader_workers_the_main_process_announces_every_batch() -> None:
    data = Recorder(50)  # the workers read their own copies: only announcements are seen here
    loader = lading.loader(data, 4, collate_fn=list, world=lading.World(0, 1), num_workers=2)
    batches = list(loader)
    assert all(kind == "announce" for kind, _ in data.events)
    assert _by_epoch(data.events)[0] == batches


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
    told = [what for _, what in data.events if what[0]]
    assert told == [([[0], [10], [20], [30], [40]], 0, 0)]
    # then each batch handed out says the loader moved on, with nothing new to fetch
    assert [what[2] for _, what in data.events if not what[0]] == [1, 2, 3, 4]
