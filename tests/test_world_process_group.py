"""An initialised process group is authoritative, also without any launcher variables.

PyTorch's DDP tutorial starts its processes with ``mp.spawn`` and passes ``rank`` and
``world_size`` to ``init_process_group`` itself: no ``RANK``/``LOCAL_RANK``/``LOCAL_WORLD_SIZE``.
Every rank must then see itself, and lading's loaders and builds must work on every rank.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import lading
from contracts import Numbers
from distributed import run_processes
from lading import world as world_module
from lading.world import World


def test_group_without_launcher_is_one_node(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "LADING_RANK"):
        monkeypatch.delenv(name, raising=False)
    for rank in range(3):
        monkeypatch.setattr(world_module, "_distributed_rank_and_size", lambda r=rank: (r, 3))
        got = World.detect({})
        assert (got.rank, got.world_size, got.local_rank, got.local_world_size) == (
            rank,
            3,
            rank,
            3,
        )
        assert got.node_rank == 0 and got.launcher == "torch.distributed"
        assert got.is_builder(shared_fs=False) == (rank == 0)


def test_group_agreeing_with_launcher_keeps_its_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    # torchrun on node 1 of 2, 4 per node; the group agrees on the size: local layout kept
    env = {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4",
           "GROUP_RANK": "1"}  # fmt: skip
    monkeypatch.setattr(world_module, "_distributed_rank_and_size", lambda: (5, 8))
    got = World.detect(env)
    assert (got.local_rank, got.local_world_size, got.node_rank, got.launcher) == (
        1, 4, 1, "torchrun"
    )  # fmt: skip


def _tutorial_rank(rank: int, world: int, root: str) -> tuple[int, int, int, list[list[int]]]:
    detected = World.detect()
    source = Path(root) / "docs.tsv"
    store = lading.build_store(source, Path(root) / "docs.store")
    loader = lading.loader(Numbers(10), batch_size=2, shuffle=False, collate_fn=list)
    return detected.rank, detected.local_rank, len(store), [list(b) for b in loader]


@pytest.mark.slow
def test_mp_spawn_tutorial_pattern(tmp_path: Path) -> None:
    (tmp_path / "docs.tsv").write_text("".join(f"{i}\tdocument {i}\n" for i in range(50)))
    results = run_processes(_tutorial_rank, 2, str(tmp_path), launcher_env=False)
    assert [r[:3] for r in results] == [(0, 0, 50), (1, 1, 50)]
    seen = sorted(x for r in results for batch in r[3] for x in batch)
    assert seen == list(range(10))  # disjoint shares that cover the data


def _made_before_the_group(rank: int, world: int, port: int) -> str:
    """The tutorial's order reversed: the loader first, ``init_process_group`` after."""
    import os

    import torch.distributed as dist

    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK"):
        os.environ.pop(name, None)
    loader = lading.loader(Numbers(12), batch_size=2, shuffle=False, collate_fn=list)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    try:
        next(iter(loader))
    except lading.WorldChangedError as e:
        return str(e)
    finally:
        dist.destroy_process_group()
    return "read: every rank takes the whole dataset"


def _given_by_override(rank: int, world: int, port: int) -> list[list[int]]:
    """A data-parallel group inside a larger one: LADING_RANK/LADING_WORLD_SIZE say the
    loader's world (rank 0 of 2 here), the process group another (of 1)."""
    import os

    import torch.distributed as dist

    os.environ.update(LADING_RANK="0", LADING_WORLD_SIZE="2")
    loader = lading.loader(Numbers(12), batch_size=2, shuffle=False, collate_fn=list)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    try:
        return [list(b) for b in loader]
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_a_world_set_by_lading_rank_is_never_refused() -> None:
    """A review: the check below refused the documented override too (tensor or pipeline
    parallel runs set LADING_RANK to their data-parallel rank)."""
    from distributed import free_port

    (got,) = run_processes(_given_by_override, 1, free_port(), gloo=False)
    share = lading.loader(Numbers(12), 2, shuffle=False, collate_fn=list, world=World(0, 2))
    assert got == [list(b) for b in share] and len(got) == 3  # rank 0 of 2's share


@pytest.mark.slow
def test_a_loader_made_before_the_process_group_is_refused_not_read_whole_by_every_rank() -> None:
    """A review: made before ``init_process_group`` (no launcher variables), a loader took its
    process for rank 0 of 1 and kept it, and every rank read all 12 items, with no error
    (DistributedSampler raises there). Its first pass now refuses, naming the fix."""
    from distributed import free_port

    said = run_processes(_made_before_the_group, 2, free_port(), gloo=False)
    for rank, text in enumerate(said):
        assert "made before torch.distributed.init_process_group" in text, text
        assert f"rank {rank} of 2" in text and "world=lading.World(" in text, text
