"""One range a window (issue 48): a window of the epoch stream whose documents lie back to
back in ``tokens.bin`` is read as one range, so a shuffled epoch of windows over the stored
document order (``Windows(..., shuffle_documents=False)``) costs at most one GET a window,
however many documents a window spans; the batches are the local corpus's."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

import numpy as np
import pytest

from conftest import word_corpus
from lading.errors import RemoteReadError
from lading.lm import LanguageModelLoader, TokenCorpus, Windows
from lading.lm.stream import EpochStream
from lading.loading.announce import LOOKAHEAD
from lading.remote.whole import PER_REGION
from lading.testing import LocalS3

pytest.importorskip("tokenizers")

BUCKET = "lm-ranges"
SHAPES = {"short": (3, 12), "long": (150, 400)}  # words a document: ~6 or ~4 a window, or < 1


def plain(batch: Any) -> list[Any]:
    return [f.tolist() if hasattr(f, "tolist") else f for f in batch]


@pytest.fixture(scope="module")
def corpora(s3: LocalS3, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("lm-ranges")
    s3.make_bucket(BUCKET)
    made = {}
    for name, lengths in SHAPES.items():
        docs = 2000 if name == "short" else 120  # 500 windows of 33 tokens, or 1,080
        local = word_corpus(folder / name, docs=docs, lengths=lengths, words=300, seed=2)
        url = f"s3://{BUCKET}/{name}"
        TokenCorpus.build(folder / name / "docs.txt", url, local.tokenizer(), cache=folder / "b")
        made[name] = (local, url, folder)
    return made


@pytest.mark.parametrize("cap", [10, 110])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_a_shuffled_epoch_of_stored_order_windows_costs_at_most_one_get_a_window(
    corpora: dict[str, Any], shape: str, cap: int
) -> None:
    """GETs over an epoch <= windows, at caps of 10 % and 110 % of the corpus, short and long
    documents; the batches equal the local corpus's. (The old code's only shuffled epoch of
    windows permuted the documents: 5.0 GETs a window for the short documents here, 1.1 for
    the long, measured the same way; it still does by default, see the next test.)"""
    local, url, folder = corpora[shape]
    nbytes = local.n_tokens * local.dtype.itemsize
    remote = TokenCorpus.open(url, cache=folder / f"c-{shape}-{cap}",
                              cache_bytes=max(nbytes * cap // 100, 4096))  # fmt: skip
    mode = Windows(32, shuffle_documents=False)
    want = [plain(b) for b in LanguageModelLoader(local, 4, mode, seed=5)]
    before = remote.cache_stats()["gets"]
    loader = LanguageModelLoader(remote, 4, mode, seed=5)
    got = [plain(b) for b in loader]
    assert got == want
    assert remote.remote is not None
    remote.remote.cache.drain()
    gets = remote.cache_stats()["gets"] - before
    windows = sum(len(b[0]) for b in got)
    # the look-ahead runs on into the next epoch's first batches as this one ends (at most 2
    # x LOOKAHEAD batches of 4 windows): at most one GET a window of those too
    print(f"{shape} cap {cap}%: {gets} GETs, {windows} windows")
    assert gets <= windows + 2 * LOOKAHEAD * 4, (gets, windows)


def test_a_stored_order_window_is_one_range_however_many_documents_it_spans() -> None:
    """The pieces of a window of the stored-order stream: one range; of a permuted stream:
    one a document it meets (what a document shuffle costs a remote corpus)."""

    class Corpus:
        offsets = np.concatenate([[0], np.cumsum(np.full(1000, 7))]).astype(np.uint64)
        tokens = np.arange(7000, dtype=np.uint16)

    documents = np.arange(1000, dtype=np.int64)
    stored = EpochStream(Corpus(), documents, 0, 0, shuffle=False, backwards=False)  # type: ignore[arg-type]
    pieces = stored.pieces(np.arange(0, 6000, 100), 101)
    assert len(pieces) == 60 and (pieces[:, 2] - pieces[:, 1] == 101).all()
    permuted = EpochStream(Corpus(), documents, 0, 0, shuffle=True, backwards=False)  # type: ignore[arg-type]
    assert len(permuted.pieces(np.arange(0, 6000, 100), 101)) >= 60 * 14


def test_shuffle_documents_false_keeps_the_windows_and_shuffles_their_order(
    corpora: dict[str, Any],
) -> None:
    """Every epoch reads the same windows (the stored stream cut every seq_len), in another
    order; states record the option (a state of the other order is not resumed)."""
    local = corpora["short"][0]
    loader = LanguageModelLoader(local, 4, Windows(32, shuffle_documents=False), seed=5)
    epochs = [[row for b in loader for row in b[0].tolist()] for _ in range(2)]
    assert epochs[0] != epochs[1] and sorted(epochs[0]) == sorted(epochs[1])
    tokens = np.asarray(local.tokens)
    assert epochs[0][0] in [tokens[w * 32 : w * 32 + 32].tolist() for w in range(len(tokens) // 32)]
    other = LanguageModelLoader(local, 4, Windows(32), seed=5)
    with pytest.raises(Exception, match="shuffle_documents"):
        other.load_state_dict(loader.state_dict())


@pytest.mark.parametrize("shuffle_documents", [True, False])
def test_a_cache_holding_the_corpus_fetches_it_in_whole_blocks(
    corpora: dict[str, Any], shuffle_documents: bool
) -> None:
    """At a cap of twice the corpus, an epoch of shuffled windows (documents permuted or not)
    fetches each block of ``tokens.bin`` whole, once: GETs <= blocks, not one a window; the
    bytes fetched are the corpus's; the batches equal the local corpus's; the next epoch
    fetches nothing. (The code before it sent a GET a window, or 5 a window with documents
    permuted: 500-2,500 here.)"""
    local, url, folder = corpora["short"]
    nbytes = local.n_tokens * local.dtype.itemsize
    name = f"c-whole-{shuffle_documents}"
    remote = TokenCorpus.open(url, cache=folder / name, cache_bytes=2 * nbytes)
    assert remote.remote is not None
    cache = remote.remote.cache
    block = cache.max_block // PER_REGION // local.dtype.itemsize * local.dtype.itemsize
    blocks = -(-nbytes // block)
    mode = Windows(32, shuffle_documents=shuffle_documents)
    loader = LanguageModelLoader(remote, 4, mode, seed=5)
    local_loader = LanguageModelLoader(local, 4, mode, seed=5)
    for epoch in range(2):
        before = remote.cache_stats()
        want = [plain(b) for b in local_loader]
        got = [plain(b) for b in loader]
        assert got == want, epoch
        cache.drain()
        after = remote.cache_stats()
        gets = after["gets"] - before["gets"]
        fetched = after["bytes_fetched"] - before["bytes_fetched"]
        windows = sum(len(b[0]) for b in got)
        print(f"epoch {epoch}: {gets} GETs, {fetched} bytes, {blocks} blocks, {windows} windows")
        if epoch == 0:
            assert gets <= blocks < windows / 4, (gets, blocks, windows)
            assert fetched <= nbytes, (fetched, nbytes)
        else:
            assert gets == 0 and fetched == 0, (gets, fetched)


@pytest.mark.parametrize("shuffle_documents", [False, True])
def test_windows_a_cache_under_the_corpus_would_not_keep_are_fetched_around_it(
    corpora: dict[str, Any], shuffle_documents: bool
) -> None:
    """At a cap of 10 % of the corpus, an epoch reads each range once: the ranges the next
    epoch does not read first are fetched around the node cache for this loader (no claim,
    no fill, no lookup: ``bytes_bypassed``), the next epoch's first ones through it, kept,
    so that the next epoch's first batches find them cached. Batches equal the local
    corpus's in both epochs; GETs stay one a range. (The code before it claimed and filled
    every range: ``bytes_bypassed`` 0 and, measured at 20M tokens, 2 % of the second
    epoch's windows hit where 7.5 % do now.)"""
    local, url, folder = corpora["short"]
    nbytes = local.n_tokens * local.dtype.itemsize
    remote = TokenCorpus.open(url, cache=folder / f"c-around-{shuffle_documents}",
                              cache_bytes=max(nbytes // 10, 4096))  # fmt: skip
    mode = Windows(32, shuffle_documents=shuffle_documents)
    loader = LanguageModelLoader(remote, 4, mode, seed=5, read_ahead=0)
    local_loader = LanguageModelLoader(local, 4, mode, seed=5)
    for epoch in range(2):
        before = remote.cache_stats()
        assert [plain(b) for b in loader] == [plain(b) for b in local_loader], epoch
        after = remote.cache_stats()
        used = after["bytes_used"] - before["bytes_used"]
        around = after["bytes_bypassed"] - before["bytes_bypassed"]
        hits, misses = after["by_epoch"][epoch]
        print(f"epoch {epoch}: {around} of {used} bytes around, {hits} hits, {misses} misses")
        assert around >= 0.6 * used, (around, used)
        assert after["bytes_fetched"] - before["bytes_fetched"] <= 1.1 * used
        if epoch == 1:  # the first batches' ranges were kept for them
            assert hits >= 0.02 * (hits + misses), (hits, misses)
    loader.close()
    remote.close()


def test_with_a_dataloader_worker_the_windows_are_fetched_once_through_the_cache(
    corpora: dict[str, Any], s3: LocalS3
) -> None:
    """One DataLoader worker builds the batches the main process announces: the main
    process fetches nothing around the cache (the worker, reading through the cache, would
    fetch each range again: 2.5-2.8x the bytes used at caps of 10-50 % before this was
    checked), and the bytes of ``tokens.bin`` the server sends are the token bytes the
    batches hold, within 1.1x (the ~1.85x the node's figures gave here once was the corpus's
    index, ``tokens.off``, half the size of these 8-token documents' tokens, with a worker's
    last second of figures not yet told: the server's own count tells them apart)."""
    local, url, folder = corpora["short"]
    nbytes = local.n_tokens * local.dtype.itemsize
    remote = TokenCorpus.open(url, cache=folder / "c-around-worker",
                              cache_bytes=max(nbytes // 10, 4096))  # fmt: skip
    mode = Windows(32, shuffle_documents=False)
    want = [plain(b) for b in LanguageModelLoader(local, 4, mode, seed=5)]
    s3.reset()  # (after the open: its checks of each file's two ends are not the loader's)
    with pytest.warns(UserWarning, match="num_workers"):
        loader = LanguageModelLoader(remote, 4, mode, seed=5, num_workers=1)
    got = [plain(b) for b in loader]
    assert got == want
    loader.close()
    used = sum(len(b[0]) * len(b[0][0]) for b in got) * local.dtype.itemsize
    sent = s3.stats()["get_bytes_by_key"]
    fetched = sum(n for key, n in sent.items() if key.endswith("/tokens.bin"))
    stats = remote.cache_stats()
    print(f"tokens.bin: {fetched} bytes sent for {used} used; around {stats['bytes_bypassed']}")
    assert stats["bytes_bypassed"] == 0
    assert used > 0 and fetched <= 1.1 * used, (fetched, used)
    remote.close()


def test_a_window_fetched_around_the_cache_fails_within_one_deadline_when_the_server_stops(
    corpora: dict[str, Any], s3: LocalS3
) -> None:
    """The server stops answering mid-epoch: the batch whose held GETs (started by the
    window, around the cache) never come back raises within the remote deadline, naming
    the object. (Before: each failed held GET's range was read again, with a deadline of its
    own: 2x the deadline before the error.)"""
    local, url, folder = corpora["short"]
    nbytes = local.n_tokens * local.dtype.itemsize
    limit = 0.4
    remote = TokenCorpus.open(url, cache=folder / "c-around-hang", timeout=limit,
                              cache_bytes=max(nbytes // 10, 4096))  # fmt: skip
    assert remote.remote is not None
    total = remote.remote.cache.fetcher.deadline.total
    loader = LanguageModelLoader(remote, 4, Windows(32), seed=5, read_ahead=0)
    batches = iter(loader)
    next(batches)
    s3.reset()
    s3.fault("tokens.bin", 9999, "hang", delay=60.0)
    waited = 0.0
    try:
        with pytest.raises(RemoteReadError, match=r"tokens\.bin"):
            for _ in range(4 * LOOKAHEAD):  # the batches announced before the fault
                started = time.monotonic()
                next(batches)
        waited = time.monotonic() - started
    finally:
        s3.reset()
    assert remote.cache_stats()["bytes_bypassed"] > 0  # (the around route was taken)
    print(f"the failing batch waited {waited:.2f} s; the deadline is {total:.2f} s")
    assert waited < total + 1.0, (waited, total)
    loader.close()
    remote.close()


RANK = """
import json, sys
from lading import World
from lading.lm import LanguageModelLoader, TokenCorpus, Windows
url, local_path, cache, rank, world, cap = sys.argv[1:7]
rank, world = int(rank), int(world)
on = World(rank, world, local_rank=rank, local_world_size=world)  # one node
local = TokenCorpus.open(local_path)
remote = TokenCorpus.open(url, cache=cache, cache_bytes=int(cap))
opened = remote.cache_stats()
mode = Windows(32, shuffle_documents=False)
want = [b[0].tolist() for b in LanguageModelLoader(local, 4, mode, seed=5, world=on)]
with LanguageModelLoader(remote, 4, mode, seed=5, world=on, read_ahead=0) as loader:
    got = [b[0].tolist() for b in loader]
remote.remote.cache.drain()
stats = remote.cache_stats()
print(json.dumps({"equal": got == want, "windows": sum(len(b) for b in got),
                  "gets": stats["gets"] - opened["gets"],
                  "fetched": stats["bytes_fetched"] - opened["bytes_fetched"]}))
remote.close()
"""


@pytest.mark.slow  # ranks of one node over the local S3: ~4 s
def test_the_ranks_of_one_node_fetch_its_blocks_whole_together(corpora: dict[str, Any]) -> None:
    """Two ranks of one node (``world_size == local_world_size``), two processes reading at
    once through one cache folder at a cap of twice the corpus: each plans the blocks the
    node's ranks read together (alone, a rank reads half of each block, and none would be
    whole), so the node's GETs are at most its blocks and its bytes the corpus's, not a GET a
    window; each rank's batches equal the local corpus's for that rank. (The code before it:
    419 GETs for 502 windows here, 25 now.)"""
    local, url, folder = corpora["short"]
    nbytes = local.n_tokens * local.dtype.itemsize
    cache = folder / "node-of-two"

    def start(rank: int) -> subprocess.Popen[str]:
        args = [url, str(local.path), str(cache), str(rank), "2", str(2 * nbytes)]
        return subprocess.Popen(
            [sys.executable, "-c", RANK, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip

    runs = [start(rank) for rank in range(2)]
    said = []
    for run in runs:
        out, err = run.communicate(timeout=180)
        assert run.returncode == 0, err[-3000:]
        said.append(json.loads(out.strip().splitlines()[-1]))
    print(said)
    assert all(s["equal"] for s in said)
    opened = TokenCorpus.open(url, cache=folder / "c-sizes", cache_bytes=2 * nbytes)
    assert opened.remote is not None
    block = opened.remote.cache.max_block // PER_REGION // 2 * 2
    blocks = -(-nbytes // block)
    gets = sum(s["gets"] for s in said)
    windows = sum(s["windows"] for s in said)
    assert gets <= blocks < windows / 4, (gets, blocks, windows)
    assert sum(s["fetched"] for s in said) <= 1.1 * nbytes
