"""lading.loader: equal disjoint shares for every (rank, worker) layout, exact resume."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from contracts import assert_elastic, assert_exact_partition, assert_resumes, forked
from lading.loading.announce import step_of
from lading.loading.map_workload import EpochIndex, MapWorkload, loader
from lading.loading.order import epoch_order
from lading.loading.reading import Reading
from lading.loading.state import Cursor
from lading.world import World


class Numbers:
    """Item i is i (with the epoch when epoch-aware)."""

    def __init__(self, n: int, epoch_aware: bool = False) -> None:
        self.n, self.epoch_aware = n, epoch_aware

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: Any) -> Any:
        return (i.epoch, i.item) if isinstance(i, EpochIndex) else i


def key(batch: Any) -> list[int]:
    return [int(x) for x in batch]


@pytest.mark.parametrize("world_size", [1, 2, 3, 5])
@pytest.mark.parametrize("num_workers", [0, forked(2)])
@pytest.mark.parametrize("n", [1, 7, 64])
def test_exact_partition(world_size: int, num_workers: int, n: int) -> None:
    def make(world: World, workers: int) -> Any:
        return loader(Numbers(n), batch_size=4, num_workers=workers, seed=3, world=world)

    assert_exact_partition(make, world_size, num_workers, n, key)


@pytest.mark.parametrize("num_workers", [0, forked(2)])
def test_resume_mid_epoch(num_workers: int) -> None:
    def make(world: World, workers: int) -> Any:
        return loader(Numbers(50), batch_size=4, num_workers=workers, seed=1, world=world)

    for rank in range(3):
        assert_resumes(
            make, World(rank=rank, world_size=3), num_workers, midpoint=2, key=key, epoch=4
        )


@settings(max_examples=100, deadline=None)
@given(
    n=st.integers(1, 300),
    world=st.integers(1, 8),
    seed=st.integers(0, 9),
    epoch=st.integers(0, 5),
    drop_last=st.booleans(),
)
def test_global_order_does_not_depend_on_world_size(
    n: int, world: int, seed: int, epoch: int, drop_last: bool
) -> None:
    equalize = "truncate" if drop_last else "pad"
    assume(not (drop_last and n < world))  # refused: an epoch of no batch (tested below)
    shares = [
        MapWorkload(Numbers(n), None, Reading(1, World(r, world), seed, equalize=equalize))
        for r in range(world)
    ]
    lists = [[batch.items[0] for batch in s.keys(Cursor(epoch))] for s in shares]
    assert len({len(x) for x in lists}) == 1
    interleaved = [lists[r][j] for j in range(len(lists[0])) for r in range(world)]
    order = epoch_order(n, seed, epoch).tolist()
    limit = n - n % world if drop_last else n
    assert interleaved[:limit] == order[:limit]


def test_epochs_reshuffle_and_epoch_aware_items_carry_the_epoch() -> None:
    data = loader(Numbers(20, epoch_aware=True), batch_size=20, seed=0, world=World())
    data.set_epoch(0)
    (first,) = list(data)
    data.set_epoch(1)
    (second,) = list(data)
    epochs0, items0 = first
    epochs1, items1 = second
    assert set(epochs0.tolist()) == {0} and set(epochs1.tolist()) == {1}
    assert sorted(items0.tolist()) == sorted(items1.tolist()) == list(range(20))
    assert items0.tolist() != items1.tolist()


def test_state_from_another_dataset_or_order_is_refused() -> None:
    a = loader(Numbers(10), batch_size=2, seed=0, world=World(rank=0, world_size=2))
    b = loader(Numbers(11), batch_size=2, seed=0, world=World(rank=0, world_size=2))
    with pytest.raises(ValueError, match="n=10"):
        b.load_state_dict(a.state_dict())
    c = loader(Numbers(10), batch_size=2, seed=1, world=World(rank=0, world_size=2))
    with pytest.raises(ValueError, match="seed=0"):
        c.load_state_dict(a.state_dict())


@pytest.mark.parametrize(
    ("old", "new", "batch_sizes"), [(4, 2, (4, 4)), (2, 3, (4, 4)), (4, 2, (3, 6)), (3, 5, (4, 1))]
)
@pytest.mark.parametrize("num_workers", [0, forked(2)])
def test_elastic_resume_reads_every_sample_once(
    old: int, new: int, batch_sizes: tuple[int, int], num_workers: int
) -> None:
    n = 103
    sizes = {old: batch_sizes[0], new: batch_sizes[1]}

    def make(world: World, workers: int) -> Any:
        size = sizes[world.world_size]
        return loader(Numbers(n), batch_size=size, num_workers=workers, seed=5, world=world)

    assert_elastic(make, old, new, num_workers, 3, n, key, max_repeats=new - 1, epoch=2)


def test_elastic_resume_with_drop_partial_batch_drops_at_most_a_batch_a_rank() -> None:
    """drop_partial_batch holds on the new layout too: every batch is whole, and what is left
    out is each new rank's last partial batch (< batch_size items a rank), as documented."""
    n, size = 37, 3

    def ranks(world_size: int) -> list[Any]:
        return [
            loader(Numbers(n), size, seed=2, drop_partial_batch=True, world=World(r, world_size))
            for r in range(world_size)
        ]

    old = ranks(3)
    read = [next(iter(r)) for r in old]
    for r in (new := ranks(2)):
        r.load_state_dict(old[0].state_dict())
    after = [batch for r in new for batch in r]
    assert all(len(batch) == size for batch in read + after)
    seen = [int(x) for batch in read + after for x in batch]
    assert len(set(range(n)) - set(seen)) < 2 * size  # each new rank's partial batch, at most


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 200),
    sizes=st.lists(st.integers(1, 6), min_size=2, max_size=4),
    data=st.data(),
)
def test_chained_elastic_resumes_keep_the_global_order(
    n: int, sizes: list[int], data: st.DataObject
) -> None:
    """World sizes change several times in one epoch: every sample is read, each once apart
    from the padding of the world size that reaches the end."""
    state: dict[str, Any] | None = None
    read: list[int] = []
    for i, world_size in enumerate(sizes):
        ranks = [
            loader(Numbers(n), batch_size=2, seed=7, world=World(rank=r, world_size=world_size))
            for r in range(world_size)
        ]
        for r in ranks:
            r.set_epoch(0)
            if state is not None:
                r.load_state_dict(state)
        left = ranks[0].remaining()
        assert all(r.remaining() == left for r in ranks)
        steps = left if i == len(sizes) - 1 else data.draw(st.integers(0, left))
        # iterating a loader whose epoch is read to its end starts the next: only when reading
        iterators = [iter(r) for r in ranks] if steps else []
        for _ in range(steps):
            for it in iterators:  # one step: a batch from every rank
                read.extend(key(next(it)))
        state = ranks[0].state_dict()
    assert set(read) == set(range(n))
    assert len(read) - n < max(sizes)  # only the world that reaches the end pads


def test_worker_seeds_do_not_touch_the_global_rng() -> None:
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    data = loader(Numbers(8), batch_size=2, num_workers=1, world=World())
    list(data)
    assert torch.equal(torch.rand(3), expected)


def test_the_plan_hook_hears_the_order_ahead_before_any_of_it_is_read() -> None:
    """The one way a loader tells its order ahead (what a remote store's cache plans from):
    at the start of every pass the dataset's ``plan`` hears the batches left in the epoch and
    the next epoch's, each at its step, before any of them is read; the batches then read
    hold exactly those items, in that order. A peek ends a pass: the next pass plans the epoch
    after it."""

    class Planned(Numbers):
        def __init__(self, n: int) -> None:
            super().__init__(n)
            self.events: list[tuple[str, Any]] = []

        def __getitem__(self, i: Any) -> Any:
            self.events.append(("read", i))
            return super().__getitem__(i)

        def prefetch(self, batches: list[list[int]], first_step: int, now: int) -> None:
            pass

        def plan(self, batches: list[list[int]], first_step: int, steps: list[int]) -> None:
            self.events.append(("plan", (batches, steps)))

    data = Planned(20)
    made = loader(data, batch_size=4, seed=2, world=World(1, 2))  # 3 batches an epoch
    made.set_epoch(5)
    held = iter(made)
    first = key(next(held))
    kind, (batches, steps) = data.events[0]  # planned before the first read
    assert kind == "plan" and [kind for kind, _ in data.events[1:]] == ["read"] * 4
    assert steps == [step_of(5, b) for b in range(3)] + [step_of(6, b) for b in range(3)]
    got = [first] + [key(batch) for batch in held] + [key(batch) for batch in made]
    assert got == batches  # epoch 5 read to its end, then epoch 6 in a second pass
    assert [kind for kind, _ in data.events].count("plan") == 2  # one a pass
    next(iter(made))  # a peek at epoch 7: the next pass is epoch 8's, planned with epoch 9
    planned = len(data.events)
    list(made)
    kind, (_, steps) = data.events[planned]
    assert kind == "plan" and steps[0] == step_of(8, 0) and steps[-1] == step_of(9, 2)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only machine's warning")
def test_pin_memory_without_cuda_is_passed_over_with_a_warning_as_a_dataloader_does() -> None:
    data = loader(Numbers(8), batch_size=4, pin_memory=True, world=World())
    with pytest.warns(UserWarning, match="no CUDA device is available: batches are not pinned"):
        assert [key(b) for b in data] == [key(b) for b in loader(Numbers(8), 4, world=World())]


_FORK_WITH_WORKERS = """
import os, sys, json, time
import lading
held, exit_by = sys.argv[1] == "held", sys.argv[2]
loader = lading.loader(list(range(200)), 4, collate_fn=list, num_workers=2,
                       multiprocessing_context="fork", seed=3, shuffle=False)
it = iter(loader) if held else None
head = [next(it) for _ in range(3)] if held else list(loader)
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(r)
    try:
        got = list(it) if held else list(loader)
        out = {"child": [b[0] for b in got]}
    except BaseException as e:
        out = {"child": f"{type(e).__name__}: {e}"}
    os.write(w, json.dumps(out).encode())
    if exit_by == "sys.exit":  # multiprocessing's exit hook runs: it ends its own children
        sys.exit(0)
    os._exit(0)
os.close(w)
os.waitpid(pid, 0)
child = json.loads(os.read(r, 1 << 16).decode())["child"]
got = list(it) if held else list(loader)
print(json.dumps({"child": child, "parent": [b[0] for b in got]}), flush=True)
loader.close()
"""


@pytest.mark.slow  # two processes with DataLoader workers each: ~5 s
@pytest.mark.parametrize("exit_by", ["os._exit", "sys.exit"])
@pytest.mark.parametrize("held", [True, False])
def test_a_fork_with_live_workers_leaves_the_child_its_own_and_the_parent_its_pass(
    held: bool, exit_by: str
) -> None:
    """``os.fork()`` of a process whose loader has live persistent DataLoader workers, a pass
    held or between passes: the child forgets the parent's DataLoader iterator (its workers,
    queues) and builds its pass from the position with workers of its own; the parent's
    pass goes on, however the child exits. Was: the child raised a bare AssertionError
    (torch's iterator touching the parent's workers) and the parent's held pass then hung;
    then, a child ending by ``sys.exit`` terminated the parent's workers (multiprocessing's
    exit hook ends every process it lists as a child, the parent's included)."""
    result = subprocess.run(
        [sys.executable, "-c", _FORK_WITH_WORKERS, "held" if held else "between", exit_by],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    got = json.loads(result.stdout.strip().splitlines()[-1])
    rest = list(range(12, 200, 4)) if held else list(range(0, 200, 4))
    assert got == {"child": rest, "parent": rest}, (got, result.stderr[-2000:])
