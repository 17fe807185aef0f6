"""The loader contracts, one set of checks run on every loader (tests/contracts.py).

Exact partition (disjoint, complete, equal batch counts), bitwise resume and elastic resume,
for ``lading.loader`` over a map-style dataset, the language-model loader in its streams,
windows and packed modes and over a weighted mixture (in-process and through DataLoader
workers) and partitioned parquet, at world sizes 1-5, 0-3 workers, and awkward sizes: fewer
items than readers, primes (the loaders: tests/loader_kinds.py).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO
from contracts import (
    assert_batches_independent,
    assert_batches_kept,
    assert_elastic,
    assert_every_pass_starts_an_epoch,
    assert_exact_partition,
    assert_reiterates,
    assert_resumes,
    assert_set_epoch_then_a_peek,
    batches_of,
    forked,
)
from lading.world import World

pytest.importorskip("tokenizers")
pytest.importorskip("pyarrow")

from loader_kinds import (
    Kind,
    lm_kind,
    map_kind,
    mixture_kind,
    packed_kind,
    parquet_kind,
    prefetched,
    resident,
)

SETTINGS = ("batch_size", "seed", "shuffle", "world", "equalize", "drop_partial_batch")
SIZES = (2, 13, 61)  # fewer items than readers, and primes
WORLD_SIZES = (1, 2, 3, 4, 5)
WORKERS = (0, 1, 2, 3)

KINDS: dict[str, Callable[[int, Path], Kind]] = {
    "lm-packed": packed_kind,
    "lm-mixture": mixture_kind,
    "map": map_kind,
    "parquet": parquet_kind,
    "lm-streams": lambda n, tmp: lm_kind(n, tmp, "streams"),
    "lm-windows": lambda n, tmp: lm_kind(n, tmp, "windows"),
    # the device layer (lading.device) over the loaders
    "map+prefetch": lambda n, tmp: prefetched(map_kind(n, tmp)),
    "lm-streams+prefetch": lambda n, tmp: prefetched(lm_kind(n, tmp, "streams")),
    "lm-streams+resident": lambda n, tmp: resident(lm_kind(n, tmp, "streams")),
}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("contracts")


IN_PROCESS_ONLY = {"lm-streams+resident"}  # device tensors are not shared with workers


def kinds_and_workers(workers: tuple[int, ...]) -> list[Any]:
    """(kind, workers) parameters; DataLoader workers cost a fork each, so they run in the
    slow set, and a kind that reads in-process only is not asked for workers."""
    return [
        pytest.param(kind, k, marks=pytest.mark.slow) if k else (kind, k)
        for kind in sorted(KINDS)
        for k in workers
        if not (k and kind in IN_PROCESS_ONLY)
    ]


def partition_params() -> list[Any]:
    """(kind, workers, n): every size in-process; with workers, the extremes (fewer items than
    readers, and the largest prime) — the middle size adds forks, not cases."""
    out = []
    for param in kinds_and_workers(WORKERS):
        kind, workers = getattr(param, "values", param)  # a ParameterSet (slow) or a tuple
        for n in SIZES if not workers else (SIZES[0], SIZES[-1]):
            out.append(
                pytest.param(kind, workers, n, marks=pytest.mark.slow) if workers else (kind, 0, n)
            )
    return out


@pytest.mark.parametrize(("kind", "workers", "n"), partition_params())
@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_exact_partition(kind: str, n: int, workers: int, world_size: int, data_dir: Path) -> None:
    k = KINDS[kind](n, data_dir)
    readers = k.readers(world_size, workers)
    assert_exact_partition(k.make, world_size, workers, k.items, k.key, readers=readers)


@pytest.mark.parametrize(("kind", "workers"), kinds_and_workers((0, 2)))
@pytest.mark.parametrize("world_size", (1, 3))
def test_resume_is_bitwise(kind: str, workers: int, world_size: int, data_dir: Path) -> None:
    k = KINDS[kind](61, data_dir)
    for rank in range(world_size):
        assert_resumes(k.make, World(rank, world_size), workers, midpoint=2, key=k.key, epoch=1)


@pytest.mark.parametrize(("kind", "workers"), kinds_and_workers((0, 2)))
def test_a_second_pass_reads_the_next_epoch(kind: str, workers: int, data_dir: Path) -> None:
    k = KINDS[kind](61, data_dir)
    assert_reiterates(k.make, World(1, 2), workers, k.key)


def test_a_second_pass_over_the_issue_example_reads_13_batches_again() -> None:
    import lading

    loader = lading.loader(list(range(50)), batch_size=4, collate_fn=list, world=World())
    assert [sum(1 for _ in loader) for _ in range(3)] == [13, 13, 13]
    assert len(loader) == 13


@pytest.mark.parametrize(("kind", "workers"), kinds_and_workers((0, 2)))
def test_every_pass_starts_an_epoch(kind: str, workers: int, data_dir: Path) -> None:
    k = KINDS[kind](61, data_dir)
    assert_every_pass_starts_an_epoch(k.make, World(1, 2), workers, k.key)


@pytest.mark.parametrize(("kind", "workers"), kinds_and_workers((0, 2)))
def test_set_epoch_then_a_peek_trains_that_epoch(kind: str, workers: int, data_dir: Path) -> None:
    k = KINDS[kind](61, data_dir)
    assert_set_epoch_then_a_peek(k.make, World(1, 2), workers, k.key)


def passes(loader: Any, reload: Callable[[dict[str, Any]], Any] | None) -> list[int]:
    """Batches each pass reads in the habits of a DataLoader's user: a peek then a pass, a
    break at batch 3 then a pass, a pass of exactly ``len()`` batches then a pass, and a state
    saved after a break loaded by ``reload`` then two passes of it."""
    counts = []
    next(iter(loader))
    counts.append(sum(1 for _ in loader))
    for taken, _ in enumerate(loader, 1):
        if taken == 3:
            break
    counts.append(sum(1 for _ in loader))
    counts.append(sum(1 for _, _ in zip(range(len(loader)), loader)))
    counts.append(sum(1 for _ in loader))
    if reload is None:
        return counts
    for taken, _ in enumerate(loader, 1):
        if taken == 3:
            break
    resumed = reload(loader.state_dict())
    counts += [sum(1 for _ in resumed), sum(1 for _ in resumed)]
    return counts


@pytest.mark.parametrize("workers", [0, forked(2)])
def test_passes_count_as_a_dataloaders_do(workers: int) -> None:
    """The issue's example beside torch's DataLoader (and torchdata's StatefulDataLoader where
    installed), on the same 50 items in batches of 4: a peek or a break no longer shortens
    the next pass (it read 12 and 10), and a loaded state resumes its first pass only."""
    from torch.utils.data import DataLoader

    import lading

    def made() -> Any:
        return lading.loader(
            list(range(50)), 4, collate_fn=list, shuffle=False, num_workers=workers,
            world=World(), multiprocessing_context="fork" if workers else None,
        )  # fmt: skip

    def reloaded(state: dict[str, Any]) -> Any:
        again = made()
        again.load_state_dict(state)
        return again

    want = [13, 13, 13, 13, 10, 13]
    torch_loader = DataLoader(list(range(50)), 4, collate_fn=list, num_workers=workers)
    assert passes(torch_loader, None) == want[:4]  # it has no state to resume
    assert passes(made(), reloaded) == want
    try:
        from torchdata.stateful_dataloader import StatefulDataLoader
    except ImportError:
        return

    def stateful() -> Any:
        return StatefulDataLoader(list(range(50)), 4, collate_fn=list, num_workers=workers)

    def stateful_reloaded(state: dict[str, Any]) -> Any:
        again = stateful()
        again.load_state_dict(state)
        return again

    assert passes(stateful(), stateful_reloaded) == want


@pytest.mark.parametrize(("kind", "workers"), kinds_and_workers((0, 2)))
def test_kept_batches_are_the_batches_as_they_came(kind: str, workers: int, data_dir: Path) -> None:
    k = KINDS[kind](61, data_dir)
    assert_batches_kept(k.make, World(1, 2), workers, k.key)


@pytest.mark.parametrize(("kind", "workers"), kinds_and_workers((0, 2)))
def test_a_batch_changed_in_place_changes_no_other(kind: str, workers: int, data_dir: Path) -> None:
    """Streams' ``y`` was a view of the chunk the next batch's ``x`` came from: its last
    column was the next ``x``'s first, so ``y[y == eos] = -100`` changed the next batch at
    ``num_workers=0`` (2,731 of 2,732 batches of a Wikipedia epoch) and not with workers."""
    k = KINDS[kind](61, data_dir)
    assert_batches_independent(k.make, World(1, 2), workers, k.key)


@pytest.mark.parametrize(("kind", "workers"), kinds_and_workers((0, 2)))
@pytest.mark.parametrize("n", (13, 61))
@pytest.mark.parametrize(("old", "new"), [(4, 2), (2, 3), (3, 1), (3, 5), (1, 4)])
def test_elastic_resume(
    kind: str, n: int, workers: int, old: int, new: int, data_dir: Path
) -> None:
    k = KINDS[kind](n, data_dir)
    repeats = k.readers(old, workers) + k.readers(new, workers)
    assert_elastic(k.make, old, new, workers, 1, k.items, k.key, max_repeats=repeats, epoch=1)


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(set(KINDS) - IN_PROCESS_ONLY))
def test_persistent_workers_follow_set_epoch_and_load_state(kind: str, data_dir: Path) -> None:
    """Workers started in epoch 0 serve epoch 1, and a state loaded after they started."""
    k = KINDS[kind](61, data_dir)
    world = World(1, 2)
    fresh = k.make(world, 2)
    fresh.set_epoch(1)
    want = batches_of(fresh, k.key)
    kept = k.make(world, 2)
    kept.set_epoch(0)
    batches_of(kept, k.key)  # the workers start, and persist
    kept.set_epoch(1)
    assert batches_of(kept, k.key) == want
    head = k.make(world, 0)
    head.set_epoch(1)
    for _ in zip(range(2), head):
        pass
    state = head.state_dict()
    kept.load_state_dict(state)  # another layout (0 workers): an elastic resume
    other = k.make(world, 2)
    other.load_state_dict(state)
    rest = batches_of(kept, k.key)
    assert rest and rest == batches_of(other, k.key)  # as workers started after the load


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_resumes_through_torch_distributed_checkpoint(
    kind: str, data_dir: Path, tmp_path: Path
) -> None:
    """torchtitan and torchtune save a loader with torch.distributed.checkpoint (DCP), which
    calls its state_dict() and, on load, its load_state_dict(): every loader kind resumes
    through it exactly."""
    import warnings

    import torch.distributed.checkpoint as dcp

    k = KINDS[kind](61, data_dir)
    world = World(0, 1)
    whole = k.make(world, 0)
    whole.set_epoch(1)
    want = batches_of(whole, k.key)
    head = k.make(world, 0)
    head.set_epoch(1)
    for _ in zip(range(2), head):
        pass
    with warnings.catch_warnings():  # DCP warns that it runs without a process group
        warnings.simplefilter("ignore", UserWarning)
        dcp.save({"dataloader": head}, checkpoint_id=tmp_path / "ckpt")
        resumed = k.make(world, 0)
        dcp.load({"dataloader": resumed}, checkpoint_id=tmp_path / "ckpt")
    assert want[:2] + batches_of(resumed, k.key) == want


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_state_saved_after_an_elastic_resume_resumes_through_dcp(
    kind: str, data_dir: Path, tmp_path: Path
) -> None:
    """A job resumed on fewer ranks (an elastic resume) that checkpoints before its epoch
    ends restarts through DCP: its state's ``base`` (the positions left) has the keys of a
    fresh loader's, where ``None`` against two lists was "Missing key loader.base." for
    every kind; a fresh loader's is ``None``, as every state of before saved it, so old
    checkpoints load through DCP too. A state with the base's dict form of before loads."""
    import warnings

    import torch.distributed.checkpoint as dcp

    k = KINDS[kind](61, data_dir)
    old, new = World(0, 2), World(0, 1)
    head = k.make(old, 0)
    head.set_epoch(1)
    for _ in zip(range(2), head):
        pass
    elastic = k.make(new, 0)
    elastic.load_state_dict(head.state_dict())  # 2 ranks -> 1
    for _ in zip(range(2), elastic):
        pass
    state = elastic.state_dict()
    again = k.make(new, 0)
    again.load_state_dict(state)
    want = batches_of(again, k.key)
    assert want
    with warnings.catch_warnings():  # DCP warns that it runs without a process group
        warnings.simplefilter("ignore", UserWarning)
        dcp.save({"dataloader": elastic}, checkpoint_id=tmp_path / "ckpt")
        resumed = k.make(new, 0)
        dcp.load({"dataloader": resumed}, checkpoint_id=tmp_path / "ckpt")
    assert batches_of(resumed, k.key) == want
    assert isinstance(state["base"], list)  # one value: [starts, stops]
    starts, stops = state["base"]
    before = {**state, "base": {"starts": starts, "stops": stops}}  # the form saved before
    older = k.make(new, 0)
    older.load_state_dict(before)
    assert batches_of(older, k.key) == want


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_loader_is_resumable_through_the_one_protocol(kind: str, data_dir: Path) -> None:
    """Each kind (prefetched ones too) is a ``Resumable``: its state as of an earlier
    ``position()`` is the state it had then; ``len()`` counts the epoch and ``remaining()`` what
    is left of it; ``set_epoch`` of the epoch a just-loaded state stands in keeps its place (what
    the HF Trainer and Lightning call right after a restore), and once read starts it again."""
    from lading.loading.resumable import Resumable

    made = KINDS[kind](60, data_dir).make(World(0, 2), 0)
    assert isinstance(made, Resumable)
    made.set_epoch(1)
    total = len(made)
    assert made.remaining() == total >= 2
    it = iter(made)
    next(it)
    at, then = made.position(), made.state_dict()
    assert made.remaining() == total - 1
    for _ in it:
        pass
    assert made.state_dict(at=at) == then and made.state_dict() != then
    assert len(made) == total and made.remaining() == 0
    made.load_state_dict(then)
    made.set_epoch(1)  # just restored, nothing read: the position is kept
    assert len(made) == total and len(list(made)) == total - 1
    made.set_epoch(1)  # read since: the epoch starts again
    assert len(list(made)) == total


@pytest.mark.parametrize("kind", sorted(k for k in KINDS if "+prefetch" not in k))
def test_every_loader_answers_its_settings_by_the_same_names(kind: str, data_dir: Path) -> None:
    """``lading.loader``, the LM loader in every mode and ``PartitionedParquet`` answer the same
    attribute names with the settings they were made with (tests/loader_kinds.py: batch size
    ``BATCH``, seed 3, the default shuffle, equalize and drop_partial_batch)."""
    from loader_kinds import BATCH

    world = World(1, 2)
    made = KINDS[kind](13, data_dir).make(world, 0)
    got = {name: getattr(made, name) for name in SETTINGS}
    assert got == {
        "batch_size": BATCH,
        "seed": 3,
        "shuffle": True,
        "world": world,
        "equalize": "pad",
        "drop_partial_batch": False,
    }


def test_every_loader_saves_and_restores_through_the_one_loader() -> None:
    """No loader class overrides the one loader's state methods: what a workload maps of an
    older state (an LM ``bptt`` read as ``seq_len``, a parquet layout with ``num_workers``) is
    its ``saved_state`` hook, which ``Loader.load_state_dict`` calls."""
    from lading.lm import LanguageModelLoader
    from lading.loading.loader import Loader
    from lading.tabular import PartitionedParquet

    for cls in (LanguageModelLoader, PartitionedParquet):
        overridden = {"state_dict", "load_state_dict", "set_epoch", "__iter__"} & set(vars(cls))
        assert not overridden, (cls.__name__, overridden)
        assert issubclass(cls, Loader)


def test_no_wrapper_reaches_inside_a_loader() -> None:
    """Outside ``lading/loading`` nothing reads a loader's source or another object's cursor:
    wrappers compose through :class:`~lading.loading.resumable.Resumable` only."""
    import re

    root = REPO / "src" / "lading"
    # a loader's source or cursor (private or not), but not a module of that name
    pattern = re.compile(r"(?<!\blm)(?<!\bloading)(?<!\btabular)\._?source\.|(?<!self)\._?cursor\b")
    found = [
        f"{path.relative_to(root)}:{number}: {line.strip()}"
        for path in sorted(root.rglob("*.py"))
        if path.parent.name != "loading"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert not found, "private access to a loader:\n" + "\n".join(found)
