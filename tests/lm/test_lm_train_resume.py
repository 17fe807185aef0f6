"""``train_lm`` (the LSTM) resumed in-process equals the uninterrupted run, also with the
``break_continuity`` ablation, whose row shuffles come of a generator of their own."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from conftest import word_corpus

pytest.importorskip("tokenizers")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """60 documents of 5..40 words: a few dozen batches of 4 streams of 8 tokens."""
    folder = tmp_path_factory.mktemp("lm_resume")
    return word_corpus(folder, docs=60, lengths=(5, 40), words=50, seed=5).path


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """One intra-op thread: the reduction order is then the data's alone (test_lm_train)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def config(corpus: Path, out: Path, **kw: Any) -> Any:
    from lading.lm.train import LMConfig

    fields = dict(
        corpus=corpus, out=out, batch_size=4, bptt=8, emb=16, hidden=16, layers=1,
        dropout=0.0, parallel="none", log_every=1, valid_fraction=0.1, progress=False,
    )  # fmt: skip
    return LMConfig(**{**fields, **kw})


def losses(out: Path) -> dict[int, float]:
    lines = (out / "log.jsonl").read_text().splitlines()
    return {r["step"]: r["loss"] for r in map(json.loads, lines)}


def test_break_continuity_resumes_exactly(corpus: Path, tmp_path: Path) -> None:
    """The rows' shuffle generator is checkpointed: a fresh one from the seed replayed the
    first shuffles after a resume (26 of 40 losses differed in the review's run)."""
    from lading.lm.train import train_lm

    train_lm(config(corpus, tmp_path / "ref", steps=12, break_continuity=True))
    train_lm(config(corpus, tmp_path / "cut", steps=7, checkpoint_every=1, break_continuity=True))
    train_lm(config(corpus, tmp_path / "cut", steps=12, resume=True, break_continuity=True))
    want, got = losses(tmp_path / "ref"), losses(tmp_path / "cut")
    assert sorted(want) == list(range(1, 13)) and got == want
