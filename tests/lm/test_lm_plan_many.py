"""A remote corpus's plan of an epoch finds every batch's ranges at once: the modes' reads of
many batches (``reads_many``, ``fetches_many``) are each batch's own reads, in every mode; the
plan joins each batch's ranges as one build reads them; and planning an epoch asks the mode
of no batch alone (it asked of each: ~0.85 ms a batch of 8 windows, a 4B-token corpus's
epoch of ~250k batches planned in ~3.5 min before its first batch)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import word_corpus
from lading.lm import LanguageModelLoader, Packed, Streams, TokenCorpus, TokenMixture, Windows
from lading.lm.modes.windows import WindowsMode
from lading.lm.spans import joined, joined_many
from lading.loading.state import Cursor
from lading.testing import LocalS3

pytest.importorskip("tokenizers")

MODES: dict[str, Any] = {
    "windows": lambda: Windows(12),
    "stored": lambda: Windows(12, shuffle_documents=False),
    "blocks": lambda: Windows(12, shuffle_documents=False, block_tokens=40, block_buffer=2),
    "packed": lambda: Packed(12),
    "boundaries": lambda: Windows(12, boundaries=True),
    "backwards": lambda: Windows(12, backwards=True),
    "streams": lambda: Streams(7),
    "mixture": lambda: Packed(12, boundaries=True),
}


@pytest.fixture(scope="module")
def corpora(tmp_path_factory: pytest.TempPathFactory) -> tuple[TokenCorpus, TokenCorpus]:
    folder = tmp_path_factory.mktemp("plan-many")
    a = word_corpus(folder / "a", docs=80, lengths=(2, 30), words=200, seed=3)
    b = word_corpus(folder / "b", docs=30, lengths=(2, 20), words=200, seed=4)
    return a, b


def rows_by_key(which: np.ndarray, rows: np.ndarray, n: int) -> list[list[tuple[int, ...]]]:
    out: list[list[tuple[int, ...]]] = [[] for _ in range(n)]
    for j, row in zip(which.tolist(), rows.tolist()):
        out[j].append(tuple(row))
    return [sorted(r) for r in out]


@pytest.mark.parametrize("mode", list(MODES))
def test_the_reads_of_many_batches_are_each_batchs_own(
    corpora: tuple[TokenCorpus, TokenCorpus], mode: str
) -> None:
    """Over this epoch's batches and the next's (what a plan asks of), ``reads_many`` and
    ``fetches_many`` give each batch exactly the ranges ``reads`` and ``fetches`` give it
    alone."""
    a, b = corpora
    data: Any = TokenMixture({a: 0.6, b: 0.4}) if mode == "mixture" else a
    loader = LanguageModelLoader(data, 3, MODES[mode](), seed=11)
    workload = loader._lm
    keys = list(workload.keys(Cursor())) + list(workload.keys(Cursor(1)))
    assert len(keys) > 10
    routes = ((workload.reads_many, workload.reads), (workload.fetches_many, workload.fetches))
    for many, one in routes:
        found = many(keys)
        assert found is not None
        alone = []
        for key in keys:
            got = one(key)
            assert got is not None
            alone.append(sorted(map(tuple, got.tolist())))
        assert rows_by_key(*found, len(keys)) == alone


def test_joined_many_joins_each_batch_as_joined_does(rng: random.Random) -> None:
    """Random ranges of random batches (overlapping, touching, nested, out of order): each
    batch's joined ranges are :func:`joined`'s of that batch alone, a batch's reach never
    running into the next (a batch before it reaching past its ranges)."""
    for _ in range(200):
        n = rng.randrange(1, 40)
        which = np.array([rng.randrange(6) for _ in range(n)], dtype=np.int64)
        a = np.array([rng.randrange(0, 300) for _ in range(n)], dtype=np.int64)
        b = a + np.array([rng.randrange(1, 80) for _ in range(n)], dtype=np.int64)
        got_which, got_a, got_b = joined_many(which, a, b)
        for j in range(6):
            mine = which == j
            rows = np.stack([np.zeros(int(mine.sum()), np.int64), a[mine], b[mine]], 1)
            want = joined(rows)
            at = got_which == j
            assert (got_a[at].tolist(), got_b[at].tolist()) == want


@pytest.fixture(scope="module")
def remote_url(s3: LocalS3, corpora: tuple[TokenCorpus, TokenCorpus], tmp_path_factory: Any) -> str:
    """The first corpus built into the local S3."""
    local = corpora[0]
    s3.make_bucket("plan-many")
    url = "s3://plan-many/a"
    built = tmp_path_factory.mktemp("plan-many-build")
    TokenCorpus.build(local.path.parent / "docs.txt", url, local.tokenizer(), cache=built)
    return url


def local_and_cold(
    corpora: tuple[TokenCorpus, TokenCorpus], url: str, tmp_path: Path
) -> tuple[list[Any], TokenCorpus]:
    """The local corpus's batches of an epoch of ``Windows(12)``, and the remote copy opened on
    a cold node cache."""
    want = [b[0].tolist() for b in LanguageModelLoader(corpora[0], 3, Windows(12), seed=5)]
    return want, TokenCorpus.open(url, cache=tmp_path / "c", cache_bytes="1M")


def test_planning_a_remote_epoch_asks_the_mode_of_no_batch_alone(
    remote_url: str, corpora: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An epoch of windows over a remote corpus: its plan finds every batch's ranges at once
    and its builds read them from the plan, so ``WindowsMode.reads`` and ``fetches`` (a
    batch each) are never called; the batches equal the local corpus's. (The old plan called
    them a batch at a time: 148 and 74 times here.)"""
    want, remote = local_and_cold(corpora, remote_url, tmp_path)
    calls = {"reads": 0, "fetches": 0}
    for name in calls:
        original = getattr(WindowsMode, name)

        def counted(self: Any, *args: Any, _name: str = name, _f: Any = original) -> Any:
            calls[_name] += 1
            return _f(self, *args)

        monkeypatch.setattr(WindowsMode, name, counted)
    loader = LanguageModelLoader(remote, 3, Windows(12), seed=5, read_ahead=0)
    got = [b[0].tolist() for b in loader]
    assert got == want and len(got) > 20
    assert calls == {"reads": 0, "fetches": 0}


def test_a_mode_that_cannot_say_its_reads_is_planned_batch_by_batch(
    remote_url: str, corpora: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where a mode says nothing of its reads (as ``Streams`` after an elastic resume), the plan
    finds each batch's ranges by building it with a recorder: the batches still equal the
    local corpus's and every read was planned."""
    want, remote = local_and_cold(corpora, remote_url, tmp_path)
    for name in ("reads", "fetches", "reads_many", "fetches_many"):
        monkeypatch.setattr(WindowsMode, name, lambda *args: None)
    loader = LanguageModelLoader(remote, 3, Windows(12), seed=5, read_ahead=0)
    assert [b[0].tolist() for b in loader] == want
    assert remote.cache_stats()["unplanned"] == 0


def test_planning_a_remote_streams_epoch_asks_the_mode_of_no_batch_alone(
    remote_url: str, corpora: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As windows: an epoch of streams over a remote corpus is planned (this epoch and the
    next, at its start) by one ``StreamsMode.reads_many``, never ``reads`` a batch (~26 us
    each, so ~50 s before the first batch of a 900k-batch epoch; it was called 111 times
    here); the batches equal the local corpus's and every read was planned. After an
    elastic resume the rows read through the segment's base and the plan still builds each
    batch with a recorder: the same batches as the local corpus's again."""
    from lading.lm.modes.streams import StreamsMode

    want = [b[0].tolist() for b in LanguageModelLoader(corpora[0], 3, Streams(7), seed=5)]
    remote = TokenCorpus.open(remote_url, cache=tmp_path / "c", cache_bytes="1M")
    calls = {"reads": 0}
    original = StreamsMode.reads

    def counted(self: Any, *args: Any) -> Any:
        calls["reads"] += 1
        return original(self, *args)

    monkeypatch.setattr(StreamsMode, "reads", counted)
    loader = LanguageModelLoader(remote, 3, Streams(7), seed=5, read_ahead=0)
    got = [b[0].tolist() for b in loader]
    assert got == want and len(got) > 20
    assert calls == {"reads": 0}
    assert remote.cache_stats()["unplanned"] == 0
    head = LanguageModelLoader(corpora[0], 3, Streams(7), seed=5)
    batches = iter(head)
    next(batches)
    state = head.state_dict()
    local = LanguageModelLoader(corpora[0], 2, Streams(7), seed=5)
    local.load_state_dict(state)
    elastic = LanguageModelLoader(remote, 2, Streams(7), seed=5, read_ahead=0)
    elastic.load_state_dict(state)
    rest = [b[0].tolist() for b in local]
    assert [b[0].tolist() for b in elastic] == rest and len(rest) > 10


@pytest.mark.parametrize("mode", ["windows", "mixture"])
def test_a_mixtures_plan_locates_its_windows_together(
    corpora: tuple[TokenCorpus, TokenCorpus], mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A mixture's plan of an epoch (a remote member's, this epoch and the next at its start)
    found each window's corpus and window a window at a time in Python (``locate``, ~37 us a
    window against 0.4 us for one corpus's windows: a 4B-token mixture's epoch of 2M windows
    of 2048 tokens, ~75 s a plan before the first batch). It locates them all at once now:
    ``locate`` is asked of no window, and the ranges are each window's own (as
    ``locate`` and the member's reads say, window by window)."""
    from lading.lm.windows import MixedWindows, window_reads

    a, b = corpora
    sequence = Windows(6) if mode == "windows" else Packed(6)
    loader = LanguageModelLoader(TokenMixture({a: 0.7, b: 0.3}), 3, sequence, seed=11)
    workload = loader._lm
    keys = list(workload.keys(Cursor())) + list(workload.keys(Cursor(1)))
    alone = []
    for key in keys:
        seg = workload.planned(Cursor(key.epoch))
        windows = seg.windows
        assert isinstance(windows, MixedWindows)
        rows = []
        for window in workload.mode.order(seg, key, workload.reading).tolist():
            corpus, inner = windows.locate(window)
            found = window_reads(windows.members[corpus], np.array([inner]), 7)
            assert found is not None
            found[:, 0] = corpus
            rows.extend(map(tuple, found.tolist()))
        alone.append(sorted(rows))
    asked = {"locate": 0}
    original = MixedWindows.locate

    def counted(self: Any, position: int) -> tuple[int, int]:
        asked["locate"] += 1
        return original(self, position)

    monkeypatch.setattr(MixedWindows, "locate", counted)
    found = workload.reads_many(keys)
    assert found is not None and asked == {"locate": 0}
    assert rows_by_key(*found, len(keys)) == alone


@pytest.mark.parametrize("mode", list(MODES))
def test_a_nodes_reads_are_its_other_ranks_reads(
    corpora: tuple[TokenCorpus, TokenCorpus], mode: str
) -> None:
    """``node_reads_many`` on rank 0 of 3 ranks on one node: the ranges ranks 1 and 2 read of
    the same keys, as their own loaders plan them; None for ranks on nodes of their own (a
    node's other ranks are not known) and on one rank."""
    from lading.world import World

    a, b = corpora
    data: Any = TokenMixture({a: 0.6, b: 0.4}) if mode == "mixture" else a

    def workload(world: World) -> Any:
        return LanguageModelLoader(data, 3, MODES[mode](), seed=11, world=world)._lm

    ours = workload(World(0, 3, local_rank=0, local_world_size=3))
    keys = list(ours.keys(Cursor())) + list(ours.keys(Cursor(1)))
    found = ours.node_reads_many(keys)
    if ours.reads_many(keys) is None:  # a mode that cannot say
        assert found is None
        return
    assert found is not None
    theirs = []
    for rank in (1, 2):
        other = workload(World(rank, 3, local_rank=rank, local_world_size=3))
        theirs += sorted(map(tuple, other.reads_many(keys)[1].tolist()))
    assert sorted(map(tuple, found[1].tolist())) == sorted(theirs)
    assert workload(World(0, 3)).node_reads_many(keys) is None
    assert workload(World(0, 1)).node_reads_many(keys) is None
