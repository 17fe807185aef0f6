"""LM resume with DataLoader workers, stressed: many trials, 1-4 workers, a state at every step.

An independent run saw 3 LM trials with 2 workers that did not resume bitwise mid-epoch (a
state counted 78 batches where the caller had taken 75), on a loaded machine. Each trial here
reads an epoch with ``w`` workers (persistent or not, sometimes behind a prefetcher, with a
random pause of 0-3 ms per step so the workers run ahead or fall behind), takes a state after
every batch and checks that it counts exactly the batches taken; then it resumes from the
state of a random step with another worker count and checks the rest bitwise against the
epoch read in-process. ``LADING_STRESS_TRIALS`` sets the trials per mode (default 6).
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import word_corpus
from lading.device import DevicePrefetcher
from lading.lm import LanguageModelLoader, Streams, TokenCorpus, Windows
from lading.world import World

pytestmark = pytest.mark.slow  # forks 1-4 workers per loader, dozens of loaders
pytest.importorskip("tokenizers")

TRIALS = int(os.environ.get("LADING_STRESS_TRIALS", "6"))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> TokenCorpus:
    """100 documents of 5..80 words: about 4,300 tokens, 100+ batches an epoch."""
    return word_corpus(
        tmp_path_factory.mktemp("stress"), docs=100, lengths=(5, 80), words=900, seed=3
    )


def make(corpus: TokenCorpus, mode: str, workers: int, persistent: bool = True) -> Any:
    sequence = Streams(4) if mode == "streams" else Windows(4)
    return LanguageModelLoader(
        corpus, 3, sequence, seed=5, world=World(1, 2), num_workers=workers,
        persistent_workers=persistent if workers else None, multiprocessing_context="fork",
    )  # fmt: skip


def rows(batch: Any) -> list[list[int]]:
    return batch[0].tolist()


@pytest.mark.parametrize("mode", ["streams", "windows"])
def test_states_count_the_batches_taken_and_resume_bitwise(
    corpus: TokenCorpus, mode: str, rng: random.Random, tmp_path: Path
) -> None:
    print(f"{TRIALS} trials (LADING_STRESS_TRIALS)")
    reference = make(corpus, mode, 0)
    reference.set_epoch(1)
    want = [rows(b) for b in reference]
    assert len(want) > 60
    for trial in range(TRIALS):
        workers, persistent = rng.randint(1, 4), rng.random() < 0.75
        depth = rng.choice([None, None, 1, 3])
        loader: Any = make(corpus, mode, workers, persistent)
        if depth is not None:
            loader = DevicePrefetcher(loader, "cpu", depth=depth)
        loader.set_epoch(1)
        stop = rng.randrange(1, len(want))
        why = f"trial {trial}: {workers} workers, persistent={persistent}, depth={depth}"
        states, taken = [], []
        for batch in loader:
            taken.append(rows(batch))
            state = loader.state_dict()
            assert state["batches"] == len(taken), f"{why}: {state['batches']} != {len(taken)}"
            states.append(state)
            time.sleep(rng.random() * 0.003)
            if len(taken) == stop:
                break
        assert taken == want[:stop], why
        at = rng.randrange(len(states))
        resumed = make(corpus, mode, rng.randint(1, 4), rng.random() < 0.75)
        resumed.load_state_dict(states[at])
        assert [rows(b) for b in resumed] == want[at + 1 :], f"{why}, resumed after {at + 1}"


@pytest.mark.parametrize("workers", [0, 2])
def test_peeks_during_a_pass_never_count_into_its_state(corpus: TokenCorpus, workers: int) -> None:
    """The one way found for a state to count more batches than the caller's loop took (78
    for 75): another pass over the loader while one is held (three peeks, say). Each used to
    continue the held pass's epoch on the same position, counting its batch into it (and with
    persistent workers taking it from the one DataLoader iterator the passes share, so the
    held pass also skipped it). Now each pass is an epoch of its own, and the held pass,
    read on, says it ended (PassEndedError: it ended without a word, its epoch short)."""
    from lading.errors import PassEndedError

    loader = make(corpus, "streams", workers)
    loader.set_epoch(1)
    held = iter(loader)
    taken = [rows(next(held)) for _ in range(75)]
    assert loader.state_dict()["batches"] == len(taken) == 75
    for epoch in (2, 3, 4):
        next(iter(loader))
        assert (loader.state_dict()["epoch"], loader.state_dict()["batches"]) == (epoch, 1)
    with pytest.raises(PassEndedError, match="after batch 75 of epoch 1"):
        next(held)  # over: its batches belong to the position it was displaced from
