"""The build lock and its temporaries across hosts, reboots and PID namespaces.

Containers that share a mount and a hostname (``docker --network host``, Kubernetes
``hostNetwork`` pods) each have their own PID namespace: a pid named by one means nothing in
another. Every process here is real, each in a fresh PID namespace (``unshare -pf``, which
needs root: skipped elsewhere), and a builder on "another node" in its own UTS namespace too.
"""

from __future__ import annotations

import io
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from lading.disk import remove_dead_temps
from lading.disk.lock import _HOST, FileLock, read_holder

pytestmark = pytest.mark.e2e  # real processes in namespaces of their own


def _unshare_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    try:
        done = subprocess.run(
            ["unshare", "-pfu", "--mount-proc", "true"], capture_output=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


needs_namespaces = pytest.mark.skipif(
    not _unshare_works(), reason="needs `unshare -pfu --mount-proc` (root, Linux)"
)


def _in_namespace(script: str, *args: str, burn: int = 0, host: str = "") -> list[str]:
    """A command running ``python -c script args`` in a fresh PID namespace (and UTS namespace,
    named ``host`` where given), after ``burn`` short processes there: its pid in that
    namespace is then above ``burn``, so no process of a fresh namespace beside it has it."""
    rename = f"import socket; socket.sethostname({host!r})\n" if host else ""
    python = " ".join(
        [sys.executable, "-c", shlex.quote(rename + script), *(shlex.quote(a) for a in args)]
    )
    shell = f"i=0; while [ $i -lt {burn} ]; do /bin/true; i=$((i+1)); done; {python}; exit $?"
    return ["unshare", "-pfu", "--mount-proc", "sh", "-c", shell]


HOLD = textwrap.dedent(
    """
    import os, sys
    from lading.disk.lock import FileLock
    lock = FileLock(sys.argv[1], heartbeat=0.1, stale_after=float(sys.argv[2]))
    with lock:
        print("holding", os.getpid(), flush=True)
        sys.stdin.readline()  # held until the waiter is done
        print("lost" if lock.lost else "kept", flush=True)
    """
)

WAIT = textwrap.dedent(
    """
    import os, sys, time
    from lading.disk.lock import FileLock
    lock = FileLock(sys.argv[1], heartbeat=0.1, stale_after=float(sys.argv[2]),
                    timeout=float(sys.argv[3]))
    started = time.monotonic()
    try:
        lock.acquire()
    except TimeoutError:
        print("timed out", os.getpid(), flush=True)
    else:
        print(f"took it after {time.monotonic() - started:.1f}s", os.getpid(), flush=True)
        lock.release()
    """
)


@needs_namespaces
def test_a_live_holder_in_another_pid_namespace_of_this_host_is_not_taken_over(
    tmp_path: Path,
) -> None:
    """Same hostname, other PID namespace: the holder's pid, dead in the waiter's namespace,
    said nothing of the holder, which was taken over at once (and its build's temporaries
    deleted under it). Now only the heartbeat decides there: the waiter waits."""
    path = tmp_path / "x.lock"
    stale = 6.0
    holder = subprocess.Popen(
        _in_namespace(HOLD, str(path), str(stale), burn=150),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None
        said, pid = holder.stdout.readline().split()
        assert said == "holding" and int(pid) > 150
        named = read_holder(path)
        assert named is not None and named.pid == int(pid) and named.host == _HOST
        waiter = subprocess.run(
            _in_namespace(WAIT, str(path), str(stale), "2.0"),
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert waiter.returncode == 0, waiter.stderr
        assert waiter.stdout.startswith("timed out"), waiter.stdout + waiter.stderr
        after = read_holder(path)
        assert after is not None and after.token == named.token  # still the holder's
    finally:
        assert holder.stdin is not None
        holder.stdin.write("done\n")
        holder.stdin.close()
    assert holder.stdout.read().strip() == "kept"
    assert holder.wait(timeout=30) == 0
    assert not path.exists()


def _old_lock(path: Path, pid: int, host: str = _HOST) -> None:
    """A lock file as the code before boot ids and PID namespaces wrote it."""
    record = {"host": host, "pid": pid, "started": time.time() - 5, "token": "feed", "beat": 2}
    path.write_text(json.dumps(record))


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_dead_holder_of_this_very_namespace_is_still_taken_over_at_once(
    tmp_path: Path,
) -> None:
    path = tmp_path / "x.lock"
    path.write_bytes(b"")
    with FileLock(path, heartbeat=0.1, stale_after=1.0, report=io.StringIO()) as lock:
        mine = json.loads(path.read_text())
    mine.update(pid=_dead_pid(), token="feed")
    path.write_text(json.dumps(mine))  # this host, boot and namespace; its pid is dead
    started = time.monotonic()
    with FileLock(path, heartbeat=0.1, stale_after=30.0, timeout=20, report=io.StringIO()):
        assert time.monotonic() - started < 10
    assert lock.token != "feed"


@pytest.mark.slow  # heartbeat waits of seconds: the fast set keeps the live holder's case
@pytest.mark.parametrize("field", ["boot", "pidns"])
def test_a_dead_pid_of_another_boot_or_namespace_waits_for_the_heartbeat_rule(
    tmp_path: Path, field: str
) -> None:
    """A lock naming this host but another boot (a disk that outlived a reboot) or another
    PID namespace: its pid is not judged here; it is taken over once unchanged for
    ``stale_after``, as a holder on another host."""
    path = tmp_path / "x.lock"
    with FileLock(path, heartbeat=0.1, stale_after=1.0, report=io.StringIO()):
        mine = json.loads(path.read_text())
    assert mine[field]  # the new fields are written
    mine.update({"pid": _dead_pid(), "token": "feed", field: "elsewhere"})
    path.write_text(json.dumps(mine))
    with pytest.raises(TimeoutError):
        FileLock(path, heartbeat=0.1, stale_after=3.0, timeout=1.0).acquire()
    started = time.monotonic()
    with FileLock(path, heartbeat=0.1, stale_after=1.0, timeout=20, report=io.StringIO()):
        assert time.monotonic() - started >= 1.0


@pytest.mark.slow  # heartbeat waits of seconds: the fast set keeps the live holder's case
def test_an_old_lock_file_of_this_host_is_judged_by_the_heartbeat_rule(tmp_path: Path) -> None:
    """A lock file written by the code before (no boot id, no PID namespace) cannot say which
    namespace its pid is of: the conservative reading, the heartbeat rule, not the pid."""
    path = tmp_path / "x.lock"
    _old_lock(path, _dead_pid())
    holder = read_holder(path)
    assert holder is not None and holder.host == _HOST  # still read
    with pytest.raises(TimeoutError):
        FileLock(path, heartbeat=0.1, stale_after=3.0, timeout=1.0).acquire()
    started = time.monotonic()
    with FileLock(path, heartbeat=0.1, stale_after=1.0, timeout=20, report=io.StringIO()):
        assert time.monotonic() - started >= 1.0


BUILD = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    from lading.disk import BuildContext
    dest, who = Path(sys.argv[1]), sys.argv[2]
    with BuildContext(dest, None, "directory") as build:
        with build.scratch() as tmp:
            (tmp / "part1").write_text(who)
            print("building", tmp.name, flush=True)
            if sys.argv[3] == "pause":
                sys.stdin.readline()  # stopped (SIGSTOP) meanwhile, taken over
            (tmp / "part2").write_text(who)
            (tmp / "_lading.json").write_text("{}")
            build.publish(tmp)
    print("published", flush=True)
    """
)


@pytest.mark.slow  # heartbeat waits of seconds: the fast set keeps the live holder's case
@needs_namespaces
def test_a_build_taken_over_from_another_node_goes_on_in_its_temporary_directory(
    tmp_path: Path,
) -> None:
    """Builder A (node-a) is suspended past the stale timeout; builder B (node-b) takes the
    lock over and builds. B deleted A's temporary directory (A's pid judged in B's own PID
    namespace, where it was B's own pid 1), so A, resumed, failed. As the lock promises, A's
    build now goes on in its private directory and its publish is whole."""
    dest = tmp_path / "out"
    env = {**os.environ, "LADING_LOCK_STALE_S": "3"}
    a = subprocess.Popen(
        _in_namespace(BUILD, str(dest), "a", "pause", host="node-a"),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
        start_new_session=True,
    )  # fmt: skip
    stopped = False
    try:
        assert a.stdout is not None
        said, name = a.stdout.readline().split()
        assert said == "building"
        temp = tmp_path / name
        assert temp.is_dir()
        os.killpg(a.pid, signal.SIGSTOP)
        stopped = True
        b = subprocess.run(
            _in_namespace(BUILD, str(dest), "b", "go", host="node-b"),
            capture_output=True, text=True, env=env, timeout=120,
        )  # fmt: skip
        assert b.returncode == 0, b.stderr
        assert "published" in b.stdout and (dest / "part2").read_text() == "b"
        assert temp.is_dir() and (temp / "part1").read_text() == "a"  # A's build kept
        os.killpg(a.pid, signal.SIGCONT)
        stopped = False
        assert a.stdin is not None
        a.stdin.write("go on\n")
        a.stdin.close()
        rest = a.stdout.read()
        assert a.wait(timeout=60) == 0, rest
    finally:
        if stopped:
            os.killpg(a.pid, signal.SIGCONT)
        if a.poll() is None:
            os.killpg(a.pid, signal.SIGKILL)
            a.wait()
    assert "published" in rest
    assert (dest / "part1").read_text() == "a" and (dest / "part2").read_text() == "a"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # nothing left beside it


def test_temporaries_of_this_process_namespace_are_removed_once_their_builder_died(
    tmp_path: Path,
) -> None:
    """New temporaries name their node; a dead builder's of this very node are removed at
    once, as before, a live one's kept."""
    from lading.disk.atomic import new_temp_dir

    dest = tmp_path / "d"
    script = "import sys; from lading.disk.atomic import new_temp_dir; from pathlib import Path"
    script += "\nprint(new_temp_dir(Path(sys.argv[1])).name)"
    done = subprocess.run(
        [sys.executable, "-c", script, str(dest)], capture_output=True, text=True, check=True
    )
    dead = tmp_path / done.stdout.strip()
    assert dead.is_dir()
    mine = new_temp_dir(dest)  # this process's: a later build of this process removes it
    live = tmp_path / dead.name.replace(dead.name.split("-")[1], str(os.getppid()), 1)
    live.mkdir()  # a live builder's of this node (not this process)
    assert sorted(remove_dead_temps(dest)) == sorted([dead, mine])
    assert live.is_dir()


def test_temporaries_of_another_node_are_kept_until_abandoned(tmp_path: Path) -> None:
    """A temporary naming another host, boot or PID namespace (its node hash): its pid says
    nothing here, so it is kept while it changed within ``ABANDONED_S`` (a build taken over
    wrongly goes on in it), then removed."""
    from lading.disk.snapshot import ABANDONED_S

    dest = tmp_path / "d"
    dest.mkdir()
    pid = _dead_pid()
    beside = tmp_path / f"d.tmp-{pid}-00000000abababab"
    inside = dest / f".tmp-{pid}-00000000cdcdcdcd"
    aside = tmp_path / f"d.old-{pid}-00000000efefefef"
    for path in (beside, inside, aside):
        path.mkdir()
        (path / "part").write_text("x")
    assert remove_dead_temps(dest) == []
    assert all(p.is_dir() for p in (beside, inside, aside))
    long_ago = time.time() - ABANDONED_S - 60
    for path in (beside, inside):
        os.utime(path / "part", (long_ago, long_ago))
        os.utime(path, (long_ago, long_ago))
    assert sorted(remove_dead_temps(dest)) == sorted([beside, inside])
    assert aside.is_dir()


def test_a_version_aside_of_another_node_is_put_back_where_dest_is_missing(
    tmp_path: Path,
) -> None:
    """A publisher of another node killed between its two renames (no atomic exchange: NFS)
    left no ``dest``: its pid cannot be judged here, but under the lock the whole version it
    renamed aside is put back rather than ``dest`` left missing (as before nodes were named)."""
    dest = tmp_path / "d"
    pid = _dead_pid()
    old = tmp_path / f"d.old-{pid}-00000000abababab"
    old.mkdir()
    (old / "_lading.json").write_text("{}")
    half = tmp_path / f"d.tmp-{pid}-00000000cdcdcdcd"  # the new one, unfinished (no mark)
    half.mkdir()
    remove_dead_temps(dest)
    assert (dest / "_lading.json").is_file() and not old.exists()
    assert half.is_dir()  # another node's, changed lately: kept until abandoned
