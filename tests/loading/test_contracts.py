"""The loader contracts, one set of checks run on every loader (tests/contracts.py).

Exact partition (disjoint, complete, equal batch counts), bitwise resume and elastic resume,
for ``lading.loader`` over a map-style dataset, the language-model loader in its streams,
windows and packed modes and over a weighted mixture (in-process and through DataLoader
workers) and partitioned parquet, at world sizes 1-5,
0-3 workers, and awkward sizes: fewer items than readers, primes. Every item of every loader
is a number ``0 … n-1`` (a sample, a row, a token position, a window), so one key function
per loader turns a batch into the items it holds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import REPO, word_tokenizer, write
from contracts import (
    Numbers,
    assert_batches_kept,
    assert_elastic,
    assert_exact_partition,
    assert_resumes,
    batches_of,
)
from lading.world import World

pytest.importorskip("tokenizers")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

SIZES = (2, 13, 61)  # fewer items than readers, and primes
WORLD_SIZES = (1, 2, 3, 4, 5)
WORKERS = (0, 1, 2, 3)
BATCH = 3
BPTT = 2  # windows of 2 (input, target) pairs


@dataclass
class Kind:
    """One loader under test: ``make(world, workers)`` and the items of a batch."""

    name: str
    make: Callable[[World, int], Any]
    key: Callable[[Any], list[int]]
    items: int  # n: the items an epoch holds
    readers: Callable[[int, int], int]  # (world_size, workers) -> shares cut


def map_kind(n: int, tmp: Path) -> Kind:
    from lading.loading.map_source import loader

    def make(world: World, workers: int) -> Any:
        return loader(
            Numbers(n), BATCH, num_workers=workers, seed=3, world=world,
            multiprocessing_context="fork",
        )  # fmt: skip

    return Kind("map", make, lambda b: [int(x) for x in b], n, lambda w, k: w)


def parquet_kind(n: int, tmp: Path) -> Kind:
    from lading.tabular import PartitionedParquet

    path = tmp / f"rows{n}.parquet"
    if not path.exists():
        table = pa.table({"row": pa.array(np.arange(n), pa.int64())})
        pq.write_table(table, path, row_group_size=max(1, n // 3))

    def make(world: World, workers: int) -> Any:
        data = PartitionedParquet(
            path, batch_size=BATCH, seed=3, equalize="pad", world=world, buffer_rows=5
        )
        return data if workers == 0 else data.loader(workers, multiprocessing_context="fork")

    return Kind("parquet", make, lambda b: b["row"].tolist(), n, lambda w, k: w * max(1, k))


def lm_kind(n: int, tmp: Path, mode: str) -> Kind:
    """One document of unique words: token ``t`` of the stream has id ``t + 2`` (0 is the
    end of the document, the last token), so a batch names its stream positions."""
    from lading.lm import LanguageModelLoader, Streams, TokenCorpus, Windows

    tokens = n if mode == "streams" else n * BPTT + 1  # n positions or n windows
    path = tmp / f"lm{tokens}"
    if not path.exists():
        words = [f"w{i}" for i in range(tokens - 1)]
        src = write(tmp / f"lm{tokens}.txt", " ".join(words) + "\n")
        tok = word_tokenizer(words, tmp / f"lm{tokens}.json")
        TokenCorpus.build(src, path, tok, progress=False)
    corpus = TokenCorpus.open(path)
    assert corpus.n_tokens == tokens

    def position(token: int) -> int:
        return tokens - 1 if token == 0 else token - 2

    def make(world: World, workers: int) -> Any:
        sequence = Streams(BPTT) if mode == "streams" else Windows(BPTT)
        data = LanguageModelLoader(corpus, BATCH, sequence, seed=3, world=world)
        return data if workers == 0 else data.loader(workers, multiprocessing_context="fork")

    if mode == "streams":
        return Kind(
            "lm-streams",
            make,
            lambda b: [position(t) for t in b[0].flatten().tolist()],
            n,
            lambda w, k: w * BATCH,
        )
    return Kind(
        "lm-windows",
        make,
        lambda b: [position(int(row[0])) // BPTT for row in b[0]],
        n,
        lambda w, k: w,
    )


def prefetched(kind: Kind) -> Kind:
    """``kind`` behind a DevicePrefetcher pulling 2 batches ahead (on the CPU): batches in
    flight must not count as consumed."""
    from lading.device import DevicePrefetcher

    def make(world: World, workers: int) -> Any:
        return DevicePrefetcher(kind.make(world, workers), "cpu", depth=2)

    return Kind(kind.name + "+prefetch", make, kind.key, kind.items, kind.readers)


def resident(kind: Kind) -> Kind:
    """The LM streams loader with its corpus held as a (CPU) device tensor: batches gathered
    from stream positions, in-process only."""
    from lading.lm.resident import ResidentLanguageModelLoader

    def make(world: World, workers: int) -> Any:
        assert not workers, "a GPU-resident loader reads in-process (no DataLoader workers)"
        host = kind.make(world, 0)
        return ResidentLanguageModelLoader(
            host.corpus, BATCH, host.sequence, seed=3, world=world, device="cpu"
        )

    return Kind(kind.name + "+resident", make, kind.key, kind.items, kind.readers)


def words_corpus(tmp: Path, name: str, docs: list[list[str]], vocab: list[str]) -> Any:
    """A corpus of ``docs`` (lists of words) whose tokenizer knows ``vocab``."""
    from lading.lm import TokenCorpus

    path = tmp / name
    if not path.exists():
        src = write(tmp / f"{name}.txt", "\n\n".join(" ".join(d) for d in docs) + "\n")
        TokenCorpus.build(src, path, word_tokenizer(vocab, tmp / f"{name}.json"), progress=False)
    return TokenCorpus.open(path)


def packed_kind(n: int, tmp: Path) -> Kind:
    """``n`` documents of 1-4 unique words packed into windows of 6 tokens; a window is
    named by its first token, the start of its first piece."""
    from lading.lm import LanguageModelLoader, Packed
    from lading.lm.packing import pack

    lengths = np.random.default_rng(n).integers(1, 5, n)
    vocab = [f"w{i}" for i in range(int(lengths.sum()))]
    ends = np.cumsum(lengths)
    docs = [vocab[e - k : e] for e, k in zip(ends.tolist(), lengths.tolist())]
    corpus = words_corpus(tmp, f"packed{n}", docs, vocab)
    packing = pack(corpus.lengths(), 6, seed=3)
    first = corpus.offsets[packing.document[packing.ptr[:-1]]].astype(np.int64)
    starts = first + packing.start[packing.ptr[:-1]]
    window_of = {int(corpus.tokens[s]): w for w, s in enumerate(starts.tolist())}

    def make(world: World, workers: int) -> Any:
        data = LanguageModelLoader(corpus, BATCH, Packed(5), seed=3, world=world)
        return data if workers == 0 else data.loader(workers, multiprocessing_context="fork")

    key = lambda b: [window_of[int(row[0])] for row in b[0]]  # noqa: E731
    return Kind("lm-packed", make, key, packing.windows, lambda w, k: w)


def mixture_kind(n: int, tmp: Path) -> Kind:
    """Two one-document corpora of unique words weighted by their sizes, so that the
    mixture's ``n`` positions are their ``n`` windows, each once."""
    from lading.lm import LanguageModelLoader, Windows
    from lading.lm.windows import TokenMixture

    sizes = (max(1, n // 3), n - max(1, n // 3))  # windows of each corpus
    vocab = [f"w{i}" for i in range(sum(s * BPTT for s in sizes))]
    a = words_corpus(tmp, f"mixa{n}", [vocab[: sizes[0] * BPTT]], vocab)
    b = words_corpus(tmp, f"mixb{n}", [vocab[sizes[0] * BPTT :]], vocab)

    def window(token: int) -> int:  # both corpora's words count from 0 in one vocabulary
        return (token - 2) // BPTT  # a's windows come first, then b's: 0 … n-1

    def make(world: World, workers: int) -> Any:
        mix = TokenMixture({a: sizes[0] / n, b: sizes[1] / n})
        data = LanguageModelLoader(mix, BATCH, Windows(BPTT), seed=3, world=world)
        return data if workers == 0 else data.loader(workers, multiprocessing_context="fork")

    return Kind("lm-mixture", make, lambda b: [window(int(r[0])) for r in b[0]], n, lambda w, k: w)


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
def test_kept_batches_are_the_batches_as_they_came(kind: str, workers: int, data_dir: Path) -> None:
    k = KINDS[kind](61, data_dir)
    assert_batches_kept(k.make, World(1, 2), workers, k.key)


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
def test_every_loader_is_resumable_through_the_one_protocol(kind: str, data_dir: Path) -> None:
    """Each kind (prefetched and framework-wrapped ones too) is a ``Resumable``: its state as of
    an earlier ``position()`` is the state it had then, and ``epoch_length`` counts the epoch."""
    from lading.loading.resumable import EpochLoader, Resumable

    made = KINDS[kind](60, data_dir).make(World(0, 2), 0)
    assert isinstance(made, Resumable)
    made.set_epoch(1)
    total = len(made)
    assert made.epoch_length() == total >= 2
    it = iter(made)
    next(it)
    at, then = made.position(), made.state_dict()
    for _ in it:
        pass
    assert made.state_dict(at=at) == then and made.state_dict() != then
    assert made.epoch_length() == total and len(made) == 0
    made.load_state_dict(then)
    wrapped = EpochLoader(made)  # around a just-restored loader: set_epoch(1) keeps its place
    wrapped.set_epoch(1)
    assert len(wrapped) == total and len(list(wrapped)) == total - 1
    wrapped.set_epoch(1)  # read through the wrapper since: the epoch starts again
    assert len(list(wrapped)) == total


def test_no_wrapper_reaches_inside_a_loader() -> None:
    """Outside ``lading/loading`` nothing reads a loader's source or another object's cursor:
    wrappers compose through :class:`~lading.loading.resumable.Resumable` only."""
    import re

    root = REPO / "src" / "lading"
    pattern = re.compile(r"\.source\.|(?<!self)\.cursor\b")
    found = [
        f"{path.relative_to(root)}:{number}: {line.strip()}"
        for path in sorted(root.rglob("*.py"))
        if path.parent.name != "loading"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert not found, "private access to a loader:\n" + "\n".join(found)
