"""A build under a process group that takes longer than the group's collective timeout.

The ranks that do not build wait for the builder outside any collective (torch's default
timeout, 10 min for NCCL, would kill every rank during a long tokenized build): each test joins
a gloo group whose timeout is scaled down to 3 s and makes the build take 6 s.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

import lading
from distributed import free_port, join_group, run_processes
from lading.bench.synth import synth

pytestmark = pytest.mark.slow

GROUP_TIMEOUT_S = 3  # the group's collective timeout, standing for torch's 10 or 30 min
BUILD_S = 6.0  # a build longer than that


def _in_group(
    rank: int, world: int, port: int, per_node: int, env: dict[str, str], fn: str, *args: Any
) -> Any:
    """Join a gloo group of ``world`` ranks, ``per_node`` to a simulated node, whose timeout is
    ``GROUP_TIMEOUT_S``; run ``fn`` (a name in this module); leave the group."""
    import torch.distributed as dist

    join_group(rank, world, port, per_node, env, GROUP_TIMEOUT_S)
    try:
        return globals()[fn](rank, *args)
    finally:
        time.sleep(1)  # rank 0 hosts the group's store: let the others finish with it first
        dist.destroy_process_group()


def _run(world: int, fn: str, *args: Any, per_node: int = 0, **env: str) -> list[Any]:
    return run_processes(
        _in_group, world, free_port(), per_node or world, env, fn, *args, gloo=False, timeout=90
    )


def _slow_build(delay: float, fail: bool = False) -> None:
    """Make this process's builds take ``delay`` seconds more (and then fail, with ``fail``)."""
    import lading.stores.building.build as build

    original = build._build_locked

    def slow(*args: Any, **kwargs: Any) -> Any:
        time.sleep(delay)
        if fail:
            raise OSError("disk full (injected)")
        return original(*args, **kwargs)

    build._build_locked = slow


def _build(rank: int, src: str, dest: str, delay: float, fail: bool = False) -> Any:
    _slow_build(delay, fail)
    try:
        store = lading.build_store(src, dest, progress=False)
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    return store.snapshot, len(store), store["17"]


def test_a_build_longer_than_the_groups_timeout_reaches_every_rank(tmp_path: Path) -> None:
    files = synth("passages", 300, tmp_path / "c")
    dest = str(tmp_path / "store")
    results = _run(2, "_build", str(files.corpus), dest, BUILD_S, LADING_SHARED_FS="1")
    assert all(isinstance(r, tuple) for r in results), results
    assert len(set(results)) == 1, results  # every rank on the builder's snapshot
    assert results[0][1] == 300


def _node_build(rank: int, src: str, base: str, per_node: int) -> Any:
    node = rank // per_node
    return _build(rank, src, f"{base}/node{node}/store", BUILD_S if node == 1 else 0.0)


def test_node_local_builds_wait_for_the_slowest_node(tmp_path: Path) -> None:
    """Two simulated nodes of two ranks, each node building its own copy (node 1 slowly)."""
    files = synth("passages", 300, tmp_path / "c")
    results = _run(
        4, "_node_build", str(files.corpus), str(tmp_path), 2, per_node=2, LADING_SHARED_FS="0"
    )
    assert all(isinstance(r, tuple) for r in results), results
    assert results[0] == results[1] and results[2] == results[3], results
    assert results[0][0] != results[2][0]  # two copies, each its node's own snapshot
    for node in (0, 1):
        assert (
            lading.open_store(tmp_path / f"node{node}" / "store").snapshot == results[2 * node][0]
        )


def test_a_build_failing_after_the_groups_timeout_fails_every_rank(tmp_path: Path) -> None:
    files = synth("passages", 50, tmp_path / "c")
    dest = str(tmp_path / "store")
    results = _run(2, "_build", str(files.corpus), dest, BUILD_S, True, LADING_SHARED_FS="1")
    assert results[0] == "OSError: disk full (injected)", results
    assert results[1].startswith("StoreFormatError: "), results
    assert "disk full (injected)" in results[1] and "rank 0" in results[1], results


def test_a_waiter_gives_up_after_its_own_timeout_naming_the_setting(tmp_path: Path) -> None:
    """``LADING_BUILD_TIMEOUT_S`` bounds the wait; the builder's good build is kept."""
    files = synth("passages", 50, tmp_path / "c")
    dest = str(tmp_path / "store")
    results = _run(
        2, "_build", str(files.corpus), dest, BUILD_S, LADING_SHARED_FS="1",
        LADING_BUILD_TIMEOUT_S="2",
    )  # fmt: skip
    assert results[1].startswith("TimeoutError: "), results
    assert "LADING_BUILD_TIMEOUT_S" in results[1] and "rank 0" in results[1], results
    # the builder's wait is its own build (it waits for no one): it finished and kept the store
    assert isinstance(results[0], tuple), results
    assert lading.open_store(dest).snapshot == results[0][0]


def _shards(rank: int, dest: str, slow_rank: int, merge_s: float) -> Any:
    from lading.stores.building.group import shards_in_group

    def write(shard: tuple[int, int]) -> None:
        time.sleep(BUILD_S if rank == slow_rank else 0.0)

    def merge(n: int) -> str:
        time.sleep(merge_s)
        return f"merged {n}"

    try:
        return shards_in_group(write, merge, dest, shared=True)
    except Exception as e:
        return f"{type(e).__name__}: {e}"


@pytest.mark.parametrize(("slow_rank", "merge_s"), [(1, 0.0), (-1, BUILD_S)])
def test_shards_and_a_merge_longer_than_the_groups_timeout(
    tmp_path: Path, slow_rank: int, merge_s: float
) -> None:
    """A shard written slowly on one rank, or a slow merge on rank 0, waits for no collective."""
    results = _run(2, "_shards", str(tmp_path / "store"), slow_rank, merge_s)
    assert results == ["merged 2", "merged 2"]


def test_the_wait_setting_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    from lading.stores.building.group import DEFAULT_TIMEOUT_S, build_timeout

    monkeypatch.delenv("LADING_BUILD_TIMEOUT_S", raising=False)
    assert build_timeout() == DEFAULT_TIMEOUT_S
    monkeypatch.setenv("LADING_BUILD_TIMEOUT_S", "7200")
    assert build_timeout() == 7200
    for bad in ("soon", "0", "-5", "nan"):
        monkeypatch.setenv("LADING_BUILD_TIMEOUT_S", bad)
        with pytest.raises(ValueError, match="LADING_BUILD_TIMEOUT_S"):
            build_timeout()
