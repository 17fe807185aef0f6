"""The training commands leave the process group they joined, and only that one.

A gloo group still alive at interpreter exit can abort a rank with ``terminate called without an
active exception`` (pytorch/pytorch#190489): CI saw rank 1 of ``lading train sessions`` die with
SIGABRT after a finished run. These tests run the trainer in real spawned processes.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from test_tabular import write_sessions

from distributed import free_port, run_processes


def _days(root: Path) -> Path:
    for day in (1, 2):
        for split, rows in (("train", 40), ("valid", 8), ("test", 8)):
            write_sessions(root / str(day) / f"{split}.parquet", rows, 2, seed=day)
    return root


def _train(rank: int, world: int, data: str, out: str, port: int) -> tuple[bool, bool]:
    import torch.distributed as dist

    from lading.tabular.train import SessionsConfig, train_sessions

    if port:  # as torchrun starts a rank: the variables only, no group yet
        os.environ.update(
            RANK=str(rank),
            WORLD_SIZE=str(world),
            LOCAL_RANK=str(rank),
            LOCAL_WORLD_SIZE=str(world),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
        )
    before = dist.is_initialized()
    train_sessions(
        SessionsConfig(
            data=Path(data),
            train_days=[1],
            eval_day=2,
            out=Path(out),
            column="items",
            max_len=6,
            batch_size=8,
            epochs=1,
            dim=8,
            log_every=100,
        )
    )
    return before, dist.is_initialized()


@pytest.mark.slow
def test_train_leaves_the_group_it_joined(tmp_path: Path) -> None:
    data = _days(tmp_path / "days")
    states = run_processes(_train, 2, str(data), str(tmp_path / "out"), free_port(), gloo=False)
    assert states == [(False, False), (False, False)]


@pytest.mark.slow
def test_train_keeps_the_group_the_user_joined(tmp_path: Path) -> None:
    data = _days(tmp_path / "days")
    states = run_processes(_train, 2, str(data), str(tmp_path / "out"), 0)
    assert states == [(True, True), (True, True)]
