"""``read_ahead=``: with ``num_workers=0`` the next batches are built on a thread while the
caller holds one; the batches, their order, the position and errors are the same as without."""

from __future__ import annotations

import gc
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch

import lading
from lading.errors import PassEndedError
from lading.loading.loader import Workers
from lading.loading.read_ahead import BuiltAhead

THREAD = "lading-ahead"


class Counted:
    """Items ``0 … n-1``, counting the reads and the threads they ran on; item ``bad`` raises."""

    def __init__(self, n: int, bad: int = -1) -> None:
        self.n, self.bad = n, bad
        self.reads = 0
        self.threads: set[str] = set()

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        self.threads.add(threading.current_thread().name)
        self.reads += 1
        if i == self.bad:
            raise ValueError(f"item {i} is unreadable")
        return i


def ahead_threads() -> list[threading.Thread]:
    """Read-ahead threads alive now (those of loaders dropped before are collected first)."""
    gc.collect()
    return [t for t in threading.enumerate() if t.name == THREAD]


def settle(count: Any, value: int, seconds: float = 10.0) -> int:
    """``count()`` once it reached ``value`` (or the deadline passed), then 0.2 s later."""
    deadline = time.monotonic() + seconds
    while count() < value and time.monotonic() < deadline:
        time.sleep(0.005)
    time.sleep(0.2)
    return int(count())


def plain(loader: Any) -> list[list[int]]:
    return [batch.tolist() for batch in loader]


def test_the_next_batches_are_built_while_the_caller_holds_one() -> None:
    data = Counted(40)
    loader = lading.loader(data, 1, shuffle=False, read_ahead=2)
    batches = iter(loader)
    assert next(batches).tolist() == [0]
    # the caller holds batch 0: batches 1 and 2 wait in the queue, batch 3 waits to go in
    assert settle(lambda: data.reads, 4) == 4
    assert THREAD in data.threads and threading.current_thread().name not in data.threads
    batches.close()

    inline = Counted(40)
    batches = iter(lading.loader(inline, 1, shuffle=False))  # read_ahead=0: built when asked
    next(batches)
    assert settle(lambda: inline.reads, 2, seconds=0.0) == 1
    assert inline.threads == {threading.current_thread().name}


@pytest.mark.parametrize("depth", [1, 3])
def test_the_same_batches_in_the_same_order_over_epochs(depth: int) -> None:
    def make(read_ahead: int) -> Any:
        return lading.loader(Counted(53), 4, seed=11, read_ahead=read_ahead)

    inline, ahead = make(0), make(depth)
    assert [plain(inline) for _ in range(3)] == [plain(ahead) for _ in range(3)]
    assert len(ahead_threads()) == 1  # building epoch 3's first batches for the next pass
    del ahead
    assert not ahead_threads()  # a dropped loader's thread stops


def test_a_state_saved_with_batches_built_ahead_resumes_at_the_next_batch_received() -> None:
    want = plain(lading.loader(Counted(50), 3, seed=5))
    loader = lading.loader(Counted(50), 3, seed=5, read_ahead=3)
    batches = iter(loader)
    got = [next(batches).tolist() for _ in range(4)]
    time.sleep(0.1)  # the thread has built batches 4-7 meanwhile: none of them is consumed
    state = loader.state_dict()
    batches.close()
    resumed = lading.loader(Counted(50), 3, seed=5)
    resumed.load_state_dict(state)
    assert got + plain(resumed) == want


def test_breaking_off_a_pass_stops_its_thread_and_the_next_pass_is_the_next_epoch() -> None:
    inline = lading.loader(Counted(30), 2, seed=1)
    want = [plain(inline) for _ in range(2)]
    loader = lading.loader(Counted(30), 2, seed=1, read_ahead=2)
    for i, _ in enumerate(loader):
        if i == 2:
            break
    assert not ahead_threads()  # the break closed the pass: its thread was joined
    assert plain(loader) == want[1]
    assert len(ahead_threads()) == 1  # read to its end: the next epoch is being built


@pytest.mark.parametrize("end", ["dropped", "asked", "collected"])
def test_an_earlier_pass_ending_late_leaves_the_later_pass_whole(end: str) -> None:
    """A pass left open (its iterator kept, or in a reference cycle of an exception's
    traceback) that ends while a later pass reads (dropped, asked for a batch: it is over,
    or freed by the collector) stops its own reading, not the later pass's: the later
    pass read 3 of its 25 batches, silently (it ended the thread the later pass read from)."""
    reference = lading.loader(list(range(200)), 8, collate_fn=list)
    reference.set_epoch(1)
    want = list(reference)
    loader = lading.loader(list(range(200)), 8, collate_fn=list, read_ahead=2)
    old: Any = iter(loader)
    next(old)
    if end == "collected":  # the old pass held only by a cycle, freed when the collector runs
        gc.disable()
        holder: list[Any] = [old]
        holder.append(holder)
        del old, holder
    got = []
    try:
        for i, batch in enumerate(loader):
            got.append(batch)
            if i == 2 and end == "dropped":
                del old
            elif i == 2 and end == "asked":
                with pytest.raises(PassEndedError, match="newer iter"):
                    next(old)  # another pass ended it: said
            elif i == 2:
                gc.collect()
    finally:
        gc.enable()
    assert got == want and loader.remaining() == 0


def test_set_epoch_mid_pass_ends_the_pass_and_its_thread() -> None:
    loader = lading.loader(Counted(30), 2, seed=1, read_ahead=2)
    batches = iter(loader)
    next(batches)
    loader.set_epoch(4)
    with pytest.raises(PassEndedError, match=r"set_epoch\(4\)"):
        next(batches)  # the pass belonged to the old position
    assert not ahead_threads()
    assert plain(loader) == plain(_epoch(4))
    del loader, batches
    assert not ahead_threads()


def _epoch(epoch: int) -> Any:
    inline = lading.loader(Counted(30), 2, seed=1)
    inline.set_epoch(epoch)
    return inline


def test_an_error_reaches_the_caller_at_its_batch_after_the_batches_before_it() -> None:
    loader = lading.loader(Counted(20, bad=9), 2, shuffle=False, read_ahead=2)
    got = []
    with pytest.raises(ValueError, match="item 9 is unreadable") as raised:
        for batch in loader:
            got.append(batch.tolist())
    assert got == [[0, 1], [2, 3], [4, 5], [6, 7]]
    frames = [f.name for f in raised.traceback]
    assert "__getitem__" in frames  # the builder's own traceback, not only the hand-over's
    assert not ahead_threads()


def test_built_ahead_alone_hands_out_in_order_and_stops_when_closed() -> None:
    made: list[int] = []

    def numbers() -> Any:
        for i in range(1000):
            made.append(i)
            yield torch.tensor([i])

    ahead = BuiltAhead(numbers(), 2)
    assert [int(next(ahead)) for _ in range(5)] == [0, 1, 2, 3, 4]
    ahead.close()
    assert not ahead_threads() and len(made) <= 5 + 2 + 1
    with pytest.raises(StopIteration):
        next(ahead)


@pytest.mark.parametrize("bad", [-1, True, 1.5, "2"])
def test_read_ahead_must_be_a_count(bad: Any) -> None:
    with pytest.raises(ValueError, match="read_ahead="):
        Workers(read_ahead=bad)
    with pytest.raises(ValueError, match="read_ahead="):
        lading.loader(Counted(4), 2, read_ahead=bad)


def test_lading_loader_builds_in_the_callers_thread_unless_asked() -> None:
    data = Counted(12)
    loader = lading.loader(data, 3)
    assert loader.workers.read_ahead == 0
    list(loader)
    assert data.threads == {threading.current_thread().name}


def test_the_next_epochs_first_batches_are_built_before_its_pass_starts() -> None:
    data = Counted(6)
    loader = lading.loader(data, 1, seed=2, read_ahead=2)
    first = plain(loader)
    # between passes: the next epoch's first two batches wait, the third waits to go in
    assert settle(lambda: data.reads, 6 + 3) == 6 + 3
    inline = lading.loader(Counted(6), 1, seed=2)
    assert [first, plain(loader), plain(loader)] == [plain(inline) for _ in range(3)]


def test_set_epoch_each_epoch_keeps_one_thread_and_the_batches() -> None:
    """The DDP loop (``set_epoch(epoch)`` before each pass) starts each pass where the thread
    went on building: one thread for the run, the batches of each epoch."""
    inline = lading.loader(Counted(25), 4, seed=9)
    want = []
    for epoch in range(3):
        inline.set_epoch(epoch)
        want.append(plain(inline))
    loader = lading.loader(Counted(25), 4, seed=9, read_ahead=2)
    got, threads = [], set()
    for epoch in range(3):
        loader.set_epoch(epoch)
        got.append(plain(loader))
        threads |= set(ahead_threads())
    assert got == want and len(threads) == 1


def test_another_start_drops_what_was_built_for_the_next_epoch() -> None:
    """``set_epoch`` elsewhere, or a loaded state, after a whole pass: the batches built ahead
    for the next epoch are dropped, and the pass reads the position set."""
    loader = lading.loader(Counted(25), 4, seed=9, read_ahead=2)
    plain(loader)
    loader.set_epoch(5)
    assert plain(loader) == plain(_epoch_of(25, 4, 9, 5))

    saver = lading.loader(Counted(25), 4, seed=9)
    batches = iter(saver)
    next(batches), next(batches)
    state = saver.state_dict()
    plain(loader)  # a whole pass (epoch 6): the thread is building epoch 7
    loader.load_state_dict(state)
    resumed = lading.loader(Counted(25), 4, seed=9)
    resumed.load_state_dict(state)
    assert plain(loader) == plain(resumed)


def _epoch_of(n: int, batch: int, seed: int, epoch: int) -> Any:
    inline = lading.loader(Counted(n), batch, seed=seed)
    inline.set_epoch(epoch)
    return inline


def test_a_corpus_on_a_device_refuses_read_ahead(tmp_path: Any) -> None:
    """Batches of a corpus held on a device are built there (in the process's stream order),
    in microseconds: no thread, and asking for one is refused naming the fix."""
    pytest.importorskip("tokenizers")
    from conftest import word_corpus
    from lading.lm import LanguageModelLoader, Streams

    corpus = word_corpus(tmp_path, docs=20, lengths=(3, 9), words=50, seed=0)
    on_device = LanguageModelLoader(corpus, 2, Streams(4), device="cpu")
    assert on_device.workers.read_ahead == 0
    with pytest.raises(ValueError, match="read_ahead=2 with the corpus on cpu") as refused:
        LanguageModelLoader(corpus, 2, Streams(4), device="cpu", read_ahead=2)
    assert "drop read_ahead" in str(refused.value)


def test_read_ahead_asked_of_any_loader_is_kept(tmp_path: Any) -> None:
    """Asked for by name, read_ahead is what every loader uses, local data too."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from lading.tabular import PartitionedParquet

    path = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"row": list(range(40))}), path, row_group_size=10)
    inline = PartitionedParquet(path, 4, seed=1)
    ahead = PartitionedParquet(path, 4, seed=1, read_ahead=3)
    assert (inline.workers.read_ahead, ahead.workers.read_ahead) == (0, 3)
    assert [b["row"].tolist() for b in ahead] == [b["row"].tolist() for b in inline]
    assert lading.loader(Counted(4), 2, read_ahead=1).workers.read_ahead == 1


@pytest.mark.parametrize("depth", [2, 4])
def test_a_waiting_caller_is_woken_for_depth_batches_not_for_each(
    depth: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A caller faster than the builds (no step to hide them behind) waits for a batch at
    nearly every ``next``; each wake cost ~65-100 us of CPU a batch (threads and the
    interpreter lock changing hands), doubling the CPU a token of a loader of windows (0.0078
    -> 0.0145 s a million tokens, read_ahead 0 -> 2). It is now woken once ``depth`` batches
    are ready: the caller waits about once every ``depth`` batches (before, once a batch),
    and still gets every batch in order."""
    waits = 0
    wait = threading.Condition.wait
    caller = threading.current_thread()

    def counted(self: Any, timeout: float | None = None) -> bool:
        nonlocal waits
        waits += threading.current_thread() is caller
        return bool(wait(self, timeout))

    def built(n: int) -> Any:
        for i in range(n):
            time.sleep(2e-4)  # a build of ~0.2-0.3 ms that lets the GIL go (numpy copies)
            yield i

    monkeypatch.setattr(threading.Condition, "wait", counted)
    n = 200
    ahead = BuiltAhead(built(n), depth)
    assert list(ahead) == list(range(n))
    ahead.close()
    print(f"the caller waited {waits} times for {n} batches (read_ahead={depth})")
    assert waits <= 0.75 * n, waits  # ~n / depth; a build slower than 2 ms wakes at once


@pytest.mark.parametrize(("depth", "workers"), [(0, 0), (2, 0), (0, 2)])
def test_a_pass_held_across_close_raises_naming_where_it_ended(depth: int, workers: int) -> None:
    """``close`` while the caller holds a pass, which it then reads on: the next batch raises
    LoaderClosedError naming where the pass ended, in every mode (was: without read-ahead it
    read on, fetching after close; with workers it stopped silently, a short epoch a training
    loop takes for whole), and the position is kept: a state saved then reads the rest."""
    from lading import LoaderClosedError

    def make() -> Any:
        data = list(range(64))
        return lading.loader(
            data, batch_size=4, seed=1, read_ahead=depth, num_workers=workers, collate_fn=list
        )

    loader, twin = make(), make()
    want = list(twin)
    it = iter(loader)
    got = [next(it) for _ in range(3)]
    loader.close()
    with pytest.raises(LoaderClosedError, match=r"ended after batch 3 of epoch 0 \(of 16\)"):
        next(it)
    loader.load_state_dict(loader.state_dict())
    got += list(loader)
    assert got == want
    loader.close()


@pytest.mark.parametrize(("depth", "workers"), [(0, 0), (2, 0), (0, 2)])
def test_a_close_at_the_epochs_last_batch_ends_the_pass_whole(depth: int, workers: int) -> None:
    """Closing the loader while holding the epoch's last batch (a loop's last step) is a
    normal end, not LoaderClosedError: nothing was left to read."""
    data = list(range(8))
    loader = lading.loader(
        data, batch_size=4, read_ahead=depth, num_workers=workers, collate_fn=list, seed=2
    )
    got = []
    for batch in loader:
        got.append(batch)
        if len(got) == len(loader):
            loader.close()
    assert sorted(x for b in got for x in b) == data


@pytest.mark.parametrize(("depth", "workers"), [(0, 0), (1, 0), (0, 2)])
def test_a_close_from_another_thread_while_the_caller_waits_raises_loader_closed(
    depth: int, workers: int
) -> None:
    """close() from another thread while the caller waits for a batch: LoaderClosedError in
    every mode (was, with read-ahead: "the read-ahead thread ended without its batches";
    with workers: torch's EOFError or FileNotFoundError)."""
    import threading

    from lading import LoaderClosedError

    def slow(items: list[int]) -> list[int]:
        time.sleep(0.05 * len(items))  # a batch of 4: 0.2 s to build
        return items

    loader = lading.loader(
        list(range(40)), batch_size=4, read_ahead=depth, num_workers=workers, collate_fn=slow
    )
    closer = threading.Timer(0.5, loader.close)
    closer.start()
    got = 0
    with pytest.raises(LoaderClosedError, match=r"ended after batch \d+ of epoch 0 \(of 10\)"):
        for _ in loader:
            got += 1
    closer.join(10)
    assert got < 10


@pytest.mark.parametrize("workers", [0, 2])
def test_a_pass_left_open_at_exit_prints_nothing(tmp_path: Path, workers: int) -> None:
    """A peeked pass kept in a module global is closed while Python shuts down (its globals
    already None): no "Exception ignored" traceback on the user's terminal (with DataLoader
    workers a review saw "'NoneType' object has no attribute 'getpid'": the pass's
    ``finally`` asked ``os`` after its teardown)."""
    import subprocess
    import sys

    script = tmp_path / "peek.py"
    script.write_text(
        "import lading\n"
        f"loader = lading.loader(list(range(10)), 2, collate_fn=list, num_workers={workers})\n"
        "it = iter(loader)\n"
        "print(next(it))\n"
    )
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=True
    )
    assert len(json.loads(done.stdout)) == 2  # the batch was read
    assert done.stderr == ""
