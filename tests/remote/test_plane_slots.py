"""The node's slots of GETs in flight (:mod:`lading.remote.slots`): their files are a
fetcher's from its first GET to its close. Each open of a remote store or corpus left its 12
slot files open after ``close()`` (a process reopening corpora, an evaluation a checkpoint,
ran out of descriptors after ~80 opens at 1,024, its GETs then failing as "Too many open
files"); a forked child kept its parent's copies as well."""

from __future__ import annotations

import asyncio
import fcntl
import os
from pathlib import Path

import pytest

import lading
from conftest import files_open_under, wait_child, word_tokenizer, write
from lading.remote.slots import NodeSlots


def _slot_files(under: Path) -> list[str]:
    """This process's open descriptors that are slot files under ``under``."""
    return [f for f in files_open_under(under) if "/inflight/slot-" in f]


def test_each_open_and_close_of_a_remote_store_leaves_no_slot_file_open(
    bucket: str, tmp_path: Path
) -> None:
    source = write(tmp_path / "docs.tsv", "".join(f"d{i}\tdocument {i}\n" for i in range(50)))
    url = f"s3://{bucket}/slots"
    lading.build_store(source, url, cache=str(tmp_path / "up"), progress=False)
    node = tmp_path / "node"
    for i in range(5):
        store = lading.open_store(url, cache=node, cache_bytes="1M")
        assert store.get_many([f"d{i}"]) == [f"document {i}"]  # a GET: the slots opened
        assert len(_slot_files(node)) > 0
        store.close()
        assert _slot_files(node) == []


def test_the_slot_files_go_at_the_last_release_after_close(tmp_path: Path) -> None:
    """A call holding a slot at close keeps the files until it lets the slot go (closed
    under it, the descriptor could be another file's by the release, which would unlock
    that); no slot is taken after close."""
    slots = NodeSlots(tmp_path / "inflight", 3)
    held = asyncio.run(slots.acquire())
    assert held is not None and len(_slot_files(tmp_path)) == 3
    slots.close()
    assert len(_slot_files(tmp_path)) == 3  # a slot is held: the files stay
    slots.release(held)
    assert _slot_files(tmp_path) == []
    assert asyncio.run(slots.acquire()) is None


def test_a_forked_child_closes_its_copies_and_the_parents_lock_holds(tmp_path: Path) -> None:
    """The child lets its copies of the parent's slot files go (they leaked there) without
    the parent's lock: a ``flock`` goes with the last descriptor of its file."""
    slots = NodeSlots(tmp_path / "inflight", 1)
    held = asyncio.run(slots.acquire())
    assert held == 0
    pid = os.fork()
    if pid == 0:
        code = 9
        try:
            slots.forked()
            mine = _slot_files(tmp_path)
            fd = os.open(tmp_path / "inflight" / "slot-0000", os.O_RDWR)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                code = 4  # the parent's lock went with the child's copies
            except BlockingIOError:
                code = 0 if mine == [] else 3
            finally:
                os.close(fd)
        finally:
            os._exit(code)
    assert wait_child(pid) == 0  # 3: copies kept; 4: the lock went
    slots.release(held)
    slots.close()
    assert _slot_files(tmp_path) == []


@pytest.mark.slow  # ~3-6 s over the local S3 (the default tier's 10 minutes)
def test_a_remote_corpus_dropped_without_close_lets_its_slot_files_go(
    bucket: str, tmp_path: Path
) -> None:
    """A remote corpus read by a loader, then dropped without ``close()`` (as the README's
    examples leave it), kept its 12 slot files open after ``del`` and ``gc.collect()``: 20
    opens held 240 more descriptors (a review's repro), ~80 to EMFILE at 1,024. The slots go
    with their fetcher."""
    import gc

    from lading.lm import LanguageModelLoader, TokenCorpus, Windows

    words = " ".join(f"w{i % 40}" for i in range(300))
    source = write(tmp_path / "docs.txt", "\n\n".join(f"{words} {i}" for i in range(30)) + "\n")
    vocabulary = [f"w{i}" for i in range(40)] + [str(i) for i in range(30)]
    tokenizer = word_tokenizer(vocabulary, tmp_path / "tok.json")
    url = f"s3://{bucket}/dropped"
    TokenCorpus.build(source, url, tokenizer, cache=tmp_path / "up")
    for k in range(3):
        node = tmp_path / f"node{k}"  # (a cold cache: the first batch GETs)
        corpus = TokenCorpus.open(url, cache=node, cache_bytes="1M")
        loader = LanguageModelLoader(corpus, 4, Windows(16), read_ahead=0)
        next(iter(loader))
        assert len(_slot_files(node)) > 0
        del loader, corpus
        gc.collect()
        assert _slot_files(tmp_path) == []


def test_a_slot_set_whose_init_raised_is_dropped_quietly(tmp_path: Path) -> None:
    """``__del__`` of a slot set whose ``__init__`` raised printed "Exception ignored ...
    AttributeError: no attribute '_fds'" (a review of the change that added it)."""
    import gc
    import sys

    import pytest

    seen: list[object] = []
    old, sys.unraisablehook = sys.unraisablehook, seen.append
    try:
        with pytest.raises(TypeError):
            NodeSlots(tmp_path / "inflight", "x")  # type: ignore[arg-type]
        gc.collect()
    finally:
        sys.unraisablehook = old
    assert seen == []
