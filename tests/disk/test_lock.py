"""The heartbeat lock: racing processes, a SIGKILLed holder, a silent holder on another host."""

from __future__ import annotations

import errno
import io
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from distributed import run_processes
from lading.bench.synth import synth
from lading.disk import build_lock, publish, read_meta, remove_dead_temps, scratch
from lading.disk.lock import FileLock, file_lock, read_holder
from lading.errors import OutOfSpaceError, StoreFormatError
from lading.stores import build_store, open_store

pytestmark = pytest.mark.e2e  # a whole user path: see the e2e marker in pyproject.toml


def _critical(rank: int, world: int, lock: str, log: str) -> None:
    # no holder here goes stale: a takeover could only come of a holder the machine's load
    # kept from beating that long (1 s was within reach of a load of 18 on 2 cores)
    for _ in range(5):
        with file_lock(lock, heartbeat=0.05, stale_after=30.0), open(log, "a") as f:
            f.write(f"in {rank}\n")
            f.flush()
            time.sleep(0.01)
            f.write(f"out {rank}\n")


@pytest.mark.slow  # racing real processes: ~10 s
def test_racing_processes_never_hold_the_lock_together(tmp_path: Path) -> None:
    log = tmp_path / "log"
    run_processes(_critical, 4, str(tmp_path / "x.lock"), str(log), gloo=False)
    lines = log.read_text().splitlines()
    assert len(lines) == 4 * 5 * 2
    for enter, leave in zip(lines[::2], lines[1::2], strict=True):
        assert enter.startswith("in ") and leave == "out " + enter[3:], lines
    assert not (tmp_path / "x.lock").exists()


def _build_once(rank: int, world: int, dest: str) -> bool:
    target = Path(dest)
    with build_lock(target):
        remove_dead_temps(target)
        if (target / "meta.json").is_file():
            return False
        with scratch(target) as tmp:
            (tmp / "data").write_bytes(os.urandom(1 << 16))
            time.sleep(0.2)  # long enough that the others arrive while this one builds
            (tmp / "meta.json").write_text(json.dumps({"by": rank}))
            publish(tmp, target)
    return True


@pytest.mark.slow  # racing real processes: ~10 s
def test_racing_builders_build_once_and_all_see_the_result(tmp_path: Path) -> None:
    built = run_processes(_build_once, 4, str(tmp_path / "d"), gloo=False)
    assert sum(built) == 1
    assert json.loads((tmp_path / "d" / "meta.json").read_text())["by"] == built.index(True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]


HOLD_AND_HANG = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from lading.disk import build_lock, scratch
    dest = Path(sys.argv[1])
    with build_lock(dest):
        with scratch(dest) as tmp:
            (tmp / "docs.bin").write_bytes(b"half a build")
            print("building", flush=True)
            time.sleep(600)
    """
)


def test_a_sigkilled_builder_is_taken_over_and_its_half_build_never_opens(tmp_path: Path) -> None:
    files = synth("passages", 200, tmp_path / "c")
    dest = tmp_path / "store"
    child = subprocess.Popen(
        [sys.executable, "-c", HOLD_AND_HANG, str(dest)], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "building"
    holder = read_holder(tmp_path / "store.lock")
    assert holder is not None and holder.pid == child.pid
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    with pytest.raises(StoreFormatError):
        open_store(dest)  # nothing was published
    started = time.monotonic()
    store = build_store(files.corpus, dest)  # same host, dead pid: taken over at once
    assert time.monotonic() - started < 30
    assert len(store) == 200 and read_meta(dest, "lading.packed")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c", "store"]  # half build removed


def test_a_silent_holder_on_another_host_is_taken_over_after_the_timeout(tmp_path: Path) -> None:
    path = tmp_path / "x.lock"
    record = {"host": "node-elsewhere", "pid": 4242, "started": time.time() - 100, "beat": 3}
    path.write_text(json.dumps({**record, "token": "feedface"}))
    report = io.StringIO()
    lock = FileLock(path, heartbeat=0.1, stale_after=1.0, report=report, report_every=0.3)
    started = time.monotonic()
    with lock:
        waited = time.monotonic() - started
        holder = read_holder(path)
        assert holder is not None and holder.token == lock.token and holder.pid == os.getpid()
    assert 1.0 <= waited < 10
    said = report.getvalue()
    assert "host node-elsewhere, pid 4242, held for 10" in said  # host, pid and age named
    assert "took over the stale lock" in said
    assert not path.exists()


def test_an_empty_lock_file_is_taken_over_after_the_timeout(tmp_path: Path) -> None:
    """What a machine crash can leave of a lock file, written without an fsync: its name, no
    holder in it. A waiter takes it over once unchanged for ``stale_after``, as a silent
    holder's, so the unsynced write costs at most that wait, once, after a crash."""
    path = tmp_path / "x.lock"
    path.write_bytes(b"")
    lock = FileLock(path, heartbeat=0.1, stale_after=1.0, report=io.StringIO(), report_every=0.3)
    started = time.monotonic()
    with lock:
        waited = time.monotonic() - started
        holder = read_holder(path)
        assert holder is not None and holder.token == lock.token and holder.pid == os.getpid()
    assert 1.0 <= waited < 10
    assert not path.exists()


@pytest.mark.parametrize("name", ["plain", "data[1]", "a*b?"])
def test_dead_temps_are_found_whatever_the_destination_is_named(tmp_path: Path, name: str) -> None:
    """A dead builder's temporaries beside and inside the destination are removed, a live
    one's kept, and nothing else touched, also where the name holds what a glob would read as
    a pattern (``[1]`` once matched ``data1.tmp-*``, never the builder's own ``data[1].tmp-*``)."""
    dest = tmp_path / name
    (dest / ".tmp-999999999-aa").mkdir(parents=True)  # no such pid: dead
    beside = [tmp_path / f"{name}.tmp-999999999-bb", tmp_path / f"{name}.old-999999999-cc"]
    for path in beside:
        path.mkdir()
    live = tmp_path / f"{name}.tmp-{os.getppid()}-dd"  # a live builder's (not this process)
    live.mkdir()
    others = [tmp_path / f"{name}x.tmp-999999999-ee", dest / "kept.tmp-999999999-ff"]
    for path in others:
        path.mkdir()
    removed = remove_dead_temps(dest)
    assert sorted(removed) == sorted([dest / ".tmp-999999999-aa", *beside])
    assert all(not p.exists() for p in removed)
    assert live.is_dir() and all(p.is_dir() for p in others)
    assert remove_dead_temps(tmp_path / "absent") == []


HOLD_BEATING = textwrap.dedent(
    """
    import sys
    from lading.disk.lock import file_lock
    with file_lock(sys.argv[1], heartbeat=0.1, stale_after=float(sys.argv[2])):
        print("holding", flush=True)
        sys.stdin.readline()  # held until the waiter is done waiting
    """
)


@pytest.mark.slow  # ~4-6 s: the default run keeps under its 10 minutes
def test_a_live_holder_keeps_its_lock_past_the_stale_timeout(tmp_path: Path) -> None:
    """The holder beats every 0.1 s, 30 times a stale timeout (no load starves it that long),
    and holds until the waiter has waited past that timeout: the waiter gives up, the holder
    kept its lock (before: a 1.0 s hold against a 0.8 s wait, which a loaded machine could
    start late enough to see the lock released)."""
    path = tmp_path / "x.lock"
    stale = 3.0
    child = subprocess.Popen(
        [sys.executable, "-c", HOLD_BEATING, str(path), str(stale)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert child.stdout is not None and child.stdout.readline().strip() == "holding"
    with pytest.raises(TimeoutError, match=f"pid {child.pid}"):
        FileLock(path, heartbeat=0.1, stale_after=stale, timeout=stale + 1.0).acquire()
    assert child.stdin is not None and child.poll() is None  # still holding
    child.stdin.write("done\n")
    child.stdin.close()
    assert child.wait(timeout=30) == 0
    with FileLock(path, heartbeat=0.1, stale_after=stale, timeout=30):
        pass


def test_stale_timeout_must_exceed_two_heartbeats(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="must exceed two heartbeats"):
        FileLock(tmp_path / "x.lock", heartbeat=1.0, stale_after=1.5)


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_a_full_disk_while_taking_the_lock_is_refused_clearly_and_leaves_no_lock_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    """The ``O_EXCL`` create can succeed on a full disk (an inode was free) and the write of
    the holder's name fail. The empty file left would make the next build wait ``stale_after``
    (60 s) for 'a holder still writing its name'; the error was a bare ``OSError``."""
    dest = tmp_path / "store"

    def full(fd: int, data: bytes) -> int:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr("lading.disk.lock.os.write", full)
    with pytest.raises(OutOfSpaceError) as caught, build_lock(dest):
        pytest.fail("the lock was taken on a full disk")
    assert caught.value.errno == code
    said = str(caught.value)
    assert str(dest) in said and "Free space on that filesystem" in said, said
    assert "not created" in said, said
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    monkeypatch.undo()
    with FileLock(tmp_path / "store.lock", timeout=5):  # taken at once: nothing stale left
        pass


def test_a_release_never_leaves_the_file_behind_a_beat(tmp_path: Path) -> None:
    """Release waits for the heartbeat only where it is writing a beat (not joining an idle
    thread saves a wake-up a build); a beat under way when the lock is released must not put
    the file back after its removal. Beats every millisecond, released at random moments."""
    seed = int(os.environ.get("LADING_TEST_SEED", "7"))
    print(f"LADING_TEST_SEED={seed}")
    rng = random.Random(seed)
    path = tmp_path / "x.lock"
    lock = FileLock(path, heartbeat=0.001, stale_after=1.0)
    for _ in range(200):
        lock.acquire()
        time.sleep(rng.random() * 0.004)
        lock.release()
        assert not path.exists()
    time.sleep(0.02)  # any beat still under way has ended by now
    assert not path.exists() and not lock.lost
    assert not list(tmp_path.glob("x.lock.beat-*"))


def test_a_release_returns_while_a_beat_hangs_and_the_beat_cleans_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A beat stuck in its write (a hung mount) no longer holds a release for ever (it
    joined without a timeout: seen on the old code, which waited the whole hang): release
    returns after its wait, and the beat, once its write returns, removes the file it put
    back."""
    path = tmp_path / "x.lock"
    writing, go_on = threading.Event(), threading.Event()
    real = Path.write_bytes

    def hung(self: Path, data: bytes) -> int:
        if ".beat-" in self.name:
            writing.set()
            go_on.wait(10)
        return real(self, data)

    monkeypatch.setattr(Path, "write_bytes", hung)
    lock = FileLock(path, heartbeat=0.01, stale_after=1.0)
    monkeypatch.setattr(lock, "_join_s", lambda: 0.2, raising=False)
    lock.acquire()
    assert writing.wait(5)
    started = time.monotonic()
    lock.release()
    assert time.monotonic() - started < 2
    go_on.set()
    deadline = time.monotonic() + 5
    while path.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not path.exists() and not lock.lost
