"""``lading bench`` under torchrun, srun or mpirun: the study's cells across nodes.

Launched with ``torchrun --nnodes N --nproc_per_node P -m lading bench``, the N x P launched
processes do not run the study themselves: each is the *coordinator* of one rank. For every
cell it spawns one fresh process (as the one-machine bench spawns every rank), which joins a
group of its own with the other coordinators' children, on a port global rank 0 chose on its
host; so a cell starts from clean memory, as on one machine. Every cell runs at the launched
world size. A coordinator watches its child's memory (the node's budget divided by its local
processes) and kills it past the budget; the coordinators poll one another over a gloo group
every half second, so one failed rank stops the cell everywhere instead of leaving the others
blocked in a collective. They then exchange what their ranks measured, and every coordinator
builds the same record (global rank 0 writes it), memory given per node.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import socket
import time
from dataclasses import dataclass
from typing import Any

from lading.bench.cell import (
    Cell,
    Settings,
    cell_record,
    finish,
    free_port,
    kill_tree,
    rank_main,
)
from lading.bench.data import BenchData
from lading.bench.monitor import FIELDS, MemoryMonitor
from lading.bench.stats import load_average
from lading.world import World

POLL_S = 0.5


def launched_world() -> World | None:
    """The launched world when a launcher started more than one process, else None."""
    world = World.detect()
    return world if world.world_size > 1 else None


@dataclass
class Coordinators:
    """The launched processes, joined in a gloo group to run cells together."""

    world: World

    @classmethod
    def join(cls, world: World) -> Coordinators:
        """Join the coordinators' group (torchrun's, or srun/mpirun's ranks + MASTER_*)."""
        import torch.distributed as dist

        from lading.train.ddp import export_launch_env

        if world.launcher != "torchrun":
            export_launch_env(world)
        if not dist.is_initialized():
            dist.init_process_group("gloo")
        return cls(world)

    @property
    def leader(self) -> bool:
        """Global rank 0: it picks the ports and writes the results."""
        return self.world.rank == 0

    def check_world_sizes(self, world_sizes: list[int]) -> None:
        """Every cell runs at the launched world size; any other size is an error, said how."""
        others = sorted(set(world_sizes) - {self.world.world_size})
        if others:
            raise ValueError(
                f"launched with {self.world.world_size} processes, lading bench runs every cell "
                f"at world size {self.world.world_size}; --world-sizes asked for {others}. "
                "Launch again with other --nnodes/--nproc_per_node for another size, or leave "
                "--world-sizes out"
            )

    def agree_port(self) -> int:
        """A free port on global rank 0's host, the same on every coordinator."""
        import torch.distributed as dist

        chosen = [free_port("") if self.leader else 0]
        dist.broadcast_object_list(chosen, src=0)
        return int(chosen[0])

    def leave(self) -> None:
        """Leave the coordinators' group (after the last cell)."""
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()

    def run_cell(
        self, cell: Cell, settings: Settings, data: BenchData, budget: int | None
    ) -> dict[str, Any]:
        """Run ``cell`` with one fresh process per coordinator; the same record on all."""
        import torch
        import torch.distributed as dist

        port = self.agree_port()
        load1 = load_average()  # this host's, as the one-machine bench records its own
        env = {
            "RANK": str(self.world.rank),
            "WORLD_SIZE": str(self.world.world_size),
            "LOCAL_RANK": str(self.world.local_rank),
            "LOCAL_WORLD_SIZE": str(self.world.local_world_size),
            "MASTER_ADDR": os.environ.get("MASTER_ADDR", "127.0.0.1"),
            "MASTER_PORT": str(port),
            "TORCHELASTIC_USE_AGENT_STORE": "False",  # the child of rank 0 hosts its own store
        }
        ctx = mp.get_context("spawn")
        out = ctx.Queue()
        child = ctx.Process(
            target=rank_main, args=(self.world.rank, cell, settings, data, env, out)
        )
        child.start()
        pids = [child.pid] if child.pid is not None else []
        share = budget // self.world.local_world_size if budget is not None else None
        monitor = MemoryMonitor(pids, budget=share, on_budget=lambda: kill_tree(pids)).start()
        result: dict[str, float] | None = None
        error: str | None = None
        warned: list[str] = []
        deadline = time.monotonic() + settings.timeout_s
        while True:
            try:
                _, status, value = out.get(timeout=POLL_S)
                if status == "warning":  # shown once by the leader, however many ranks raise it
                    warned.append(value)
                elif status == "ok":
                    result = value
                else:
                    error = value
            except queue.Empty:
                pass
            died = child.exitcode is not None and result is None and error is None
            failed = error is not None or died or monitor.over_budget
            # every coordinator takes the same steps: the reduced flags decide for all
            flags = torch.tensor(
                [int(failed), int(result is None and not failed), int(time.monotonic() > deadline)]
            )
            dist.all_reduce(flags, op=dist.ReduceOp.MAX)
            if flags[0] or not flags[1] or flags[2]:
                break
        monitor.stop()  # the monitor's own kill (over the budget) is in monitor.over_budget
        exitcode = child.exitcode  # before finish() kills what is left: not the cell's doing
        finish([child], pids)
        out.close()
        out.join_thread()
        host = socket.gethostname()
        mine = {
            "rank": self.world.rank,
            "host": host,
            # the node: as the launcher numbers it, else (MPI) by host name
            "node": str(self.world.node_rank) if self.world.node_rank is not None else host,
            "result": result,
            "error": error,
            "memory": monitor.summary(),
            "over_budget": monitor.over_budget,
            "exitcode": exitcode,
            "timed_out": bool(flags[2]),
            "timeout_s": settings.timeout_s,
            "load1": load1,
            "cpus": os.cpu_count(),
            "warnings": warned,
        }
        reports: list[Any] = [None] * self.world.world_size
        dist.all_gather_object(reports, mine)
        return launched_record(cell, reports)


def launched_record(cell: Cell, reports: list[dict[str, Any]]) -> dict[str, Any]:
    """The record of a cell from every coordinator's report (rank, node, result or error, memory).

    Memory is summed over ranks, and per node (``memory["nodes"]``): a sum of each rank's peak,
    so an upper bound of the node's peak when ranks peak at different moments.
    """
    results = {r["rank"]: r["result"] for r in reports if r["result"] is not None}
    errors = [f"rank {r['rank']} on {r['host']}: {r['error']}" for r in reports if r["error"]]
    memory = merge_memory([r["memory"] for r in reports], [r["node"] for r in reports])
    over = any(r["over_budget"] for r in reports)
    by_rank = {r["rank"]: r for r in reports}
    exits = [by_rank[i].get("exitcode") if i in by_rank else None for i in range(cell.world_size)]
    late = [r for r in reports if r.get("timed_out")]
    timeout_s = late[0].get("timeout_s") if late else None
    record = cell_record(cell, results, errors, memory, over, exits, timeout_s)
    record["nodes"] = len({r["node"] for r in reports})
    record["hosts"] = sorted({r["host"] for r in reports})
    warned = [text for r in reports for text in r.get("warnings", [])]
    if warned:  # every rank's, each once: the grid shows them and takes them out
        record["warnings"] = list(dict.fromkeys(warned))
    # the load the cell started at, as the one-machine bench records it: the busiest host's
    # (the highest load per CPU), which the rankings' band is widened for (stats.cell_load)
    loads = [r for r in reports if r.get("load1") is not None]
    if loads:
        busiest = max(loads, key=lambda r: r["load1"] / (r.get("cpus") or 1))
        record["load1"] = busiest["load1"]
        record["cpus"] = busiest.get("cpus")
    return record


def merge_memory(summaries: list[dict[str, Any]], nodes: list[str]) -> dict[str, Any]:
    """One memory summary from each rank's (see MemoryMonitor.summary), with a per-node part."""
    measured = [(s, n) for s, n in zip(summaries, nodes) if s.get("samples")]
    if not measured:
        return {"samples": 0}
    out: dict[str, Any] = {
        "samples": min(s["samples"] for s, _ in measured),
        "processes": sum(s["processes"] for s, _ in measured),
    }
    for key in FIELDS:
        for kind in ("peak", "steady"):
            out[f"{kind}_{key}"] = sum(s[f"{kind}_{key}"] for s, _ in measured)
    out["per_process"] = [p for s, _ in measured for p in s.get("per_process", [])]
    per_node: dict[str, int] = {}
    for s, node in measured:
        per_node[node] = per_node.get(node, 0) + s["peak_anon"]
    out["nodes"] = {node: {"peak_anon": v} for node, v in sorted(per_node.items())}
    return out
