"""Run a function in N real processes (spawn), optionally joined in a gloo process group."""

from __future__ import annotations

import multiprocessing as mp
import os
import socket
import subprocess
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _entry(
    fn: Callable[..., Any],
    rank: int,
    world: int,
    port: int | None,
    args: tuple[Any, ...],
    out: Any,
    launcher_env: bool = True,
) -> None:
    try:
        if port is not None:
            import torch.distributed as dist

            if launcher_env:  # as torchrun sets them
                os.environ.update(
                    RANK=str(rank),
                    WORLD_SIZE=str(world),
                    LOCAL_RANK=str(rank),
                    LOCAL_WORLD_SIZE=str(world),
                )
            else:  # PyTorch's DDP tutorial: mp.spawn, MASTER_ADDR/PORT only, rank passed in
                for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK"):
                    os.environ.pop(name, None)
                os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
            init = f"tcp://127.0.0.1:{port}" if launcher_env else "env://"
            dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
        result = fn(rank, world, *args)
        if port is not None:
            dist.barrier()
            dist.destroy_process_group()
        out.put((rank, "ok", result))
    except BaseException:
        out.put((rank, "error", traceback.format_exc()))


def run_processes(
    fn: Callable[..., Any],
    world: int,
    *args: Any,
    gloo: bool = True,
    timeout: float = 120,
    launcher_env: bool = True,
) -> list[Any]:
    """``fn(rank, world, *args)`` in ``world`` spawned processes; their results by rank.

    With ``launcher_env`` False the group is joined as PyTorch's DDP tutorial does (no
    ``RANK``/``LOCAL_RANK``/... variables, only ``MASTER_ADDR``/``MASTER_PORT``).

    Raises AssertionError with the child's traceback when a process fails or hangs.
    """
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = free_port() if gloo else None
    procs = [
        ctx.Process(target=_entry, args=(fn, r, world, port, args, out, launcher_env))
        for r in range(world)
    ]
    for p in procs:
        p.start()
    results: dict[int, Any] = {}
    try:
        for _ in range(world):
            rank, status, value = out.get(timeout=timeout)
            if status != "ok":
                raise AssertionError(f"rank {rank} failed:\n{value}")
            results[rank] = value
    finally:
        end_processes(procs)
    return [results[r] for r in range(world)]


def end_processes(procs: Sequence[Any]) -> None:
    """Join ``procs`` (10 s each at most), killing the ones still alive then."""
    for p in procs:
        p.join(timeout=10)
        if p.is_alive():
            p.kill()
            p.join(timeout=10)


def join_group(
    rank: int, world: int, port: int, per_node: int, env: dict[str, str], timeout_s: float
) -> None:
    """Join a gloo group of ``world`` ranks on ``port`` with a collective timeout of
    ``timeout_s``, the launcher's variables set as for ``per_node`` ranks a (simulated) node,
    and ``env`` added to this process's environment."""
    import datetime

    import torch.distributed as dist

    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank % per_node),
        LOCAL_WORLD_SIZE=str(per_node),
        **env,
    )
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=timeout_s),
    )


def run_cli(
    args: list[str],
    torchrun: int = 0,
    timeout: float = 600,
    env: dict[str, str] | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """``python -m lading ARGS`` (under torchrun with ``torchrun`` processes, with ``env``
    added to this process's environment); with ``check``, fails the test with the command's
    stderr when it fails."""
    launcher = [sys.executable, "-m", "lading"]
    if torchrun:
        launcher = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            str(torchrun),
            "--master_port",
            str(free_port()),
            "-m",
            "lading",
        ]
    done = subprocess.run(
        launcher + args,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=None if env is None else {**os.environ, **env},
    )
    assert done.returncode == 0 or not check, done.stderr[-4000:]
    return done
