"""What a window-mode loader holds per document, in every process (rank or DataLoader worker).

The corpus is memory-mapped, shared by every process of a node; what each process allocates
for itself is its plan of the epoch: per document and per packed piece, a few integers. Measured
by tracemalloc (numpy arrays are traced) over a corpus of 200,000 tiny documents: the peak while
the loader is made, iterated and its first batch read, and what it keeps after. The old loader
kept int64 everywhere (the document list, the packing's pieces, each document's start and
part), copied a shuffled stream's arrays when two documents merged, and packed through a
Python list of every piece.
"""

from __future__ import annotations

import gc
import tracemalloc

import numpy as np
import pytest

from conftest import word_tokenizer, write
from lading.lm import LanguageModelLoader, Packed, TokenCorpus, Windows

pytest.importorskip("tokenizers")

DOCS = 200_000


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> TokenCorpus:
    """200,000 documents of 1 to 5 words (one token each, plus the EOS)."""
    folder = tmp_path_factory.mktemp("memory")
    rng = np.random.default_rng(0)
    vocab = [f"w{i}" for i in range(50)]
    lengths = rng.integers(1, 6, DOCS)
    words = np.array(vocab)[rng.integers(0, len(vocab), int(lengths.sum()))]
    ends = np.cumsum(lengths).tolist()
    texts = [" ".join(words[e - n : e]) for e, n in zip(ends, lengths.tolist())]
    src = write(folder / "docs.txt", "\n\n".join(texts) + "\n")
    tokenizer = word_tokenizer(vocab, folder / "t.json")
    return TokenCorpus.build(src, folder / "corpus", tokenizer, progress=False)


def bytes_per_document(
    corpus: TokenCorpus, sequence: Windows | Packed, shuffle: bool
) -> tuple[float, float]:
    """(peak, kept) bytes per document traced while a loader is made and its first batch read."""
    gc.collect()
    tracemalloc.start()
    try:
        loader = LanguageModelLoader(corpus, 4, sequence, seed=0, shuffle=shuffle)
        batches = iter(loader)
        next(batches)
        gc.collect()
        kept, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    del batches, loader
    return peak / len(corpus), kept / len(corpus)


# (old peak / kept bytes a document: 114 / 56, 74 / 32, 109 / 50; now 35 / 20, 35 / 12, 55 / 17)
@pytest.mark.parametrize(
    ("sequence", "shuffle", "peak_bound", "kept_bound"),
    [
        (Windows(seq_len=16), True, 40, 26),
        (Windows(seq_len=16), False, 40, 16),
        (Packed(seq_len=16, boundaries=True), True, 70, 24),
    ],
    ids=["windows", "windows-stored-order", "packed"],
)
def test_a_loader_holds_a_few_bytes_per_document(
    corpus: TokenCorpus, sequence: Windows | Packed, shuffle: bool, peak_bound: int, kept_bound: int
) -> None:
    assert len(corpus) == DOCS
    peak, kept = bytes_per_document(corpus, sequence, shuffle)
    assert kept <= kept_bound, f"kept {kept:.1f} B a document (bound {kept_bound})"
    assert peak <= peak_bound, f"peak {peak:.1f} B a document (bound {peak_bound})"


def test_a_worker_gets_the_packing_instead_of_packing_again(
    corpus: TokenCorpus, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A spawned or forkserver DataLoader worker unpickles the workload: the packing made in
    the parent travels with it (a few narrow integers per piece), so the worker neither
    repeats the packer's Python loop over every piece nor its transient arrays."""
    import pickle

    import lading.lm.windows as windows

    loader = LanguageModelLoader(corpus, 4, Packed(seq_len=16), seed=0)
    data = loader._lm.data  # the loader's EpochWindows (packed when the loader was made)
    assert 0 in data._packings
    made = data._packings[0]

    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError("the worker packed again")

    monkeypatch.setattr(windows, "pack", refused)
    copy = pickle.loads(pickle.dumps(data))
    got = copy.packing(0)
    for name in ("ptr", "document", "start", "length"):
        np.testing.assert_array_equal(getattr(got, name), getattr(made, name))
    assert copy._epoch is None  # the epoch's reader holds the token map: made again
