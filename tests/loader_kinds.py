"""The loaders under the contracts (tests/contracts.py), each a :class:`Kind`: how to make it for a
(world, workers) and how to name the items of one of its batches.

Every item of every loader is a number ``0 … n-1`` (a sample, a row, a token position, a
window), so one key function per loader turns a batch into the items it holds. Shared by
tests/loading/test_contracts.py and the integration tests that run every loader.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import word_tokenizer, write
from contracts import Numbers
from lading.world import World

BATCH = 3
BPTT = 2  # windows of 2 (input, target) pairs
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


@dataclass
class Kind:
    """One loader under test: ``make(world, workers)`` and the items of a batch."""

    name: str
    make: Callable[[World, int], Any]
    key: Callable[[Any], list[int]]
    items: int  # n: the items an epoch holds
    readers: Callable[[int, int], int]  # (world_size, workers) -> shares cut


def map_kind(n: int, tmp: Path, as_dict: bool = False, equalize: str = "pad") -> Kind:
    """``lading.loader`` over the numbers ``0 … n-1``; with ``as_dict`` a batch is
    ``{"ids": tensor}`` (what a trainer that calls ``model(**batch)`` expects)."""
    from lading.loading.map_workload import loader

    collate = ids_dict if as_dict else None

    def make(world: World, workers: int) -> Any:
        return loader(
            Numbers(n), BATCH, collate_fn=collate, num_workers=workers, seed=3, world=world,
            equalize=equalize, multiprocessing_context="fork",
        )  # fmt: skip

    def key(batch: Any) -> list[int]:
        return [int(x) for x in (batch["ids"] if as_dict else batch)]

    return Kind("map", make, key, n, lambda w, k: w)


def ids_dict(items: list[int]) -> dict[str, Any]:
    """A batch of numbers as ``{"ids": tensor}``."""
    import torch

    return {"ids": torch.tensor(items)}


def parquet_kind(n: int, tmp: Path, equalize: str = "pad") -> Kind:
    from lading.tabular import PartitionedParquet

    path = tmp / f"rows{n}.parquet"
    if not path.exists():
        table = pa.table({"row": pa.array(np.arange(n), pa.int64())})
        pq.write_table(table, path, row_group_size=max(1, n // 3))

    def make(world: World, workers: int) -> Any:
        return PartitionedParquet(
            path, BATCH, seed=3, equalize=equalize, world=world, buffer_rows=5,
            num_workers=workers, multiprocessing_context="fork",
        )  # fmt: skip

    return Kind("parquet", make, lambda b: b["row"].tolist(), n, lambda w, k: w)


def lm_kind(
    n: int,
    tmp: Path,
    mode: str,
    boundaries: bool = False,
    equalize: str = "pad",
    jitter: Any = "fastai",
) -> Kind:
    """One document of unique words: token ``t`` of the stream has id ``t + 2`` (0 is the
    end of the document, the last token), so a batch names its stream positions. Windows
    ``boundaries=True`` give :class:`~lading.lm.DocumentBatch` es (``input_ids`` first);
    streams jitter their lengths by ``jitter`` (None for the frameworks, which size every
    epoch as the first)."""
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
        sequence = (
            Streams(BPTT, jitter=jitter)
            if mode == "streams"
            else Windows(BPTT, boundaries=boundaries)
        )
        return LanguageModelLoader(
            corpus, BATCH, sequence, seed=3, world=world, equalize=equalize,
            num_workers=workers, multiprocessing_context="fork",
        )  # fmt: skip

    if mode == "streams":
        return Kind(
            "lm-streams",
            make,
            lambda b: [position(t) for t in b[0].flatten().tolist()],
            n,
            lambda w, k: w * BATCH,
        )
    return Kind(
        "lm-windows" + ("+boundaries" if boundaries else ""),
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
    from lading.lm import LanguageModelLoader

    def make(world: World, workers: int) -> Any:
        assert not workers, "a GPU-resident loader reads in-process (no DataLoader workers)"
        host = kind.make(world, 0)
        return LanguageModelLoader(
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


def packed_kind(n: int, tmp: Path, boundaries: bool = False) -> Kind:
    """``n`` documents of 1-4 unique words packed into windows of 6 tokens; a window is
    named by its first token, the start of its first piece (``input_ids`` come first in a
    ``boundaries=True`` batch too)."""
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
        return LanguageModelLoader(
            corpus, BATCH, Packed(5, boundaries=boundaries), seed=3, world=world,
            num_workers=workers, multiprocessing_context="fork",
        )  # fmt: skip

    key = lambda b: [window_of[int(row[0])] for row in b[0]]  # noqa: E731
    name = "lm-packed" + ("+boundaries" if boundaries else "")
    return Kind(name, make, key, packing.windows, lambda w, k: w)


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
        return LanguageModelLoader(
            mix, BATCH, Windows(BPTT), seed=3, world=world,
            num_workers=workers, multiprocessing_context="fork",
        )  # fmt: skip

    return Kind("lm-mixture", make, lambda b: [window(int(r[0])) for r in b[0]], n, lambda w, k: w)
