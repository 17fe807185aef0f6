"""A builder rank that dies silently (SIGKILL, the OOM killer, a segfault) mid-build.

Nothing is posted by a killed rank, so the ranks waiting for it used to wait out
``LADING_BUILD_TIMEOUT_S`` (a day) where no launcher kills the group (Slurm's srun, mpirun, a
user's own spawn). Each builder now posts a heartbeat while it builds, and a waiting rank that
sees it stand still for ``LADING_BUILD_HEARTBEAT_S`` names the dead rank. The tests set that
bound to ~2 s and the build timeout to 600 s: an error within seconds is the heartbeat's.
Real spawned processes in a gloo group on CPU; the dying rank kills itself with SIGKILL.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import queue
import signal
import socket
import time
import traceback
from pathlib import Path
from typing import Any

import pytest

from distributed import end_processes, free_port, join_group
from lading.bench.synth import synth

slow = pytest.mark.slow  # spawned ranks in a gloo group, one of them killed

HEARTBEAT_S = 2.0  # LADING_BUILD_HEARTBEAT_S in the ranks: silence this long is death
KILL_AFTER_S = 1.0  # the dying rank builds this long first (its heartbeat is seen alive)
SLOW_BUILD_S = 5.0  # a slow but live build: 2.5 heartbeat bounds, 15 beats long
RESULT_S = 30.0  # the longest a rank's result may take to come back (a hang fails the test)
ENV = {
    "LADING_BUILD_HEARTBEAT_S": str(HEARTBEAT_S),
    "LADING_BUILD_TIMEOUT_S": "600",  # far longer: a quick error is the heartbeat's, not this
}


def _rank(
    rank: int,
    world: int,
    port: int,
    per_node: int,
    env: dict[str, str],
    out: Any,
    fn: str,
    *args: Any,
) -> None:
    """One rank of a gloo group of ``world`` (``per_node`` to a simulated node), whose result,
    ``fn(rank, *args)`` (a name in this module), goes on the queue ``out``."""
    try:
        join_group(rank, world, port, per_node, env, RESULT_S)
        out.put((rank, "ok", globals()[fn](rank, *args)))
    except BaseException:
        out.put((rank, "error", traceback.format_exc()))


def _run(
    world: int, fn: str, *args: Any, survivors: list[int], per_node: int = 0, **env: str
) -> tuple[dict[int, Any], list[int]]:
    """``fn`` on ``world`` spawned ranks; the results of ``survivors`` (the others die) and
    every rank's pid. A result not back within ``RESULT_S`` fails the test, the ranks killed."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = free_port()
    procs = [
        ctx.Process(
            target=_rank, args=(r, world, port, per_node or world, {**ENV, **env}, out, fn, *args)
        )
        for r in range(world)
    ]
    for p in procs:
        p.start()
    results: dict[int, Any] = {}
    try:
        while len(results) < len(survivors):
            try:
                rank, status, value = out.get(timeout=RESULT_S)
            except queue.Empty:
                missing = sorted(set(survivors) - set(results))
                raise AssertionError(
                    f"ranks {missing} gave no result within {RESULT_S:.0f}s (a hang)"
                ) from None
            assert status == "ok", f"rank {rank} failed:\n{value}"
            results[rank] = value
    finally:
        end_processes(procs)
    return results, [int(p.pid or 0) for p in procs]


def _die_in_write_shard(after: float) -> None:
    """Make this process kill itself (SIGKILL: nothing runs, nothing is posted) ``after``
    seconds into writing its shard of a build, whichever route the build takes."""
    import lading.stores.building.build as build
    import lading.stores.building.parallel as parallel

    def dying(*args: Any, **kwargs: Any) -> Any:
        time.sleep(after)
        os.kill(os.getpid(), signal.SIGKILL)

    build.write_shard = parallel.write_shard = dying


def _slow_write_shard(delay: float) -> None:
    """Make this process's shard writes take ``delay`` seconds more, busy (the interpreter
    holds the GIL as a tokenizing build does) for most of it."""
    import lading.stores.building.build as build
    import lading.stores.building.parallel as parallel

    original = parallel.write_shard

    def slow(*args: Any, **kwargs: Any) -> Any:
        end = time.monotonic() + delay
        while time.monotonic() < end:
            sum(i * i for i in range(20_000))  # pure Python: the GIL changes hands by force
            time.sleep(0.01)
        return original(*args, **kwargs)

    build.write_shard = parallel.write_shard = slow


def _build(rank: int, src: str, dest: str, shard: str | None, dies: int, slow: int) -> Any:
    """``build_store`` on this rank (which dies mid-build when it is ``dies``, builds slowly
    when it is ``slow``); the store's snapshot and length, or the error and the seconds the
    rank took to meet it."""
    import lading

    if rank == dies:
        _die_in_write_shard(KILL_AFTER_S)
    if rank == slow:
        _slow_write_shard(SLOW_BUILD_S)
    started = time.monotonic()
    try:
        store = lading.build_store(src, dest.format(rank=rank), shard=shard, progress=False)
    except Exception as e:
        return f"{type(e).__name__}: {e}", time.monotonic() - started
    return store.snapshot, len(store)


def _assert_named(result: Any, rank: int, pid: int, doing: str) -> None:
    """``result`` is the error naming the dead ``rank`` (its host, pid, what it was doing, how
    long it has been silent, the fix), met within seconds, not after the build timeout."""
    assert isinstance(result, tuple) and isinstance(result[0], str), result
    message, waited = result
    assert message.startswith("BuilderGoneError: "), message
    assert f"rank {rank} " in message and f"pid {pid}" in message, message
    assert socket.gethostname() in message and doing in message, message
    assert "last heard from" in message and "LADING_BUILD_HEARTBEAT_S" in message, message
    assert "log" in message and "rerun" in message, message
    assert waited < KILL_AFTER_S + HEARTBEAT_S + 15, result  # the heartbeat's, not the 600 s


@slow
def test_a_node_builder_killed_mid_build_is_named_by_the_waiting_rank(tmp_path: Path) -> None:
    """No shard=: two simulated nodes of one rank, each building its node's copy; rank 1 is
    killed mid-build and rank 0, which built its own, names it instead of waiting a day."""
    files = synth("passages", 60, tmp_path / "c")
    dest = str(tmp_path / "node{rank}" / "store")
    results, pids = _run(
        2, "_build", str(files.corpus), dest, None, 1, -1,
        survivors=[0], per_node=1, LADING_SHARED_FS="0",
    )  # fmt: skip
    _assert_named(results[0], 1, pids[1], "building its node's copy of")


@slow
def test_a_shard_writer_killed_mid_shard_is_named_by_rank_0(tmp_path: Path) -> None:
    """shard='auto': rank 1 is killed writing shard 1/2; rank 0, waiting to merge, names it."""
    files = synth("passages", 60, tmp_path / "c")
    results, pids = _run(
        2, "_build", str(files.corpus), str(tmp_path / "store"), "auto", 1, -1,
        survivors=[0], LADING_SHARED_FS="1",
    )  # fmt: skip
    _assert_named(results[0], 1, pids[1], "writing shard 1/2 of")


@slow
def test_a_slow_live_shard_writer_is_not_taken_for_dead(tmp_path: Path) -> None:
    """shard='auto' over 3 ranks, rank 2 writing its shard for several heartbeat bounds: rank 0
    waits for it (its heartbeat goes on) and rank 1 waits for rank 0's merge (rank 0's
    heartbeat goes on while it waits for rank 2): every rank ends on one snapshot."""
    files = synth("passages", 60, tmp_path / "c")
    results, _ = _run(
        3, "_build", str(files.corpus), str(tmp_path / "store"), "auto", -1, 2,
        survivors=[0, 1, 2], LADING_SHARED_FS="1",
    )  # fmt: skip
    assert all(isinstance(r[0], str) and r[1] == 60 for r in results.values()), results
    assert len(set(results.values())) == 1, results


def test_the_heartbeat_setting_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    from lading.stores.building.group import DEFAULT_HEARTBEAT_S, heartbeat_bound

    monkeypatch.delenv("LADING_BUILD_HEARTBEAT_S", raising=False)
    assert heartbeat_bound() == DEFAULT_HEARTBEAT_S
    monkeypatch.setenv("LADING_BUILD_HEARTBEAT_S", "1.5")
    assert heartbeat_bound() == 1.5
    for bad in ("soon", "0", "-5", "nan"):
        monkeypatch.setenv("LADING_BUILD_HEARTBEAT_S", bad)
        with pytest.raises(ValueError, match="LADING_BUILD_HEARTBEAT_S"):
            heartbeat_bound()


def _fork_inside_heartbeat(rank: int) -> dict[str, Any]:
    """In a group of one: enter a heartbeat, fork; the child beats, says what it does, and
    leaves the block (which joins nothing of its own), then reports through a pipe. The
    counter before the fork, after the child has done all that, and after the parent's own
    beat and the block's end."""
    import torch.distributed as dist

    from lading.stores.building.group import _Exchange, _Heartbeat

    talk = _Exchange(dist, "fork-test", rank, "dest", "rerun")
    counter = talk.alive(rank)
    with _Heartbeat(talk, "writing shard 1/1 of dest") as heart:
        before = int(talk.store.add(counter, 0))
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: no thread of the parent's, speaks for nobody
            try:
                started = time.monotonic()
                beat = heart.beat()
                heart.doing_now("something else")
                heart.__exit__(None, None, None)
                os.write(write, f"{beat} {time.monotonic() - started:.3f}".encode())
            finally:
                os._exit(0)
        os.close(write)
        said = os.read(read, 100).decode().split()
        os.waitpid(pid, 0)
        after_child = int(talk.store.add(counter, 0))
        doing = json.loads(talk.store.get(talk.prefix + f"doing/{rank}"))["doing"]
        assert heart.beat()
    return {
        "child_beat": said[0],
        "child_s": float(said[1]),
        "before": before,
        "after_child": after_child,
        "after": int(talk.store.add(counter, 0)),
        "doing": doing,
        "thread_alive": heart.thread is not None and heart.thread.is_alive(),
    }


@slow
def test_a_child_forked_inside_a_heartbeat_posts_nothing_and_leaves_at_once(
    tmp_path: Path,
) -> None:
    """A rank that forks while its heartbeat runs (a tokenizer's process pool, a user's
    fork): the child does not beat for the rank (it could hide the rank's death), does not
    say what the rank does, and leaves the block without waiting on a thread it does not
    have; the parent's heartbeat goes on and ends with its block."""
    results, _ = _run(1, "_fork_inside_heartbeat", survivors=[0])
    got = results[0]
    assert got["child_beat"] == "False", got
    assert got["child_s"] < 1.0, got  # no join of a thread the child does not have
    assert got["doing"] == "writing shard 1/1 of dest", got  # the child's word is not posted
    assert got["after"] > got["after_child"], got  # the parent's own beat counted
    assert not got["thread_alive"], got  # the block's end stopped and joined it
