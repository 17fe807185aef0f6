"""DataLoader workers that are not persistent (``persistent_workers=False``): torch keeps no
iterator for them on the DataLoader, only the pass holds it. A fork's child must still leave
them alone (its ``sys.exit`` ended them: multiprocessing's exit hook terminates every process
it lists as a child, the parent's included), and ``close()`` must still end them."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import time

import psutil
import pytest

import lading

_FORK_THEN_EXIT = """
import gc, json, multiprocessing, os, sys, time
import lading
child = sys.argv[1]

def sleep():
    time.sleep(60)

def make(**kw):
    return lading.loader(list(range(400)), 4, collate_fn=list, seed=1, **kw)

twin = [b[0] for b in make()]
mine = multiprocessing.get_context("fork").Process(target=sleep, daemon=True)  # not lading's
mine.start()
loader = make(num_workers=2, persistent_workers=False, multiprocessing_context="fork")
it = iter(loader)
head = [next(it) for _ in range(3)]
pid = os.fork()
if pid == 0:
    if child == "reads":  # the rest of the held pass, with workers of its own
        assert [b[0] for b in head + list(it)] == twin
    elif child == "drops":  # the parent's DataLoader iterator is freed here
        del it
        gc.collect()
    sys.exit(0)  # multiprocessing's exit hook runs here
_, status = os.waitpid(pid, 0)
rest = list(it)
print(json.dumps({
    "child": os.waitstatus_to_exitcode(status),
    "same": [b[0] for b in head + rest] == twin,
    "batches": len(head) + len(rest),
    "mine_alive": mine.is_alive(),
}), flush=True)
mine.kill()
loader.close()
"""


@pytest.mark.slow  # a subprocess with DataLoader workers and a fork: ~4 s each
@pytest.mark.parametrize("child", ["exits", "reads", "drops"])
def test_a_child_that_exits_by_sys_exit_leaves_the_parents_workers_and_processes_alone(
    child: str,
) -> None:
    """The parent's pass, over non-persistent workers, reads to its end and equals a twin's;
    the child exits cleanly (was: ``AssertionError: can only join a child process`` in the
    child, and the parent's pass died: ``DataLoader worker (pid N) is killed by signal:
    Terminated``), at once, after reading the rest of the held pass (with workers of its own)
    or after dropping it (was: the parent's iterator, freed in the child, shut the parent's
    workers down, and the parent's pass hung). A process of the parent's own that lading
    never made survives too."""
    result = subprocess.run(
        [sys.executable, "-c", _FORK_THEN_EXIT, child],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "can only join a child process" not in result.stderr, result.stderr[-3000:]
    got = json.loads(result.stdout.strip().splitlines()[-1])
    assert got == {"child": 0, "same": True, "batches": 100, "mine_alive": True}, (
        got,
        result.stderr[-2000:],
    )


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_close_mid_pass_ends_non_persistent_workers() -> None:
    """``close()`` with a pass held over non-persistent workers ends that pass's workers,
    within its bounded waits (was: they ran on, the pass's iterator unknown to close), and the
    held pass then refuses its next batch."""
    before = {p.pid for p in multiprocessing.active_children()}
    loader = lading.loader(
        list(range(4000)), 4, collate_fn=list, seed=1, num_workers=2,
        persistent_workers=False, multiprocessing_context="fork",
    )  # fmt: skip
    it = iter(loader)
    next(it)
    workers = {p.pid for p in multiprocessing.active_children()} - before
    assert len(workers) == 2 and all(map(_running, workers))
    start = time.monotonic()
    loader.close()
    assert time.monotonic() - start < 30
    alive = [pid for pid in workers if _running(pid)]
    assert not alive, f"workers alive after close: {alive}"
    with pytest.raises(lading.LoaderClosedError):
        next(it)
