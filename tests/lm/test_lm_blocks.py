"""The shuffle that keeps locality (``Windows(..., shuffle_documents=False, block_tokens=B)``):
a bijection of the epoch's windows (every window once, len() and resume as the global
shuffle's), batches drawn from ``block_buffer`` blocks at a time, each block fetched whole
by a remote corpus about once an epoch; the local corpus's batches bit for bit."""

from __future__ import annotations

import os
import random
from typing import Any

import numpy as np
import pytest

from conftest import word_corpus
from lading.lm import LanguageModelLoader, TokenCorpus, TokenMixture, Windows
from lading.lm.blocks import block_order
from lading.loading.announce import LOOKAHEAD
from lading.remote.cache import node as node_module
from lading.remote.cache.regions import Layout
from lading.testing import LocalS3

BUCKET = "lm-blocks"


def test_the_block_order_is_a_bijection_drawing_from_buffer_blocks_at_a_time() -> None:
    seed = int(os.environ.get("LADING_TEST_SEED", random.randrange(1 << 30)))
    print(f"LADING_TEST_SEED={seed}")
    rng = random.Random(seed)
    for _ in range(200):
        n, per, buffer = rng.randrange(1, 400), rng.randrange(1, 40), rng.randrange(1, 6)
        windows = block_order(np.arange(n), n, per, buffer, seed, rng.randrange(3))
        assert sorted(windows.tolist()) == list(range(n)), (n, per, buffer)
        for g in range(0, n, per * buffer):  # a buffer's positions: its blocks' windows
            assert len(set((windows[g : g + per * buffer] // per).tolist())) <= buffer
    a = block_order(np.arange(1000), 1000, 10, 4, seed, 0)
    b = block_order(np.arange(1000), 1000, 10, 4, seed, 1)
    assert a.tolist() != b.tolist()  # each epoch its own order


def _block_order_by_group(
    positions: Any, n: int, per: int, buffer: int, seed: int, epoch: int
) -> Any:
    """The order computed a buffer at a time, as block_order did before it took every buffer
    at once: the oracle that the order did not change (checkpoints name positions in it)."""
    from lading.loading.order import feistel_permutation

    span, full = per * buffer, n // per
    group, offset = np.divmod(positions, span)
    out = np.empty_like(positions)
    for g in np.unique(group).tolist():
        mine = group == g
        inner = feistel_permutation(offset[mine], min(span, n - g * span), seed, epoch, 2, g)
        slot, within = np.divmod(inner, per)
        slot += g * buffer
        block = slot.copy()
        if full:
            real = slot < full
            block[real] = feistel_permutation(slot[real], full, seed, epoch, 1)
        out[mine] = block * per + within
    return out


def test_the_block_order_of_many_positions_is_the_order_a_buffer_at_a_time() -> None:
    """Many positions at once (an epoch's plan: every buffer's round keys side by side, one
    Feistel network over all) give each window the order a buffer at a time gives; a batch's
    few positions too. Computing it a buffer at a time (a mask over every position per
    buffer) grew with n x buffers: 4.5 s for 400k windows of 12-window blocks."""
    seed = int(os.environ.get("LADING_TEST_SEED", random.randrange(1 << 30)))
    print(f"LADING_TEST_SEED={seed}")
    rng = random.Random(seed)
    for _ in range(60):
        n, per, buffer = rng.randrange(1, 5000), rng.randrange(1, 40), rng.randrange(1, 6)
        epoch = rng.randrange(3)
        everything = np.arange(n, dtype=np.int64)
        expected = _block_order_by_group(everything, n, per, buffer, seed, epoch)
        assert block_order(everything, n, per, buffer, seed, epoch).tolist() == expected.tolist()
        some = np.array(rng.sample(range(n), min(n, rng.randrange(1, 200))), dtype=np.int64)
        got = block_order(some, n, per, buffer, seed, epoch)
        assert got.tolist() == expected[some].tolist(), (n, per, buffer, len(some))


def test_bad_options_are_named() -> None:
    with pytest.raises(ValueError, match="shuffle_documents=False"):
        Windows(16, block_tokens=64)
    with pytest.raises(ValueError, match="block_buffer"):
        Windows(16, shuffle_documents=False, block_tokens=64, block_buffer=0)
    with pytest.raises(ValueError, match="block_tokens"):
        Windows(16, shuffle_documents=False, block_tokens=-1)


def plain(batch: Any) -> list[Any]:
    return [f.tolist() if hasattr(f, "tolist") else f for f in batch]


@pytest.fixture(scope="module")
def corpus(s3: LocalS3, tmp_path_factory: pytest.TempPathFactory) -> tuple[TokenCorpus, str, Any]:
    folder = tmp_path_factory.mktemp("lm-blocks")
    local = word_corpus(folder / "a", docs=2000, lengths=(3, 12), words=300, seed=3)
    s3.make_bucket(BUCKET)
    url = f"s3://{BUCKET}/a"
    TokenCorpus.build(folder / "a" / "docs.txt", url, local.tokenizer(), cache=folder / "b")
    return local, url, folder


def test_the_mixture_and_len_and_the_state(corpus: tuple[TokenCorpus, str, Any]) -> None:
    """len() is the global shuffle's; a mixture is refused naming the fix; a state of the
    global shuffle is not resumed by the block shuffle (the order differs)."""
    local = corpus[0]
    mode = Windows(32, shuffle_documents=False, block_tokens=320)
    blocks = LanguageModelLoader(local, 4, mode, seed=1)
    exact = LanguageModelLoader(local, 4, Windows(32, shuffle_documents=False), seed=1)
    assert len(blocks) == len(exact)
    assert sorted(r for b in blocks for r in map(tuple, b[0].tolist())) == sorted(
        r for b in exact for r in map(tuple, b[0].tolist())
    )
    with pytest.raises(ValueError, match="TokenMixture"):
        LanguageModelLoader(TokenMixture({local: 1.0}), 4, mode, seed=1)
    with pytest.raises(Exception, match="block_"):
        blocks.load_state_dict(exact.state_dict())


@pytest.mark.parametrize("boundaries", [False, True])
def test_a_remote_epoch_fetches_each_block_about_once_and_resumes_cold(
    corpus: tuple[TokenCorpus, str, Any], boundaries: bool
) -> None:
    """At a cap of 25 % of the corpus (regions of 1/16: blocks of 10 windows fit one): the
    local batches, GETs about one a block, not one a window; a state after 5 batches resumes
    on a cold cache to the same batches."""
    local, url, folder = corpus
    nbytes = local.n_tokens * local.dtype.itemsize
    mode = Windows(32, shuffle_documents=False, block_tokens=320, boundaries=boundaries)
    want = [plain(b) for b in LanguageModelLoader(local, 4, mode, seed=2)]
    remote = TokenCorpus.open(url, cache=folder / f"c{boundaries}", cache_bytes=nbytes // 4)
    before = remote.cache_stats()["gets"]
    loader = LanguageModelLoader(remote, 4, mode, seed=2)
    got, state = [], None
    for batch in loader:
        got.append(plain(batch))
        if len(got) == 5:
            state = loader.state_dict()
    assert got == want
    assert remote.remote is not None
    remote.remote.cache.drain()
    gets = remote.cache_stats()["gets"] - before
    windows = sum(len(b[0]) for b in got)
    blocks = -(-windows // 10)
    print(f"{gets} GETs, {windows} windows, {blocks} blocks")
    assert gets <= 1.5 * blocks + 2 * LOOKAHEAD, (gets, blocks)  # evicted and fetched again
    assert gets < windows / 4
    again = LanguageModelLoader(
        TokenCorpus.open(url, cache=folder / f"cold{boundaries}", cache_bytes=nbytes // 4),
        4, mode, seed=2,
    )  # fmt: skip
    again.load_state_dict(state)
    assert [plain(b) for b in again] == want[5:]


def test_ranks_on_nodes_of_their_own_fetch_the_blocks_they_read_not_every_block(
    corpus: tuple[TokenCorpus, str, Any],
) -> None:
    """Ranks each with a cache folder of its own (a node each): each fetches about its share
    of what one rank reading the whole epoch fetches (and the blocks of the two buffers its
    share's ends cut, which its neighbours read too), not all of it (was: the windows were
    dealt round-robin, every rank read windows of every block, and each node fetched every
    block: W times its share); each rank its local batches, every window once in all."""
    from lading.world import World

    local, url, folder = corpus
    nbytes = local.n_tokens * local.dtype.itemsize
    mode = Windows(32, shuffle_documents=False, block_tokens=320)
    whole = 0
    for world in (1, 2, 3):
        windows = []
        for rank in range(world):
            on = World(rank, world)
            want = [plain(b) for b in LanguageModelLoader(local, 4, mode, seed=3, world=on)]
            remote = TokenCorpus.open(url, cache=folder / f"node{world}-{rank}", cache_bytes=nbytes)
            opened = remote.cache_stats()["bytes_fetched"]  # (the corpus's small files)
            with LanguageModelLoader(remote, 4, mode, seed=3, world=on, read_ahead=0) as loader:
                got = [plain(b) for b in loader]
            assert got == want
            assert remote.remote is not None
            remote.remote.cache.drain()
            fetched = remote.cache_stats()["bytes_fetched"] - opened
            remote.close()
            whole = whole or fetched  # one rank, the whole epoch
            print(f"rank {rank} of {world}: {fetched} bytes fetched, the whole epoch {whole}")
            buffer = 4 * 321 * local.dtype.itemsize  # a buffer's blocks (10 windows + 1)
            assert fetched <= 1.1 * whole / world + 2 * buffer  # the two at its share's ends
            windows += [tuple(x) for b in got for x in b[0]]
        one = LanguageModelLoader(local, 4, mode, seed=3)
        every = [tuple(x) for b in one for x in plain(b)[0]]
        assert set(windows) == set(every) and len(windows) - len(every) < world  # (pad)


def test_a_state_dealt_round_robin_on_many_ranks_is_refused_on_one_rank_resumed(
    corpus: tuple[TokenCorpus, str, Any],
) -> None:
    """A state saved by a lading that dealt the locality shuffle's windows round-robin (no
    ``block_deal`` in its fingerprint) names other windows on more than one rank: refused,
    saying so; on one rank the two deals are one, and it resumes to the same batches."""
    from lading.loading.state import LoaderStateError
    from lading.world import World

    local = corpus[0]
    mode = Windows(32, shuffle_documents=False, block_tokens=320)
    for world in (2, 1):
        loader = LanguageModelLoader(local, 4, mode, seed=5, world=World(0, world))
        batches = iter(loader)
        for _ in range(3):
            next(batches)
        state = loader.state_dict()
        del state["fingerprint"]["block_deal"]  # as an older lading saved it
        rest = [plain(b) for b in batches]
        again = LanguageModelLoader(local, 4, mode, seed=5, world=World(0, world))
        if world > 1:
            with pytest.raises(LoaderStateError, match=r"block_deal.*round-robin"):
                again.load_state_dict(state)
        else:
            again.load_state_dict(state)
            assert [plain(b) for b in again] == rest


def test_blocks_larger_than_a_region_are_fetched_ahead_in_pieces(
    corpus: tuple[TokenCorpus, str, Any],
) -> None:
    """Blocks of two regions' bytes: the window fetches each in pieces a region can hold, so
    a batch's reads find them cached (was: the planner left a range larger than a region to
    its read, nothing was fetched ahead, and the reads made a GET a window: 489 GETs for 502
    windows here, against 13 now)."""
    local, url, folder = corpus
    cap = local.n_tokens * local.dtype.itemsize  # the whole corpus: 7 regions of ~4.6 KB
    region = Layout.of(cap).region_bytes
    block = 2 * region // local.dtype.itemsize  # tokens: two regions' bytes
    mode = Windows(32, shuffle_documents=False, block_tokens=block, block_buffer=2)
    want = [plain(b) for b in LanguageModelLoader(local, 4, mode, seed=5)]
    remote = TokenCorpus.open(url, cache=folder / "two-regions", cache_bytes=cap)
    loader = LanguageModelLoader(remote, 4, mode, seed=5, read_ahead=0)
    got = [plain(b) for b in loader]
    assert got == want
    assert remote.remote is not None
    remote.remote.cache.drain()
    stats = remote.cache_stats()
    windows = sum(len(b[0]) for b in got)
    pieces = 2 * -(-windows // (block // 32))  # each block in two pieces
    print(f"{stats['gets']} GETs, {windows} windows, {pieces} pieces of blocks, cap {cap}")
    assert stats["gets"] <= 1.5 * pieces + 2 * LOOKAHEAD, (stats["gets"], pieces)
    assert stats["gets"] < windows / 4


@pytest.mark.parametrize("read_ahead", [0, 2])
def test_a_held_block_is_read_from_the_cache_once_not_once_a_batch(
    corpus: tuple[TokenCorpus, str, Any], read_ahead: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under the locality shuffle a reader holds the blocks it reads (HeldBlocks): the cache
    is read about once a block of the epoch, where it was read once a batch (the next
    batches read the same blocks: two ledger transactions and a copy each, for bytes just
    copied); the batches stay the local corpus's."""
    from lading.remote.cache import NodeCache

    local, url, folder = corpus
    nbytes = local.n_tokens * local.dtype.itemsize
    mode = Windows(32, shuffle_documents=False, block_tokens=320)
    want = [plain(b) for b in LanguageModelLoader(local, 4, mode, seed=4)]
    calls = []
    read = NodeCache.read

    def counted(self: Any, spans: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(len(spans))
        return read(self, spans, *args, **kwargs)

    monkeypatch.setattr(NodeCache, "read", counted)
    remote = TokenCorpus.open(url, cache=folder / f"held{read_ahead}", cache_bytes=nbytes // 2)
    loader = LanguageModelLoader(remote, 4, mode, seed=4, read_ahead=read_ahead)
    got = [plain(b) for b in loader]
    loader.close()
    assert got == want
    windows = sum(len(b[0]) for b in got)
    blocks = -(-windows // 10)
    print(
        f"{len(calls)} reads of the cache, {sum(calls)} ranges, {len(got)} batches, {blocks} blocks"
    )
    assert sum(calls) <= blocks + 2, (calls, blocks)  # each block once (a shard's end: two)
    assert len(calls) < len(got) / 2


def test_the_blocks_of_a_documents_split_are_held_whole_not_fetched_again(
    corpus: tuple[TokenCorpus, str, Any],
) -> None:
    """Over a ``documents=`` split (every other document) a block is one range a document in
    ``tokens.bin``: the reader holds blocks by their tokens, not by their ranges, so the epoch
    fetches about the bytes its windows read, in fewer GETs than the exact shuffle's. Held by
    ranges, it dropped the blocks after each batch and read them again through a small cache:
    3.6x the bytes used, 1.5x the exact shuffle's GETs (a review's repro)."""
    local, url, folder = corpus
    nbytes = local.n_tokens * local.dtype.itemsize
    split = np.arange(0, len(local), 2)
    fetched, gets = {}, {}
    for name, mode in {
        "exact": Windows(32, shuffle_documents=False),
        "blocks": Windows(32, shuffle_documents=False, block_tokens=320),
    }.items():
        want = [plain(b) for b in LanguageModelLoader(local, 4, mode, seed=6, documents=split)]
        remote = TokenCorpus.open(url, cache=folder / f"split-{name}", cache_bytes=nbytes // 20)
        before = remote.cache_stats()
        with LanguageModelLoader(remote, 4, mode, seed=6, documents=split) as loader:
            got = [plain(b) for b in loader]
        assert got == want, name
        assert remote.remote is not None
        remote.remote.cache.drain()
        after = remote.cache_stats()
        fetched[name] = after["bytes_fetched"] - before["bytes_fetched"]
        gets[name] = after["gets"] - before["gets"]
        used = sum(len(b[0]) for b in got) * 33 * local.dtype.itemsize
        print(f"{name}: {fetched[name]} bytes fetched for {used} used, {gets[name]} GETs")
    assert fetched["blocks"] <= 1.2 * used, (fetched, used)
    assert gets["blocks"] < gets["exact"], gets


def test_first_reads_keep_each_blocks_first_batch_of_each_reader() -> None:
    seed = int(os.environ.get("LADING_TEST_SEED", random.randrange(1 << 30)))
    print(f"LADING_TEST_SEED={seed}")
    from lading.lm.spans import first_reads

    rng = np.random.default_rng(seed)
    for _ in range(50):
        n, readers = int(rng.integers(0, 60)), int(rng.integers(1, 4))
        block = rng.integers(0, 6, n)
        which = rng.integers(0, 20, n)
        a, b = block * 10, block * 10 + 11
        got = first_reads(which, a, b, readers)
        want = []
        for k in sorted(set(block.tolist())):
            batches = sorted(which[block == k].tolist())
            want += [(j, k * 10, k * 10 + 11) for j in batches[:readers]]
        assert list(zip(*(x.tolist() for x in got))) == want


def test_dataloader_workers_hold_blocks_of_their_own(corpus: tuple[TokenCorpus, str, Any]) -> None:
    """With DataLoader workers each worker holds the blocks it reads (its own HeldBlocks,
    made as the workload is unpickled there) and the plan keeps a block in the cache for the
    first batch of each worker: the local batches."""
    local, url, folder = corpus
    nbytes = local.n_tokens * local.dtype.itemsize
    mode = Windows(32, shuffle_documents=False, block_tokens=320)
    want = [plain(b) for b in LanguageModelLoader(local, 4, mode, seed=6)]
    remote = TokenCorpus.open(url, cache=folder / "workers", cache_bytes=nbytes // 2)
    with pytest.warns(UserWarning, match="num_workers"):
        loader = LanguageModelLoader(remote, 4, mode, seed=6, num_workers=2)
    got = [plain(b) for b in loader]
    loader.close()
    assert got == want


@pytest.mark.parametrize("read_ahead", [0, 2])
def test_the_window_fetches_a_held_block_for_its_first_batch_only(
    corpus: tuple[TokenCorpus, str, Any], read_ahead: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The window asks the cache for a held block at the first batch that reads it, not at
    the batches after, which take it from the reader's HeldBlocks. Asked for those too, a
    block the read-ahead thread had already read, and the cache had let go since (nothing
    planned for it after its first read), was fetched again for nothing: 12 of 163 blocks,
    1.09x the bytes used, on 2M tokens at a 10 % cap under a 1M tokens/s step
    (benchmarks/bench_remote_lm.py, "+step")."""
    from lading.lm.remote_blocks import HeldBlocks
    from lading.remote.cache import Planner

    local, url, folder = corpus
    nbytes, size = local.n_tokens * local.dtype.itemsize, local.dtype.itemsize
    mode = Windows(32, shuffle_documents=False, block_tokens=320)
    want = [plain(b) for b in LanguageModelLoader(local, 4, mode, seed=7)]
    asked: list[tuple[int, int]] = []  # (byte, step) of each block piece the window asked for
    first: dict[tuple[int, int, int], int] = {}  # (a, b, epoch) of a block -> its first read
    prefetch, fetched = Planner.prefetch, HeldBlocks.fetched

    def asking(self: Any, needs: Any, now: int) -> Any:
        asked.extend((n.start, n.step) for n in needs)
        return prefetch(self, needs, now)

    def reading(self: Any, remote: Any, blocks: Any, step: int) -> Any:
        for _, a, b in np.asarray(blocks).tolist():
            first.setdefault((a, b, step >> 32), step)
        return fetched(self, remote, blocks, step)

    monkeypatch.setattr(Planner, "prefetch", asking)
    monkeypatch.setattr(HeldBlocks, "fetched", reading)
    remote = TokenCorpus.open(url, cache=folder / f"first{read_ahead}", cache_bytes=nbytes // 4)
    with LanguageModelLoader(remote, 4, mode, seed=7, read_ahead=read_ahead) as loader:
        got = [plain(b) for b in loader]
    assert got == want
    starts = sorted({(a, b) for a, b, _ in first})
    late = []  # (block, batches after its first read); the next epoch's, asked ahead, not read
    for byte, step in asked:
        a, b = starts[np.searchsorted([a * size for a, _ in starts], byte, side="right") - 1]
        read = first.get((a, b, step >> 32))
        if read is not None and step > read:
            late.append(((a, b), step - read))
    print(f"{len(asked)} pieces asked for, {len(late)} after their block's first read")
    assert asked and not late, late[:10]


def test_the_workers_reads_reach_the_nodes_figures(
    corpus: tuple[TokenCorpus, str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A DataLoader worker ends by ``os._exit`` (past ``atexit``): its figures still reach
    the node as it exits, so after an epoch read by 2 workers the node counts at least the
    bytes one process reading the same epoch used (they were lost: all but what a worker
    had told the node in its once-a-second update, here made never: forked workers inherit
    ``COUNT_S``)."""
    monkeypatch.setattr(node_module, "COUNT_S", 1e9)
    local, url, folder = corpus
    nbytes = local.n_tokens * local.dtype.itemsize
    mode = Windows(32, shuffle_documents=False, block_tokens=320)
    alone = TokenCorpus.open(url, cache=folder / "figures-alone", cache_bytes=nbytes // 4)
    n = sum(1 for _ in LanguageModelLoader(alone, 4, mode, seed=7))
    read_alone = alone.cache_stats()["node"]
    remote = TokenCorpus.open(url, cache=folder / "figures-workers", cache_bytes=nbytes // 4)
    with pytest.warns(UserWarning, match="num_workers"):
        loader = LanguageModelLoader(remote, 4, mode, seed=7, num_workers=2)
    assert sum(1 for _ in loader) == n
    loader.close()
    node = remote.cache_stats()["node"]
    print(f"node, 2 workers: {node}; node, one process: {read_alone}")
    assert node["bytes_used"] >= read_alone["bytes_used"], (node, read_alone)
    reads = node.get("hits", 0) + node.get("misses", 0)
    assert reads >= read_alone.get("hits", 0) + read_alone.get("misses", 0)
