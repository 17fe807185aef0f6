"""TokenCorpus and LanguageModelLoader: continuity, coverage, shifts, ranks, resume, memory."""

from __future__ import annotations

import itertools
import tracemalloc
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from conftest import store_file, word_corpus, word_tokenizer, write
from contracts import forked
from distributed import run_processes
from lading.lm import LanguageModelLoader, Packed, Streams, TokenCorpus, Windows
from lading.loading.order import Salt, feistel_permutation
from lading.world import World

tokenizers = pytest.importorskip("tokenizers")
SHAPES: dict[str, type[Streams] | type[Windows]] = {"streams": Streams, "windows": Windows}


@pytest.fixture
def corpus(tmp_path: Path) -> TokenCorpus:
    """37 documents of 3..40 words; word w_i has id i + 2, so tokens are easy to check."""
    return word_corpus(tmp_path, docs=37, lengths=(3, 40), words=500, seed=0)


def epoch_stream(loader: LanguageModelLoader, epoch: int) -> np.ndarray:
    """The permuted epoch stream, built the slow way from the corpus's documents."""
    rng = np.random.default_rng([loader.seed, int(Salt.DOCUMENT_ORDER), epoch])
    order = loader.documents[rng.permutation(len(loader.documents))]
    return np.concatenate([loader.corpus.document(int(d)) for d in order]).astype(np.int64)


def collect(loader: LanguageModelLoader) -> list[tuple[np.ndarray, np.ndarray]]:
    return [(x.numpy().copy(), y.numpy().copy()) for x, y in loader]


def test_corpus_uses_uint16_and_ends_documents(corpus: TokenCorpus) -> None:
    assert corpus.dtype == np.uint16 and len(corpus) == 37
    assert store_file(corpus.path, "tokens.bin").stat().st_size == 2 * corpus.n_tokens
    for i in range(len(corpus)):
        doc = corpus.document(i)
        assert doc[-1] == corpus.eos_id and (doc[:-1] >= 2).all()
    again = TokenCorpus.open(corpus.path)
    assert np.array_equal(again.tokens, corpus.tokens)


def test_a_document_index_counts_from_the_end_as_pythons_do(corpus: TokenCorpus) -> None:
    """``document(-1)`` is the last document (was: an empty array, and ``-2`` the last one);
    an index past either end is an IndexError naming the count."""
    n = len(corpus)
    assert np.array_equal(corpus.document(-1), corpus.document(n - 1))
    assert np.array_equal(corpus.document(-n), corpus.document(0))
    for bad in (n, -n - 1):
        with pytest.raises(IndexError, match=f"document {bad} .* {n:,} documents"):
            corpus.document(bad)


@pytest.mark.parametrize("backwards", [False, True])
@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_continuity_coverage_and_shift(
    corpus: TokenCorpus, backwards: bool, world_size: int
) -> None:
    batch = 3
    loaders = [
        LanguageModelLoader(
            corpus,
            batch,
            Streams(7, backwards=backwards),
            seed=5,
            world=World(rank=r, world_size=world_size),
        )
        for r in range(world_size)
    ]
    for loader in loaders:
        loader.set_epoch(2)
    batches = [collect(loader) for loader in loaders]
    assert len({len(b) for b in batches}) == 1  # every rank the same number of batches
    stream = epoch_stream(loaders[0], 2)
    if backwards:
        stream = stream[::-1]
    total = len(stream)
    streams = world_size * batch
    length = -(-total // streams)  # the stream is a cycle: T (input, target) pairs
    seen: Counter[int] = Counter()
    for rank, rank_batches in enumerate(batches):
        for row in range(batch):
            xs = np.concatenate([x[row] for x, _ in rank_batches])
            for x, y in rank_batches:  # y is x shifted by one token
                assert np.array_equal(y[row, :-1], x[row, 1:])
            for (_, y), (x_next, _) in itertools.pairwise(rank_batches):
                assert y[row, -1] == x_next[row, 0]  # row r of batch t+1 continues row r of t
            s = rank * batch + row
            positions = (s * length + np.arange(len(xs))) % total
            assert np.array_equal(xs, stream[positions])  # a contiguous piece of the stream
            seen.update(positions.tolist())
    assert set(seen) == set(range(total))  # every token of the epoch is used
    assert sum(seen.values()) - total < streams  # only the wrap-around fill repeats


def test_epochs_permute_differently_and_drop_last(corpus: TokenCorpus) -> None:
    loader = LanguageModelLoader(corpus, 2, Streams(5), seed=0, world=World())
    first = collect(loader)
    loader.set_epoch(1)
    second = collect(loader)
    assert not np.array_equal(first[0][0], second[0][0])
    dropping = LanguageModelLoader(corpus, 2, Streams(5), equalize="truncate", world=World())
    xs = np.concatenate([x[0] for x, _ in collect(dropping)])
    assert len(xs) == corpus.n_tokens // 2


def test_jitter_rules(corpus: TokenCorpus) -> None:
    fixed = LanguageModelLoader(corpus, 2, Streams(9, jitter=None), world=World())
    lengths = [x.shape[1] for x, _ in fixed]
    assert set(lengths[:-1]) == {9}
    uniform = LanguageModelLoader(corpus, 2, Streams(9, jitter=(4, 6)), world=World())
    assert set(x.shape[1] for x, _ in list(uniform)[:-1]) <= {4, 5, 6}
    fastai = LanguageModelLoader(corpus, 1, Streams(30), world=World())
    lengths = [x.shape[1] for x, _ in fastai][:-1]
    assert min(lengths) >= 5 and max(lengths) <= 55 and 20 < np.mean(lengths) < 32
    with pytest.raises(ValueError, match="jitter must be"):
        Streams(9, jitter=(6, 4))


def test_exact_resume(corpus: TokenCorpus) -> None:
    def make() -> LanguageModelLoader:
        loader = LanguageModelLoader(corpus, 3, Streams(6), seed=9, world=World(1, 2))
        loader.set_epoch(3)
        return loader

    full = collect(make())
    first = make()
    head = []
    for x, y in first:
        head.append((x.numpy().copy(), y.numpy().copy()))
        if len(head) == 5:
            break
    resumed = make()
    resumed.load_state_dict(first.state_dict())
    rest = collect(resumed)
    assert len(head) + len(rest) == len(full)
    for (a, b), (c, d) in zip(head + rest, full):
        assert np.array_equal(a, c) and np.array_equal(b, d)
    other = LanguageModelLoader(corpus, 3, Streams(6), seed=8, world=World(1, 2))
    with pytest.raises(ValueError, match="seed=9"):
        other.load_state_dict(first.state_dict())


@pytest.fixture
def unique_corpus(tmp_path: Path) -> TokenCorpus:
    """23 documents of distinct words: an (input, target) pair names its stream position."""
    rng = np.random.default_rng(1)
    words = [f"u{i}" for i in range(600)]
    cuts = np.sort(rng.choice(np.arange(1, 600), 22, replace=False))
    docs = [" ".join(part) for part in np.split(np.array(words), cuts)]
    src = write(tmp_path / "u.txt", "\n\n".join(docs) + "\n")
    return TokenCorpus.build(
        src, tmp_path / "u", word_tokenizer(words, tmp_path / "u.json"), progress=False
    )


@pytest.mark.parametrize(
    ("mode", "backwards", "drop_last"),
    [
        ("streams", False, False),
        ("streams", True, False),
        ("streams", False, True),
        ("windows", False, False),
    ],
)
@pytest.mark.parametrize(("old", "new"), [((4, 2), (2, 3)), ((2, 2), (3, 2)), ((4, 2), (4, 3))])
def test_elastic_resume_predicts_every_position_once(
    unique_corpus: TokenCorpus,
    mode: str,
    backwards: bool,
    drop_last: bool,
    old: tuple[int, int],
    new: tuple[int, int],
) -> None:
    """Checkpointed at (world size, batch size) ``old`` after 4 batches and resumed at ``new``:
    every (input, target) pair of the epoch stream is read, pairs are true neighbours, and
    repeats are only the padding of the two layouts."""

    def make(layout: tuple[int, int], rank: int) -> LanguageModelLoader:
        world_size, batch = layout
        loader = LanguageModelLoader(
            unique_corpus, batch, SHAPES[mode](9, backwards=backwards), seed=4,
            equalize="truncate" if drop_last else "pad", drop_partial_batch=drop_last,
            world=World(rank=rank, world_size=world_size),
        )  # fmt: skip
        loader.set_epoch(1)
        return loader

    stream = epoch_stream(make(old, 0), 1)
    if backwards:
        stream = stream[::-1]
    position = {(int(a), int(b)): p for p, (a, b) in enumerate(itertools.pairwise(stream))}
    assert len(position) == len(stream) - 1  # pairs are unique in this corpus
    seen: Counter[int] = Counter()

    def read(x: Any, y: Any) -> None:
        for a, b in zip(np.asarray(x).ravel().tolist(), np.asarray(y).ravel().tolist()):
            if (a, b) in position:
                seen[position[(a, b)]] += 1
            else:  # only the wrap from the stream's end to its start is not a real pair
                assert (a, b) == (int(stream[-1]), int(stream[0])), (a, b)

    states = []
    for rank in range(old[0]):
        loader = make(old, rank)
        for _, (x, y) in zip(range(4), loader):
            read(x, y)
        states.append(loader.state_dict())
    assert all(state == states[0] for state in states)
    counts = set()
    for rank in range(new[0]):
        loader = make(new, rank)
        loader.load_state_dict(states[0])
        batches = collect(loader)
        counts.add(len(batches))
        for x, y in batches:
            read(x, y)
    assert len(counts) == 1, counts
    pairs = len(stream) - 1
    unit = 9 if mode == "windows" else 1
    if drop_last:
        assert all(c == 1 for c in seen.values())
        assert len(seen) >= pairs - new[0] * new[1] * unit
    else:
        assert set(seen) == set(range(pairs if mode == "streams" else pairs - pairs % 9))
        assert sum(seen.values()) - len(seen) < (old[0] * old[1] + new[0] * new[1]) * unit


def test_elastic_then_same_layout_resume_is_bitwise(unique_corpus: TokenCorpus) -> None:
    """A run resumed elastically can itself be checkpointed and resumed exactly."""

    def make(rank: int, world_size: int, batch: int) -> LanguageModelLoader:
        return LanguageModelLoader(
            unique_corpus, batch, Streams(5), seed=2, world=World(rank=rank, world_size=world_size)
        )

    first = make(0, 4, 2)
    for _ in zip(range(3), first):
        pass
    state = first.state_dict()
    full, head = make(1, 3, 2), make(1, 3, 2)
    full.load_state_dict(state)
    head.load_state_dict(state)
    expected = collect(full)
    taken = [(x.numpy().copy(), y.numpy().copy()) for _, (x, y) in zip(range(2), head)]
    again = make(1, 3, 2)
    again.load_state_dict(head.state_dict())
    got = taken + collect(again)
    assert len(got) == len(expected) > 2
    for (a, b), (c, d) in zip(got, expected):
        assert np.array_equal(a, c) and np.array_equal(b, d)


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_windows_are_disjoint_and_cover_the_epoch(corpus: TokenCorpus, world_size: int) -> None:
    loaders = [
        LanguageModelLoader(
            corpus, 4, Windows(8), seed=2, world=World(rank=r, world_size=world_size)
        )
        for r in range(world_size)
    ]
    stream = epoch_stream(loaders[0], 0)
    windows = (len(stream) - 1) // 8
    found: Counter[int] = Counter()
    counts = set()
    for loader in loaders:
        batches = collect(loader)
        counts.add(len(batches))
        for x, y in batches:
            assert np.array_equal(y[:, :-1], x[:, 1:])
            for row in x:
                starts = [
                    w for w in range(windows) if np.array_equal(stream[w * 8 : w * 8 + 8], row)
                ]
                found[starts[0]] += 1
    assert len(counts) == 1
    assert set(found) == set(range(windows))
    assert sum(found.values()) - windows < world_size


def test_feistel_is_a_permutation() -> None:
    for n in (1, 2, 7, 100, 1000, 4097):
        got = feistel_permutation(np.arange(n), n, 1, 2)
        assert sorted(got.tolist()) == list(range(n))
    assert feistel_permutation(np.arange(50), 50, 1, 2).tolist() != list(range(50))


@pytest.mark.parametrize("n", [8, 10, 14, 20, 100, 167])
def test_feistel_orders_of_few_positions_look_drawn_at_random(n: int) -> None:
    """Over 400 seeds the order of ``n`` positions (the locality shuffle's blocks, a few
    packed windows) leaves about one position in place, as a uniform draw does, is almost
    never the stored order, and two epochs almost never draw the same: the first round
    function kept only low bits of a product (n = 8: 2.8 in place, the stored order 19 % of
    the time, epoch 1 = epoch 0 6 %; n = 100: 4.7 in place)."""
    index = np.arange(n)
    fixed = stored = same = 0
    for seed in range(400):
        first = feistel_permutation(index, n, seed, 0)
        fixed += int((first == index).sum())
        stored += bool((first == index).all())
        same += bool((first == feistel_permutation(index, n, seed, 1)).all())
    assert 0.75 <= fixed / 400 <= 1.3, fixed / 400
    assert stored <= 2 and same <= 2, (stored, same)


def test_memory_does_not_grow_with_the_token_count(tmp_path: Path) -> None:
    """Few long documents: iterating allocates chunks of stream and a per-document index only."""
    words = [f"w{i}" for i in range(100)]
    rng = np.random.default_rng(1)
    docs = [" ".join(rng.choice(words, 20_000)) for _ in range(10)]  # 200k tokens
    src = write(tmp_path / "long.txt", "\n\n".join(docs))
    corpus = TokenCorpus.build(
        src, tmp_path / "c", word_tokenizer(words, tmp_path / "t.json"), progress=False
    )
    loader = LanguageModelLoader(corpus, 8, Streams(50, chunk_batches=16), world=World())
    tracemalloc.start()
    for _ in loader:
        pass
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    chunk = 8 * 8 * (75 * 16 + 1)  # rows x (max_seq x chunk_batches + 1) int64: no corpus term
    # at most two chunks live (the one read and the next), each with its labels' copy, plus
    # a per-document index: the tokens as int64 (what a naive loader holds) would be 1.6 MB
    assert peak < 4 * chunk + 0.05 * corpus.n_tokens * 8, (peak, corpus.n_tokens)


def test_a_stream_batchs_offset_costs_nothing_a_batch_before_it(tmp_path: Path) -> None:
    """Where batch ``k`` of a streams epoch starts in its stream is asked once a batch by
    DataLoader workers, after an elastic resume, and by a remote corpus's plan of the whole
    epoch (every batch of it and of the next). It was the sum of the ``k`` lengths before it,
    copied out of the lengths each time: O(batches) a batch, O(batches**2) an epoch (a
    4B-token epoch at batch 64, bptt 70: ~900k batches, 4.5 ms a batch near its end and
    ~35 min of a remote plan's CPU before the first batch). Now a look-up: no copy of the
    lengths before it (traced), and the same offsets."""
    from lading.loading.state import Cursor

    words = [f"w{i}" for i in range(100)]
    rng = np.random.default_rng(2)
    src = write(tmp_path / "long.txt", " ".join(rng.choice(words, 60_000)))
    corpus = TokenCorpus.build(
        src, tmp_path / "c", word_tokenizer(words, tmp_path / "t.json"), progress=False
    )
    loader = LanguageModelLoader(corpus, 1, Streams(1, jitter=(1, 2)), world=World())
    seg = loader._lm.planned(Cursor())
    assert seg.batches > 30_000
    want = np.concatenate([[0], np.cumsum(seg.seqs)])
    last = range(seg.batches - 200, seg.batches + 1)
    tracemalloc.start()
    got = [seg.offset(k) for k in last]
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert got == want[seg.batches - 200 :].tolist()
    assert peak < 20_000, peak  # a copy of the 30k+ lengths before a batch: >= 240 kB


def _rank_batches(rank: int, world: int, path: str) -> dict[str, Any]:
    corpus = TokenCorpus.open(path)
    loader = LanguageModelLoader(corpus, 2, Streams(6), seed=4)  # world detected from gloo
    loader.set_epoch(1)
    order = np.random.default_rng([4, int(Salt.DOCUMENT_ORDER), 1]).permutation(len(corpus))
    order = order.tolist()
    xs = [x.numpy().tolist() for x, _ in loader]
    return {"rank": loader.world.rank, "batches": xs, "order": order}


@pytest.mark.slow
def test_real_ranks_split_the_streams(corpus: TokenCorpus) -> None:
    results = run_processes(_rank_batches, 3, str(corpus.path))
    assert [r["rank"] for r in results] == [0, 1, 2]
    assert len({len(r["batches"]) for r in results}) == 1
    single = [
        LanguageModelLoader(corpus, 2, Streams(6), seed=4, world=World(r, 3)) for r in range(3)
    ]
    for r, loader in enumerate(single):
        loader.set_epoch(1)
        assert [x.numpy().tolist() for x, _ in loader] == results[r]["batches"]
    rows = [tuple(np.concatenate(rows_of(r["batches"], i))) for r in results for i in range(2)]
    assert len(set(rows)) == 6  # six different streams


def rows_of(batches: list[list[list[int]]], row: int) -> list[np.ndarray]:
    return [np.array(b[row]) for b in batches]


@pytest.mark.slow  # tokenizes the Wikipedia sample: ~30 s
def test_real_wikipedia_sample(data_dir: Path, tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    from lading.lm.texts import iter_texts

    src = data_dir / "lm/enwiki-2015-wikiextractor.jsonl"
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    head = [t for _, t in zip(range(300), iter_texts(src))]
    tok.train_from_iterator(
        head,
        trainers.BpeTrainer(
            vocab_size=1000,
            special_tokens=["<|endoftext|>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    corpus = TokenCorpus.build(src, tmp_path / "wiki", tok, progress=False)
    assert corpus.dtype == np.uint16 and len(corpus) > 1000
    assert corpus.n_tokens > 5_000_000
    loader = LanguageModelLoader(corpus, 16, Streams(70), world=World())
    x, y = next(iter(loader))
    assert x.shape[0] == 16 and np.array_equal(y[:, :-1].numpy(), x[:, 1:].numpy())


@pytest.mark.parametrize("workers", [0, forked(2)])
def test_packed_padding_is_never_scored(corpus: TokenCorpus, workers: int) -> None:
    from lading.lm import IGNORE_INDEX

    def make(boundaries: bool) -> Any:
        return LanguageModelLoader(
            corpus, 8, Packed(16, boundaries=boundaries), world=World(0, 1), seed=3,
            num_workers=workers,
        )  # fmt: skip

    plain = [(x.clone(), y.clone()) for x, y in make(False)]
    marked = list(make(True))
    assert len(plain) == len(marked) and plain
    padded = 0
    for (x, y), batch in zip(plain, marked):
        scored = batch.loss_mask.bool()
        assert torch.equal(x, batch.input_ids)
        assert torch.equal(y[scored], batch.labels[scored])  # real labels kept as they are
        assert bool((y[~scored] == IGNORE_INDEX).all())  # padding: never a real token's label
        padded += int((~scored).sum())
    assert padded > 0  # the corpus leaves padding in its packed windows
    # and cross_entropy over (x, y) scores exactly the labels the loss mask scores
    logits = torch.randn(*plain[0][1].shape, 600)
    want = torch.nn.functional.cross_entropy(
        logits[marked[0].loss_mask.bool()], marked[0].labels[marked[0].loss_mask.bool()]
    )
    got = torch.nn.functional.cross_entropy(logits.flatten(0, 1), plain[0][1].flatten())
    assert torch.allclose(got, want)


@pytest.mark.parametrize("mode", ["streams", "windows", "packed"])
def test_kept_batches_are_not_overwritten(corpus: TokenCorpus, mode: str) -> None:
    # every DataLoader a user has met hands out batches they own: list(loader) must keep them
    shape = {"streams": Streams(5, chunk_batches=2), "windows": Windows(5), "packed": Packed(5)}
    loader = LanguageModelLoader(corpus, 3, shape[mode], world=World(0, 1))
    copied = [(x.clone(), y.clone()) for x, y in loader]
    loader.set_epoch(0)
    kept = list(loader)
    assert len(kept) == len(copied) > 4  # several chunks of 2 batches were read
    for (x, y), (cx, cy) in zip(kept, copied):
        assert torch.equal(x, cx) and torch.equal(y, cy)


def test_a_loaded_state_replans_the_epoch(corpus: TokenCorpus) -> None:
    # load_state_dict replaces the loader's cursor; the plan kept for the cursor the loader
    # was made with (epoch 0) must not be read for the restored epoch 1
    def make() -> Any:
        # jittered lengths: epochs 0 and 1 have different batch counts (81 and 94)
        return LanguageModelLoader(corpus, 2, Streams(5, jitter=(2, 9)), seed=7, world=World())

    whole = make()
    whole.set_epoch(1)
    want = [x.tolist() for x, _ in whole]
    head = make()
    head.set_epoch(1)
    got = [batch[0].tolist() for _, batch in zip(range(2), head)]
    resumed = make()
    resumed.load_state_dict(head.state_dict())
    assert got + [x.tolist() for x, _ in resumed] == want


def test_len_between_passes_is_the_coming_epochs(corpus: TokenCorpus) -> None:
    """With jittered lengths every epoch has its own batch count (here 81, 94, ...): ``len()``
    before a pass is the count that pass reads (it was the last pass's: 417 before a pass of
    413 in the issue's example); inside a pass it is the pass's own epoch, to its last batch."""
    made = LanguageModelLoader(corpus, 2, Streams(5, jitter=(2, 9)), seed=7, world=World())
    counts = []
    for epoch in range(4):
        fresh = LanguageModelLoader(corpus, 2, Streams(5, jitter=(2, 9)), seed=7, world=World())
        fresh.set_epoch(epoch)
        counts.append(len(fresh))
    assert len(set(counts)) > 1  # the epochs differ, or this shows nothing
    for epoch in range(3):
        before, inside = len(made), set()
        read = sum(1 for _ in made if not inside.add(len(made)))
        assert before == read == counts[epoch] and inside == {counts[epoch]}
    next(iter(made))  # a peek at epoch 3: the next pass is epoch 4's
    assert len(made) == sum(1 for _ in made)


def test_an_up_to_date_corpus_is_reused_on_a_read_only_mount(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As a store: ``TokenCorpus.build`` of the same source and tokenizer on a read-only mount
    (where ``DEST.lock`` cannot be created) opens the corpus there; a rebuild still locks."""
    import contextlib
    import errno
    import os

    first = word_corpus(tmp_path, docs=5, lengths=(3, 8), words=20, seed=0)

    @contextlib.contextmanager
    def refused(dest: Path) -> Any:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), f"{dest}.lock")
        yield

    monkeypatch.setattr("lading.disk.build.build_lock", refused)
    src, tok = tmp_path / "docs.txt", tmp_path / "t.json"
    again = TokenCorpus.build(src, first.path, tok, progress=False)
    assert again.snapshot == first.snapshot and again.n_tokens == first.n_tokens
    with pytest.raises(OSError, match="Read-only file system"):
        TokenCorpus.build(src, first.path, tok, append_eos=False, progress=False)
