"""Ends of the remote plane that must never wait out a deadline: the interpreter's exit while a
loader's read-ahead waits on a stalled server, a loader collected by the cyclic GC on the fetch
loop's own thread, and a fill whose GET raised a ``BaseException`` (a cancelled fsspec future's
``asyncio.CancelledError``). Real processes and threads against the local S3."""

from __future__ import annotations

import asyncio
import gc
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import word_corpus
from lading.lm import LanguageModelLoader, TokenCorpus, Windows
from lading.remote.cache.fill import Fill, Filler
from lading.remote.loop import LOOP
from lading.testing import LocalS3

pytest.importorskip("tokenizers")
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def faults(s3: LocalS3) -> Iterator[LocalS3]:
    s3.reset()
    yield s3
    s3.reset()


def _corpus(folder: Path, s3: LocalS3, bucket: str) -> str:
    local = word_corpus(folder / "a", docs=200, lengths=(3, 60), words=300, seed=0)
    url = f"s3://{bucket}/corpus"
    TokenCorpus.build(folder / "a" / "docs.txt", url, local.tokenizer(), cache=folder / "built")
    return url


EXIT_READING_AHEAD = """
    import sys, threading, time
    from lading.lm import LanguageModelLoader, TokenCorpus, Windows

    remote = TokenCorpus.open(sys.argv[1], cache=sys.argv[2], cache_bytes="2K")
    loader = LanguageModelLoader(remote, 3, Windows(12), seed=5)  # remote: read-ahead on
    it = iter(loader)
    next(it)
    print("first batch", flush=True)
    sys.stdin.readline()  # every GET hangs from here
    threading.Thread(target=lambda: [b for b in it], daemon=True).start()
    time.sleep(2.0)  # the read-ahead's build waits on a GET never answered
    print("exiting", flush=True)
    sys.exit(0)
"""


@pytest.mark.slow  # a stalled server: ~5 s (a minute before the fix)
def test_an_exit_while_the_read_ahead_waits_on_a_stalled_server_is_prompt(
    s3: LocalS3, bucket: str, faults: LocalS3, tmp_path: Path
) -> None:
    """Was 58.7-58.9 s at the default deadline (20 s): the exit closed the read-ahead without
    ending its GETs and joined its thread for a whole deadline, twice (the loader's finalizer
    at ``atexit``, then the exit hook), while "no answer ... retrying" was printed."""
    url = _corpus(tmp_path, s3, bucket)
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{REPO / 'tests'}"}
    # 6 s an attempt: the exit still waits once for obstore's calls in flight to end by
    # their own timeout (the fetch loop's drain, :mod:`lading.remote.loop`), not again for
    # the read-ahead's thread, twice, nor for a retry
    env["LADING_REMOTE_TIMEOUT"] = "6"
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(EXIT_READING_AHEAD), url, str(tmp_path / "node")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == "first batch"
        faults.fault("corpus/", 100000, "hang")
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "exiting"
        started = time.monotonic()
        try:
            _, err = child.communicate(timeout=150)
        except subprocess.TimeoutExpired:
            pytest.fail("the child never exited")
        elapsed = time.monotonic() - started
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == 0, err
    assert elapsed < 10.0, f"the exit took {elapsed:.1f} s:\n{err[-3000:]}"
    assert "retrying" not in err, err[-3000:]


OPEN_PASS_AT_EXIT = """
    import pathlib, sys
    from conftest import word_corpus
    from lading.lm import LanguageModelLoader, Windows

    corpus = word_corpus(pathlib.Path(sys.argv[1]), docs=37, lengths=(3, 40), words=500, seed=0)
    loader = LanguageModelLoader(corpus, 2, Windows(5), seed=0, read_ahead=2)
    batches = iter(loader)  # a module's global: ended as the interpreter finalizes
    next(batches)
    print("exiting with a pass open", flush=True)
"""


@pytest.mark.slow  # a child process: ~5 s
def test_a_pass_left_open_in_a_modules_globals_lets_the_process_exit(tmp_path: Path) -> None:
    """A pass's end cancels the read-ahead thread's GETs from a thread of its own (the GC
    may end a pass inside any lock); ended as the interpreter finalizes, that thread never
    starts, and ``Thread.start`` waited for it for ever (a review of the change: the script
    below hung at exit)."""
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{REPO / 'tests'}"}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(OPEN_PASS_AT_EXIT), str(tmp_path / "c")],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "exiting with a pass open", done.stdout


class _Holder:
    """A trainer's object in a reference cycle, holding a loader and its pass."""


def test_a_loader_collected_on_the_fetch_loops_thread_never_blocks_the_loop(
    s3: LocalS3, bucket: str, faults: LocalS3, tmp_path: Path
) -> None:
    """The cyclic GC ran the loader's finalizer (and its pass's ``finally``) on the fetch
    loop's thread, which joined the read-ahead thread waiting on a GET only that loop could
    settle: every GET of the process froze for 35-40 s."""
    url = _corpus(tmp_path, s3, bucket)
    remote = TokenCorpus.open(url, cache=tmp_path / "node", cache_bytes="2K")
    loader = LanguageModelLoader(remote, 3, Windows(12), seed=5, read_ahead=2)
    it = iter(loader)
    next(it)
    time.sleep(1.0)  # two batches built ahead
    faults.fault("corpus/", 1000, "slow", delay=3.0)  # the next GETs take 3 s
    next(it)
    next(it)  # taken: the thread builds on, its GETs slow
    time.sleep(0.3)
    holder = _Holder()
    holder.me, holder.loader, holder.it = holder, loader, it  # type: ignore[attr-defined]
    del loader, it, holder
    loop = LOOP.loop
    assert loop is not None
    collected = threading.Event()

    def collect() -> None:
        gc.collect()
        collected.set()

    was = gc.isenabled()
    gc.disable()  # (so the collection on the loop's thread is the one that finds the cycle)
    try:
        started = time.monotonic()
        loop.call_soon_threadsafe(collect)
        assert collected.wait(10.0), "the collection on the fetch loop's thread blocked"
        asyncio.run_coroutine_threadsafe(asyncio.sleep(0), loop).result(10.0)
        elapsed = time.monotonic() - started
    finally:
        if was:
            gc.enable()
    assert elapsed < 3.0, f"the fetch loop was blocked {elapsed:.1f} s"
    faults.reset()


def test_a_fill_whose_get_raised_a_base_exception_gives_the_claim_back() -> None:
    """A GET settled with ``asyncio.CancelledError`` (a ``BaseException``: a cancelled fsspec
    future's) killed the fill thread: the claims of what came after stayed held."""
    marked: list[tuple[list, list, list]] = []
    filler = Filler(
        lambda done, failed, checks: marked.append((done, failed, checks)), lambda: None
    )

    def cancelled() -> bytes:
        raise asyncio.CancelledError

    try:
        filler.put(Fill(1, 0, 10, 0, 0, cancelled))
        deadline = time.monotonic() + 5.0
        while not marked and time.monotonic() < deadline:
            time.sleep(0.01)
        assert marked == [([], [(1, 0, 10)], [])]
        filler.put(Fill(2, 0, 3, 0, 0, lambda: b"abc"))  # the thread lives on
        deadline = time.monotonic() + 5.0
        while len(marked) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert marked[1:] == [([(2, 0, 0, 0, b"abc", None)], [], [])]
    finally:
        filler.close()


@pytest.mark.slow  # a stalled server: ~8 s
def test_nothing_is_fetched_for_a_loader_after_its_close_on_a_stalled_server(
    s3: LocalS3, bucket: str, faults: LocalS3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A state loaded mid-pass plans its prefetches from this thread (not the read-ahead's,
    whose GETs a close cancels); the server stalls; ``close`` waits one deadline for them, as
    documented, then returned with them still pending: the fetcher retried them after (84
    GETs sent in the 5 s after close returned, 168 by 10 s, in a reviewer's script). Now the
    ones unanswered at the end of the wait are given up: none is sent after close."""
    monkeypatch.setenv("LADING_REMOTE_TIMEOUT", "2")
    url = _corpus(tmp_path, s3, bucket)
    remote = TokenCorpus.open(url, cache=tmp_path / "node", cache_bytes="16K")
    try:
        loader = LanguageModelLoader(remote, 8, Windows(16), seed=1)
        state = loader.state_dict()
        it = iter(loader)
        next(it)
        faults.fault("corpus/", 100000, "hang")
        loader.load_state_dict(state)  # plans again: prefetches sent from this thread
        time.sleep(0.5)
        started = time.monotonic()
        loader.close()
        took = time.monotonic() - started
        sent = faults.stats()["gets"]
        time.sleep(5.0)  # two attempts' timeouts and their pauses: any retry is sent by now
        after = faults.stats()["gets"] - sent
    finally:
        faults.reset()
        remote.close()
    assert took < 2.0 + 1.5, took  # one deadline's wait at most
    assert after == 0, f"{after} GETs sent after close() returned"
