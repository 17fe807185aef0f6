"""Token corpora and mixtures in object storage (the local S3, 30 ms a request): every LM mode
gives the local corpus's batches in this process and in DataLoader workers, resumes with a cold
node cache, keeps its snapshot through a rebuild, stays within the cap and fetches about the
bytes it uses; bad input is one line naming the fix."""

from __future__ import annotations

import pickle
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import word_corpus, write
from distributed import run_processes
from lading.errors import LadingError, StoreFormatError
from lading.lm import LanguageModelLoader, Packed, Streams, TokenCorpus, TokenMixture, Windows
from lading.loading.announce import LOOKAHEAD
from lading.testing import LocalS3
from lading.world import World

pytest.importorskip("tokenizers")

BUCKET = "lm-remote"
MODES: dict[str, Callable[[], Any]] = {
    "streams": lambda: Streams(7),
    "windows": lambda: Windows(12),
    "packed": lambda: Packed(12),
    "boundaries": lambda: Windows(12, boundaries=True),
    "mixture": lambda: Packed(12, boundaries=True),
}


class Corpora:
    """The local corpora and the URL the first one was uploaded to."""

    def __init__(self, folder: Path, s3: LocalS3) -> None:
        self.folder, self.s3 = folder, s3
        self.local = word_corpus(folder / "a", docs=60, lengths=(3, 30), words=300, seed=0)
        self.other = word_corpus(folder / "b", docs=25, lengths=(3, 20), words=300, seed=1)
        s3.make_bucket(BUCKET)
        self.url = f"s3://{BUCKET}/corpora/a"
        tokenizer = self.local.tokenizer()
        cache = folder / "build-cache"
        made = TokenCorpus.build(folder / "a" / "docs.txt", self.url, tokenizer, cache=cache)
        assert isinstance(made, TokenCorpus) and made.remote is not None
        self.n = 0

    def cache(self) -> Path:
        """A cold node cache (a new directory)."""
        self.n += 1
        return self.folder / f"cache-{self.n}"

    def open(self, cache_bytes: int | str = "1M", cache: Path | None = None) -> TokenCorpus:
        return TokenCorpus.open(self.url, cache=cache or self.cache(), cache_bytes=cache_bytes)


@pytest.fixture(scope="module")
def corpora(s3: LocalS3, tmp_path_factory: pytest.TempPathFactory) -> Corpora:
    return Corpora(tmp_path_factory.mktemp("lm-remote"), s3)


def plain(batch: Any) -> list[Any]:
    """A batch as plain lists (an ``(x, y)`` pair or a DocumentBatch's fields)."""
    return [f.tolist() if hasattr(f, "tolist") else f for f in batch]


def batches(loader: LanguageModelLoader) -> list[Any]:
    return [plain(batch) for batch in loader]


def loader_of(corpora: Corpora, mode: str, corpus: TokenCorpus, **kw: Any) -> LanguageModelLoader:
    data: Any = corpus
    if mode == "mixture":
        data = TokenMixture({corpus: 0.6, corpora.other: 0.4})
    return LanguageModelLoader(data, 3, MODES[mode](), seed=7, **kw)


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("mode", list(MODES))
def test_batches_equal_the_local_corpus_and_resume_with_a_cold_cache(
    corpora: Corpora, mode: str, workers: int
) -> None:
    """The local corpus's batches; a state saved after 3 batches resumes in a new loader over
    the corpus opened again on a cold node cache to the very batches that followed."""
    want = batches(loader_of(corpora, mode, corpora.local))
    remote = corpora.open()
    loader = loader_of(corpora, mode, remote, num_workers=workers)
    got, state = [], None
    for batch in loader:
        got.append(plain(batch))
        if len(got) == 3:
            state = loader.state_dict()
    assert got == want
    if not workers:  # every read was announced ahead (workers read along their parent's plan)
        assert remote.cache_stats()["unplanned"] == 0
    again = loader_of(corpora, mode, corpora.open(), num_workers=workers)
    again.load_state_dict(state)
    assert batches(again) == want[3:]


def test_dataloader_workers_over_a_remote_corpus_are_warned_against(corpora: Corpora) -> None:
    """Workers read a remote corpus slower than the thread does (benchmarks/RESULTS.md): a
    loader made with them says so once, naming the corpus and the fix; at 0 workers, or over
    the local corpus with workers, it says nothing."""
    remote = corpora.open()
    said = r"TokenCorpus\('s3://lm-remote/corpora/a'\) is read from object storage with "
    with pytest.warns(UserWarning, match=said + r"num_workers=2: .* Pass num_workers=0"):
        loader_of(corpora, "windows", remote, num_workers=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert loader_of(corpora, "windows", remote).workers.read_ahead == 2
        loader_of(corpora, "windows", corpora.local, num_workers=2)


def test_remote_batches_are_built_ahead_on_a_thread_unless_told_not_to(corpora: Corpora) -> None:
    """A remote corpus's batches (~5-10 ms of node-cache reads each) are built on a thread
    while the caller holds the last one; ``read_ahead=0`` builds each when asked: the same
    batches either way, epoch after epoch, and a local corpus (read in bulk) has no thread."""
    import threading

    local = loader_of(corpora, "windows", corpora.local)
    want = [batches(local), batches(local)]
    assert local.workers.read_ahead == 0
    ahead = loader_of(corpora, "windows", corpora.open())
    assert ahead.workers.read_ahead == 2
    got, threads = [], set()
    for batch in ahead:
        threads |= {t.name for t in threading.enumerate()}
        got.append(plain(batch))
    assert got == want[0] and "lading-ahead" in threads
    assert batches(ahead) == want[1]
    inline = loader_of(corpora, "windows", corpora.open(), read_ahead=0)
    assert [batches(inline), batches(inline)] == want


def test_the_corpus_reads_what_the_local_one_holds(corpora: Corpora) -> None:
    remote = corpora.open()
    local = corpora.local
    assert (len(remote), remote.n_tokens, remote.dtype) == (len(local), local.n_tokens, np.uint16)
    assert remote.content_id == local.content_id  # a state of one resumes on the other
    assert all(np.array_equal(remote.document(i), local.document(i)) for i in range(len(local)))
    tokens, offsets = remote.token_arrays()
    assert np.array_equal(tokens, local.tokens) and np.array_equal(offsets, local.offsets)
    assert remote.tokenizer().to_str() == local.tokenizer().to_str()
    copy = pickle.loads(pickle.dumps(remote))  # a worker, a rank: the same snapshot again
    assert copy.remote is not None and copy.snapshot == remote.snapshot
    assert np.array_equal(copy.document(5), local.document(5))


@pytest.mark.parametrize(
    "index", [slice(3, 90, 7), slice(90, 3, -4), slice(None, 40, 3), slice(5, 5, 2)]
)
def test_strided_slices_of_the_tokens_read_what_the_local_ones_do(
    corpora: Corpora, index: slice
) -> None:
    """``tokens[a:b:k]`` (a reversed one too) reads as the local memory map does (was:
    IndexError 'read by ranges'); the answer is an array of its own, not a view of the span."""
    got = corpora.open().tokens[index]
    want = np.asarray(corpora.local.tokens[index])
    assert got.dtype == want.dtype and np.array_equal(got, want)
    assert got.base is None or got.flags.owndata or len(got) == 0


def test_streams_on_a_device_stage_the_corpus_whole(corpora: Corpora) -> None:
    """``device=``: the remote corpus's tokens are read whole by ranged GETs and put there."""
    want = batches(LanguageModelLoader(corpora.local, 3, Streams(7), seed=2, device="cpu"))
    loader = LanguageModelLoader(corpora.open(), 3, Streams(7), seed=2, device="cpu")
    assert loader.resident is not None
    assert batches(loader) == want


def test_an_epoch_of_windows_fetches_at_most_1_05_the_bytes_it_uses(corpora: Corpora) -> None:
    """The cache at ~10 % of the corpus: each window's ranges are planned exactly (no gap
    merged, the epoch's order evicting), so what is fetched is what is read."""
    remote = corpora.open(cache_bytes=corpora.local.n_tokens * 2 // 10)
    before = remote.cache_stats()  # the open staged tokens.off and the tokenizer: not reads
    loader = LanguageModelLoader(remote, 2, Windows(16), seed=3)
    assert batches(loader) == batches(LanguageModelLoader(corpora.local, 2, Windows(16), seed=3))
    assert remote.remote is not None
    remote.remote.cache.drain()  # the GETs still in flight: counted now
    after = remote.cache_stats()
    fetched = after["bytes_fetched"] - before["bytes_fetched"]
    used = after["bytes_used"] - before["bytes_used"]
    assert used >= corpora.local.n_tokens * 2 * 0.9  # the epoch read (nearly) every token
    # as the epoch ends, the look-ahead runs on into the next epoch's first batches (at most
    # 2 * LOOKAHEAD of them: 2 windows of 16 + 1 tokens each), fetched for the next pass
    ahead = 2 * LOOKAHEAD * 2 * (16 + 1) * remote.dtype.itemsize
    assert fetched <= 1.05 * (used + ahead), (fetched, used, ahead)


@pytest.mark.parametrize("percent", [10, 1000])
def test_epochs_after_the_first_read_the_same_and_never_around_the_cache(
    corpora: Corpora, percent: int
) -> None:
    """Three epochs through a cache at 10 % and 1000 % of the corpus: each epoch's windows
    start elsewhere in the documents. With room for all, no read goes around the cache:
    consecutive windows share a token, and a range straddling two blocks would (the ranges
    are cut where planned ranges end: lading.lm.remote_reads.split)."""
    remote = corpora.open(cache_bytes=corpora.local.n_tokens * 2 * percent // 100)
    mine = LanguageModelLoader(remote, 2, Windows(16), seed=4)
    theirs = LanguageModelLoader(corpora.local, 2, Windows(16), seed=4)
    for _ in range(3):
        assert batches(mine) == batches(theirs)
    assert mine.epoch == 2
    if percent > 100:  # room for all: only a read straddling two blocks goes around the cache
        assert remote.cache_stats()["bytes_bypassed"] == 0  # (at 10 %, one may find no room)


def test_the_cap_holds_on_disk_at_every_batch(corpora: Corpora) -> None:
    """Blocks within the cap at a cap of a sixth of the corpus (below the ledger's floor of
    512 KiB only the blocks are bounded: lading.remote.cache.footprint)."""
    cap = 1024
    remote = corpora.open(cache_bytes=cap)
    got = []
    for batch in LanguageModelLoader(remote, 3, Packed(12), seed=1):
        got.append(plain(batch))
        assert remote.cache_stats()["bytes_cached"] <= cap
    assert got == batches(LanguageModelLoader(corpora.local, 3, Packed(12), seed=1))


@pytest.mark.slow  # ~11 s: a corpus above the ledger's 512 KiB floor
def test_the_folder_stays_within_its_budgets_at_every_batch(
    corpora: Corpora, tmp_path: Path
) -> None:
    """A corpus of ~0.8 MB through a cap of 520 KiB: after every batch of windows the payload
    file holds at most the cap and the rest of the folder (the ledger's rows and WAL, the
    staged offsets) at most ``index_bytes``."""
    from lading.remote.cache.regions import folder_bytes

    big = word_corpus(tmp_path / "big", docs=2000, lengths=(100, 300), words=300, seed=2)
    url = f"s3://{BUCKET}/corpora/big"
    TokenCorpus.build(tmp_path / "big" / "docs.txt", url, big.tokenizer(), cache=tmp_path / "b")
    cap, cache = 520 << 10, tmp_path / "node"
    remote = TokenCorpus.open(url, cache=cache, cache_bytes=cap)
    assert big.n_tokens * 2 > 1.5 * cap
    budget = remote.cache_stats()["index_bytes"]
    local = iter(LanguageModelLoader(big, 4, Windows(4096), seed=1))
    for batch in LanguageModelLoader(remote, 4, Windows(4096), seed=1):
        assert plain(batch) == plain(next(local))
        payload, rest = folder_bytes(cache)
        assert payload <= cap and rest <= budget, (payload, rest, budget)
    assert remote.cache_stats()["bytes_cached"] > cap // 4  # the cap is put to use


def test_an_open_naming_no_cap_budgets_the_index_by_the_folders_cap(
    corpora: Corpora, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process giving no cap takes the folder's (made at 1 MiB here), but its index budget
    was a quarter of the default cap: 2 GiB of staged copies allowed beside a 1 MiB cache,
    and cache_stats() said so."""
    monkeypatch.delenv("LADING_REMOTE_CACHE_BYTES", raising=False)
    cache = corpora.cache()
    capped = corpora.open("1M", cache=cache)
    said = capped.cache_stats()["index_bytes"]
    capped.close()
    uncapped = TokenCorpus.open(corpora.url, cache=cache)
    stats = uncapped.cache_stats()
    uncapped.close()
    assert stats["cap"] == 1 << 20 and stats["index_bytes"] == said < 64 << 20, (stats, said)


def test_a_cache_too_small_for_a_window_reads_around_it_and_says_so(corpora: Corpora) -> None:
    remote = corpora.open(cache_bytes=8)  # a window of 13 tokens is 26 bytes
    with pytest.warns(UserWarning, match=r"cache_bytes=8 cannot hold one window .* give") as w:
        loader = LanguageModelLoader(remote, 3, Windows(12), seed=5)
    said = next(str(x.message) for x in w if "cannot hold one window" in str(x.message))
    # the cap it asks for, and why that one (was: "(8 batches a window)", a review's puzzle)
    assert f"at least {64 * 3 * 26:,} to fetch ahead (the window, 8 batches of 3 rows" in said
    assert batches(loader) == batches(LanguageModelLoader(corpora.local, 3, Windows(12), seed=5))
    assert remote.cache_stats()["bytes_cached"] <= 8


def test_a_cap_whose_regions_are_under_a_window_says_what_binds(corpora: Corpora) -> None:
    """A cap larger than a window whose regions (a block's most) are smaller is warned of with
    the region's size: it said the cap itself "cannot hold one window" (a cap of 40 bytes
    against a window of 26), which a user could check and find false."""
    remote = corpora.open(cache_bytes=40)  # two regions of 20 bytes; a window of 13 tokens: 26
    assert remote.remote is not None
    region = remote.remote.cache.max_block
    assert region < 26 < remote.remote.cache.cap
    with pytest.warns(UserWarning) as caught:
        loader = LanguageModelLoader(remote, 3, Windows(12), seed=5)
    said = [str(w.message) for w in caught if "cannot hold one window" in str(w.message)]
    assert len(said) == 1, said
    assert f"a region, {region} bytes" in said[0] and "(26 bytes" in said[0], said[0]
    assert batches(loader) == batches(LanguageModelLoader(corpora.local, 3, Windows(12), seed=5))


def test_an_elastic_resume_of_streams_builds_a_bounded_plan_before_its_first_batch(
    corpora: Corpora, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Streams resumed on another world size cannot say a batch's reads at once, so the plan
    learns them by building batches: it built every batch of the epoch and the next before the
    first (1,479 builds at 800k tokens; a 900k-batch epoch ~3 minutes, which reads as a hang).
    Now at most ``PLAN_BUILT`` are built for the plan, and the window's; the batches are the
    local corpus's."""
    from lading.lm import remote_reads
    from lading.lm.workload import LMWorkload

    monkeypatch.setattr(remote_reads, "PLAN_BUILT", 8)
    built = [0]
    build = LMWorkload.build

    def counted(self: LMWorkload, key: Any) -> Any:
        built[0] += 1
        return build(self, key)

    monkeypatch.setattr(LMWorkload, "build", counted)
    saved = LanguageModelLoader(corpora.local, 2, Streams(4), seed=7, world=World(0, 2))
    read = iter(saved)
    for _ in range(3):
        next(read)
    state = saved.state_dict()
    resumed = LanguageModelLoader(
        corpora.open(), 2, Streams(4), seed=7, world=World(0, 1), read_ahead=0
    )
    resumed.load_state_dict(state)
    assert len(resumed) > 40  # (more batches than the plan builds)
    built[0] = 0
    mine = iter(resumed)
    first = next(mine)
    # the plan's 8, the window's (its batches ahead, learnt as they are announced), the first
    assert built[0] <= 8 + 2 * LOOKAHEAD + 1, built[0]  # batch's own (all 78 before)
    local = LanguageModelLoader(corpora.local, 2, Streams(4), seed=7, world=World(0, 1))
    local.load_state_dict(state)
    want = batches(local)
    assert [plain(b) for b in [first, *mine]] == want


@pytest.mark.parametrize("cap, faults", [("1K", 2), ("1M", 1)])
@pytest.mark.parametrize("kind", ["reset", "slow", "error"])
def test_faults_still_give_the_right_batches(
    corpora: Corpora, kind: str, cap: str, faults: int
) -> None:
    """Faults on the GETs of a window's ranges (a cap under the corpus) and of the one whole
    block a cap holding the ~2 KB corpus fetches it in (:mod:`lading.remote.whole`)."""
    remote = corpora.open(cache_bytes=cap)
    corpora.s3.reset()
    corpora.s3.fault("tokens.bin", faults, kind, **({"delay": 0.3} if kind == "slow" else {}))
    try:
        got = batches(LanguageModelLoader(remote, 3, Windows(12), seed=9))
        assert corpora.s3.stats()["faults"] == faults
    finally:
        corpora.s3.reset()
    assert got == batches(LanguageModelLoader(corpora.local, 3, Windows(12), seed=9))


def test_a_snapshot_stays_pinned_while_the_corpus_is_rebuilt(
    corpora: Corpora, tmp_path: Path
) -> None:
    url = f"s3://{BUCKET}/corpora/rebuilt"
    tokenizer = corpora.local.tokenizer()
    first = TokenCorpus.build(corpora.folder / "a" / "docs.txt", url, tokenizer, cache=tmp_path)
    pinned = TokenCorpus.open(url, cache=tmp_path / "node")
    source = write(tmp_path / "new.txt", "w1 w2 w3\n\nw4 w5\n")
    second = TokenCorpus.build(source, url, tokenizer, cache=tmp_path)
    assert second.snapshot != first.snapshot == pinned.snapshot
    assert len(pinned) == 60 and np.array_equal(pinned.document(7), corpora.local.document(7))
    copy = pickle.loads(pickle.dumps(pinned))  # reopens the old snapshot from the node's copy
    assert copy.snapshot == first.snapshot and np.array_equal(copy.document(7), pinned.document(7))
    assert len(TokenCorpus.open(url, cache=tmp_path / "node")) == 2  # a new open: the new one


def _elastic_rank(
    rank: int, world: int, url: str, cache: str, state: dict[str, Any] | None, upto: int | None
) -> dict[str, Any]:
    """Rank ``rank`` of ``world`` (gloo) reading the remote corpus's windows: ``upto`` batches
    then its state, or from ``state`` to the end of the epoch."""
    corpus = TokenCorpus.open(url, cache=cache, cache_bytes="1M")
    loader = LanguageModelLoader(corpus, 3, Windows(12), seed=7)  # the world from gloo
    assert loader.world.world_size == world
    if state is not None:
        loader.load_state_dict(state)
    got: list[Any] = []
    for batch in loader:
        got.append(plain(batch))
        if len(got) == upto:
            return {"batches": got, "state": loader.state_dict()}
    return {"batches": got, "state": None}


@pytest.mark.slow  # six spawned processes importing torch
def test_elastic_resume_from_4_to_2_ranks_over_a_remote_corpus(corpora: Corpora) -> None:
    """Four gloo ranks read 2 batches each and save; two ranks on a cold node cache resume:
    the batches are those of the same route over the local corpus."""
    before = run_processes(_elastic_rank, 4, corpora.url, str(corpora.cache()), None, 2)
    state = before[0]["state"]
    assert all(r["state"] == state for r in before)
    after = run_processes(_elastic_rank, 2, corpora.url, str(corpora.cache()), state, None)
    for rank in range(4):
        loader = LanguageModelLoader(corpora.local, 3, Windows(12), seed=7, world=World(rank, 4))
        assert before[rank]["batches"] == batches(loader)[:2]
    for rank in range(2):
        loader = LanguageModelLoader(corpora.local, 3, Windows(12), seed=7, world=World(rank, 2))
        loader.load_state_dict(state)
        assert after[rank]["batches"] == batches(loader)
        assert after[rank]["batches"]  # something was left to read


def test_lading_lm_build_uploads_to_a_url(
    corpora: Corpora, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from lading.cli import main

    url = f"s3://{BUCKET}/corpora/cli"
    tokenizer = tmp_path / "t.json"
    tokenizer.write_text(corpora.local.tokenizer().to_str())
    source = str(corpora.folder / "a" / "docs.txt")
    assert main(["lm", "build", source, url, "--tokenizer", str(tokenizer), "--quiet"]) == 0
    assert capsys.readouterr().out.startswith(f"{url}: 60 documents")
    built = TokenCorpus.open(url, cache=tmp_path / "node")
    assert built.content_id == corpora.local.content_id


def test_lading_verify_and_inspect_read_a_corpus_at_a_url(
    corpora: Corpora,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from lading.cli import main
    from lading.remote.clients import open_client

    local = word_corpus(tmp_path / "big", docs=400, lengths=(20, 40), words=300, seed=3)
    url = f"s3://{BUCKET}/corpora/verified"  # ~12,000 tokens: a file with a middle
    TokenCorpus.build(tmp_path / "big" / "docs.txt", url, local.tokenizer(), cache=tmp_path / "b")
    monkeypatch.setenv("LADING_CACHE", str(tmp_path / "node"))
    assert main(["inspect", url]) == 0
    out = capsys.readouterr().out
    assert "a token corpus" in out and "documents  400" in out, out
    assert f"corpus     {url} (" in out and f"staged     {tmp_path / 'node'}" in out, out
    assert main(["verify", url]) == 0
    assert "every file matches its checksum" in capsys.readouterr().out
    client = open_client(url)
    tokens = next(k for k in client.list() if k.endswith("tokens.bin"))
    good = client.get(tokens)
    assert len(good) > 8192  # its middle changed: the spot checksums of its ends still hold
    client.put(tokens, good[:4096] + bytes(b ^ 1 for b in good[4096:-4096]) + good[-4096:])
    monkeypatch.setenv("LADING_CACHE", str(tmp_path / "node2"))
    assert main(["verify", url]) == 1
    err = capsys.readouterr().err
    assert tokens in err and "CRC32" in err, err


# ------------------------------------------------------------------ bad input, one line each


def _one_line(error: BaseException) -> str:
    assert isinstance(error, LadingError | ValueError), type(error)
    text = str(error)
    assert "\n" not in text, text
    return text


def test_a_scheme_lading_cannot_reach_is_named(corpora: Corpora, tmp_path: Path) -> None:
    with pytest.raises(LadingError) as opened:
        TokenCorpus.open("nosuch://bucket/corpus", cache=tmp_path)
    assert "no client knows nosuch://" in _one_line(opened.value)
    with pytest.raises(LadingError) as built:
        TokenCorpus.build(corpora.folder / "a" / "docs.txt", "nosuch://b/c", "t.json")
    assert "no client knows nosuch://" in _one_line(built.value)
    assert not (Path.cwd() / "nosuch:").exists()


def test_a_prefix_holding_no_corpus_is_named(corpora: Corpora, tmp_path: Path) -> None:
    with pytest.raises(StoreFormatError) as found:
        TokenCorpus.open(f"s3://{BUCKET}/corpora/none", cache=tmp_path)
    text = _one_line(found.value)
    assert f"no token corpus at s3://{BUCKET}/corpora/none" in text and "TokenCorpus.build" in text


def test_a_prefix_holding_a_document_store_is_named(corpora: Corpora, tmp_path: Path) -> None:
    from lading.remote.clients import open_client

    url = f"s3://{BUCKET}/stores/docs"
    open_client(url).put("meta.json", b'{"format": "lading.store", "version": 2, "files": {}}')
    with pytest.raises(StoreFormatError) as found:
        TokenCorpus.open(url, cache=tmp_path)
    assert "is a document store, not a token corpus: open it with lading.open_store" in _one_line(
        found.value
    )


def test_a_mixture_naming_one_corpus_twice_is_refused(corpora: Corpora) -> None:
    remote = corpora.open()
    again = corpora.open()
    with pytest.raises(ValueError) as twice:
        TokenMixture({remote: 0.5, again: 0.25})
    text = _one_line(twice.value)
    assert f"names the corpus {corpora.url} twice" in text and "sum of its weights (0.75)" in text
    local = corpora.local.path
    with pytest.raises(ValueError, match="twice"):
        TokenMixture({local: 1.0, Path(str(local) + "/../" + local.name): 1.0})


def test_a_mixture_refused_for_a_url_given_twice_opens_nothing(
    corpora: Corpora, tmp_path: Path
) -> None:
    """The members were opened before the check: the refused call made the node cache folder
    at the default cap, and the user's next open with the cap they meant was refused
    (this node cache was made with cache_bytes=8,589,934,592)."""
    cache = tmp_path / "node"
    twice = {corpora.url: 0.5, corpora.url + "/": 0.25}
    with pytest.raises(ValueError, match=f"names the corpus {corpora.url} twice"):
        TokenMixture(twice, cache=cache)
    assert not cache.exists()
    TokenCorpus.open(corpora.url, cache=cache, cache_bytes="1M").close()


@pytest.mark.parametrize("ahead", [0, 2])
def test_one_remote_corpus_in_two_loaders_at_other_places(corpora: Corpora, ahead: int) -> None:
    """A corpus first in one mixture and second in another (a train and a validation loader
    in one process) is read right by both, interleaved, each along its own plan; built ahead,
    by two threads at once (each build holds the corpus: it failed without)."""
    remote = corpora.open()
    first = TokenMixture({remote: 1.0, corpora.other: 1.0})
    second = TokenMixture({corpora.other: 1.0, remote: 1.0})
    mine = [
        LanguageModelLoader(m, 2, Windows(12), seed=3, read_ahead=ahead) for m in (first, second)
    ]
    local = [
        TokenMixture({corpora.local: 1.0, corpora.other: 1.0}),
        TokenMixture({corpora.other: 1.0, corpora.local: 1.0}),
    ]
    want = [batches(LanguageModelLoader(m, 2, Windows(12), seed=3)) for m in local]
    got: list[list[Any]] = [[], []]
    for a, b in zip(*mine):
        got[0].append(plain(a))
        got[1].append(plain(b))
    assert got == [w[: len(got[0])] for w in want]
    if not ahead:  # (a thread goes on into the next epoch, whose first reads' pieces are cut
        # by the next plan, finer than their prefetch: found cached, counted unplanned)
        assert remote.cache_stats()["unplanned"] == 0  # every read was one a plan announced


def test_url_mixtures_take_the_cache_arguments(corpora: Corpora, tmp_path: Path) -> None:
    mixture = TokenMixture(
        {corpora.url: 2.0, corpora.other.path: 1.0}, cache=tmp_path / "node", cache_bytes="64K"
    )
    first = mixture.corpora[0]
    assert first.remote is not None and first.remote.cache.cap == 64 << 10
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert batches(LanguageModelLoader(mixture, 2, Windows(12), seed=1))


def test_an_open_corpus_keeps_its_tokenizer_when_its_staged_copy_is_evicted(
    corpora: Corpora, tmp_path: Path
) -> None:
    """Staging a second corpus evicts the first's staged offsets and tokenizer under
    ``index_bytes``; the first still reads (its offsets are mapped), and its tokenizer, read
    at the open, is still there (it was read from the evicted file when asked, and failed)."""
    from lading.remote.stage import LEDGER_ROOM

    small = word_corpus(tmp_path / "small", docs=300, lengths=(20, 60), words=200, seed=3)
    urls = [f"s3://{BUCKET}/corpora/evict-{k}" for k in "ab"]
    for url in urls:
        TokenCorpus.build(tmp_path / "small" / "docs.txt", url, small.tokenizer(), cache=tmp_path)
    probe = TokenCorpus.open(urls[0], cache=tmp_path / "probe", cache_bytes=1 << 20)
    size = sum(p.stat().st_size for p in probe.path.rglob("*") if p.is_file())
    cap, cache = 8_000, tmp_path / "node"
    index = LEDGER_ROOM + cap // 4 + size + size // 2  # one staged copy fits, not two
    a = TokenCorpus.open(urls[0], cache=cache, cache_bytes=cap, index_bytes=index)
    b = TokenCorpus.open(urls[1], cache=cache, cache_bytes=cap, index_bytes=index)
    assert not a.path.exists() and b.path.exists()  # b's staging evicted a's copy
    want = small.tokenizer().to_str()
    assert a.tokenizer().to_str() == want and b.tokenizer().to_str() == want
    assert a.document(7).tolist() == small.document(7).tolist()
    for corpus in (probe, a, b):
        corpus.close()
