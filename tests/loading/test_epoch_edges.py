"""The edges of an epoch a DataLoader user meets: ``set_epoch(e)`` then a peek trains epoch
``e`` (beside a DataLoader over a DistributedSampler), and a state saved at an epoch's end goes
to the next epoch on any world size, under ``pad`` and ``truncate`` alike, for every workload.
(The peek across every loader kind is in tests/loading/test_contracts.py.)"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import lading
from contracts import assert_epoch_end_resumes_the_next_epoch
from lading.world import World

pytest.importorskip("tokenizers")
pytest.importorskip("pyarrow")

from loader_kinds import Kind, lm_kind, map_kind, parquet_kind


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("epoch-edges")


def test_set_epoch_then_a_peek_trains_the_epochs_a_distributed_sampler_does() -> None:
    """The issue's loop, ``set_epoch(e); next(iter(loader)); for batch in loader``, beside a
    DataLoader over a DistributedSampler: both train epochs 0 and 1 (lading trained 1 and 1)."""
    from torch.utils.data import DataLoader, DistributedSampler

    import lading

    def trained(loader: Any, set_epoch: Callable[[int], None]) -> list[list[Any]]:
        passes = []
        for epoch in range(2):
            set_epoch(epoch)
            next(iter(loader))
            passes.append(list(loader))
        return passes

    sampler = DistributedSampler(list(range(40)), num_replicas=2, rank=1, seed=5)
    torch_loader = DataLoader(list(range(40)), 4, sampler=sampler, collate_fn=list)
    ours = lading.loader(list(range(40)), 4, seed=5, world=World(1, 2), collate_fn=list)
    theirs, own = [], []  # each epoch, as a sampler and a fresh loader set to it read it
    for epoch in range(2):
        sampler.set_epoch(epoch)
        theirs.append(list(torch_loader))
        fresh = lading.loader(list(range(40)), 4, seed=5, world=World(1, 2), collate_fn=list)
        fresh.set_epoch(epoch)
        own.append(list(fresh))
    assert theirs[0] != theirs[1] and own[0] != own[1]
    assert trained(torch_loader, sampler.set_epoch) == theirs
    assert trained(ours, ours.set_epoch) == own


EVENED: dict[str, Callable[[int, Path, str], Kind]] = {
    "map": lambda n, tmp, equalize: map_kind(n, tmp, equalize=equalize),
    "parquet": lambda n, tmp, equalize: parquet_kind(n, tmp, equalize=equalize),
    "lm-streams": lambda n, tmp, equalize: lm_kind(n, tmp, "streams", equalize=equalize),
    "lm-windows": lambda n, tmp, equalize: lm_kind(n, tmp, "windows", equalize=equalize),
}


def evened_params() -> list[tuple[str, str, int, int, int]]:
    """(kind, equalize, n, old, new); 13 tokens under truncate cannot fill 5 ranks x 3
    streams, which the LM loader refuses when made (tests/loading/test_empty_epochs.py)."""
    return [
        (kind, equalize, n, old, new)
        for kind in sorted(EVENED)
        for equalize in ("pad", "truncate")
        for n in (13, 61)
        for old, new in ((4, 5), (3, 2), (2, 1))
        if (kind, equalize, n, new) != ("lm-streams", "truncate", 13, 5)
    ]


@pytest.mark.parametrize(("kind", "equalize", "n", "old", "new"), evened_params())
def test_a_state_saved_at_an_epochs_end_resumes_the_next_epoch_on_any_world_size(
    kind: str, equalize: str, n: int, old: int, new: int, data_dir: Path
) -> None:
    k = EVENED[kind](n, data_dir, equalize)
    assert_epoch_end_resumes_the_next_epoch(k.make, old, new, 0, k.key)


def test_an_epoch_of_one_batch_set_by_set_epoch_and_read_whole_is_consumed() -> None:
    """``set_epoch(0)`` then two whole passes over a one-batch epoch: epochs 0 and 1, as a
    DataLoader reads them (a reading of the pass's end once left the epoch marked as only
    peeked at, and every pass read epoch 0 again)."""
    loader = lading.loader(list(range(8)), batch_size=8, seed=3, collate_fn=list)
    twin = lading.loader(list(range(8)), batch_size=8, seed=3, collate_fn=list)
    loader.set_epoch(0)
    assert [list(loader), list(loader)] == [list(twin), list(twin)]
    assert loader.epoch == 1


@pytest.mark.parametrize("kind", ["map", "parquet", "lm-windows"])
@pytest.mark.parametrize("move", ["iter", "set_epoch", "load_state_dict"])
def test_a_pass_read_on_after_the_loader_moved_on_says_so(
    kind: str, move: str, data_dir: Path
) -> None:
    """A pass whose loader moved on (a look at one batch by a second ``iter()``, a
    ``set_epoch``, a loaded state) and is read again raises, naming where it ended and what
    moved it: it ended without a word, its epoch short (a review read 1 of 20 batches, no
    error). The moved-to position reads as before: the look's batch is the next epoch's
    first, the set epoch's first, the state's next."""
    from lading.errors import PassEndedError

    loader = EVENED[kind](61, data_dir, "pad").make(World(0, 1), 0)
    training = iter(loader)
    next(training)
    state = loader.state_dict()
    fresh = EVENED[kind](61, data_dir, "pad").make(World(0, 1), 0)
    if move == "iter":
        fresh.set_epoch(1)
        expected, moved = next(iter(fresh)), r"a newer iter\(\) of this loader"
        got = next(iter(loader))
    elif move == "set_epoch":
        fresh.set_epoch(3)
        expected, moved = next(iter(fresh)), r"set_epoch\(3\)"
        loader.set_epoch(3)
        got = next(iter(loader))
    else:
        fresh.load_state_dict(state)
        expected, moved = next(iter(fresh)), r"load_state_dict\(\)"
        loader.load_state_dict(state)
        got = next(iter(loader))
    with pytest.raises(PassEndedError, match=rf"after {moved} .* after batch 1 of epoch 0"):
        next(training)
    assert repr(got) == repr(expected)


@pytest.mark.parametrize("move", ["set_epoch", "load_state_dict"])
def test_a_move_at_a_passs_last_batch_ends_it_whole(move: str) -> None:
    """A loop that moves its loader while holding the epoch's last batch (a checkpoint's
    set_epoch or load_state_dict in its body) ends as before: every batch was handed out
    (the first version of the error raised here, a review of this change found)."""
    loader = lading.loader(list(range(8)), 4, collate_fn=list)
    seen = []
    for batch in loader:
        seen.append(batch)
        if len(seen) == len(loader):
            if move == "set_epoch":
                loader.set_epoch(5)
            else:
                loader.load_state_dict(loader.state_dict())
    assert len(seen) == 2


def test_the_error_counts_the_batches_of_the_epoch_that_ended(data_dir: Path) -> None:
    """Epochs of an LM stream of jittered lengths differ in batches: the error names those
    of the epoch the pass read (it named the epoch moved to's, len() of the new position)."""
    from conftest import word_corpus
    from lading.errors import PassEndedError
    from lading.lm import LanguageModelLoader, Streams

    corpus = word_corpus(data_dir / "jittered", docs=60, lengths=(3, 30), words=50, seed=2)
    loader = LanguageModelLoader(corpus, 2, Streams(8, jitter=(2, 40)), seed=1)
    sizes = {}
    for epoch in range(12):
        loader.set_epoch(epoch)
        sizes[epoch] = len(loader)
    other = next(e for e in sizes if sizes[e] != sizes[0])
    loader.set_epoch(0)
    training = iter(loader)
    next(training)
    loader.set_epoch(other)
    with pytest.raises(PassEndedError, match=rf"after batch 1 of epoch 0 \(of {sizes[0]}\)"):
        next(training)
