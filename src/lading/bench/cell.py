"""One cell of the study: a fresh group of processes reading documents one way, measured.

Every rank opens its document strategy, builds the training groups and a DDP loader, and runs
``warmup`` untimed iterations of the whole loop, then a timed window of ``seconds`` (at least
``steps`` iterations; :mod:`lading.bench.window`): waiting for the batch, on CUDA copying it to
the device, and (in train mode) a forward/backward/optimizer step of a cross-encoder under DDP.
A cell runs once per repeat; the grid interleaves the repeats (:mod:`lading.bench.stats`).
The launcher watches the memory of every rank and DataLoader worker and stops the cell if it
passes the budget. A training cell then replays its batches from the device through the same
step (:mod:`lading.bench.synthetic`): the efficiency E of the data path, and the bytes each
step brought to the device.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import socket
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any, TextIO

import psutil

from lading.bench.data import (
    EMIT,
    PREFETCHED,
    READS_PACKED,
    TOKENIZED_IN,
    BenchData,
    unavailable,
)
from lading.bench.monitor import MemoryMonitor
from lading.bench.peers import PEER_STRATEGIES, open_peer, preload
from lading.bench.stats import load_average

MODES: tuple[str, ...] = ("loader", "train")
DEAD_RANK_GRACE_S = 2.0  # what a dead rank put before it died: waited for this long at most


@dataclass(frozen=True)
class Cell:
    """What varies from cell to cell."""

    strategy: str
    world_size: int
    mode: str
    workers: int = 0
    pin_memory: bool = False
    ramdisk: bool = False
    parallel: str = "ddp"

    def __post_init__(self) -> None:
        if self.mode not in MODES:  # anything else would be measured as a loader cell
            raise ValueError(
                f"Cell mode {self.mode!r}: expected one of {', '.join(MODES)} (a loader cell "
                "times the data path alone; a train cell adds the model's step)"
            )

    def label(self) -> str:
        extra = [f"workers={self.workers}"] if self.workers else []
        extra += ["pin"] if self.pin_memory else []
        extra += ["ramdisk"] if self.ramdisk else []
        extra += [self.parallel] if self.parallel != "ddp" else []
        return f"{self.strategy} x{self.world_size} {self.mode}" + (
            f" ({', '.join(extra)})" if extra else ""
        )


@dataclass(frozen=True)
class Settings:
    """What every cell of a grid shares.

    Attributes:
        seconds: each repeat's timed window, after the warm-up.
        steps: the fewest timed steps a window may have (a slow train step may pass
            ``seconds`` before).
        warmup: untimed steps first (the tokenizer, caches and allocator warm up).
        repeats: runs of every cell, interleaved over the grid.
        precision: a train cell's autocast precision (``"fp32"``, ``"bf16"``, ``"fp16"``).
        sampling: ``"run"`` when there are negatives (their run's top), else ``"random"``.
        query_columns: a wider queries TSV's column names (``--query-columns``), None for
            ``id, text`` (:func:`lading.ir.train.groups_from_files` reads them).
    """

    seconds: float = 1.0
    steps: int = 5
    warmup: int = 5
    repeats: int = 3
    batch_size: int = 8
    group_size: int = 4
    max_length: int = 128
    model: str = "tiny"
    precision: str = "fp32"
    sampling: str = "random"
    query_columns: tuple[str, ...] | None = None
    seed: int = 0
    timeout_s: float = 900.0


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on at ``host`` now ("" for every interface)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def open_strategy(strategy: str, data: BenchData) -> Any:
    """The document store a strategy reads from, opened in the calling process."""
    from lading.stores import InMemoryStore, IrDatasetsStore, OffsetStore, open_store

    if strategy == "memory":
        return InMemoryStore.from_source(data.corpus)  # the study: every rank loads a dict
    if strategy == "offsets":
        return OffsetStore(data.offsets)
    if strategy in READS_PACKED:
        return open_store(data.packed)
    if strategy == "remote":  # the node cache: $LADING_CACHE/remote, $LADING_REMOTE_CACHE_BYTES
        assert data.remote is not None
        return open_store(data.remote)
    if strategy == "irds":
        assert data.irds_tsv is not None
        return IrDatasetsStore.from_tsv(data.irds_tsv)
    if strategy in PEER_STRATEGIES:  # HF datasets, Mosaic MDS, litdata: an id map per rank
        return open_peer(strategy, data.peer(strategy))
    raise ValueError(f"unknown strategy {strategy!r}")


def quiet_ir_datasets() -> None:
    """Silence INFO logging in this rank process: ir_datasets logs "[INFO] ..." lines on
    loggers it sets to INFO itself at first use, which break the bench's progress bar.
    Warnings and errors still show."""
    import logging

    logging.disable(logging.INFO)


def local_env(rank: int, world_size: int, port: int) -> dict[str, str]:
    """What torchrun would set for ``rank`` of a one-machine group on ``port``."""
    return {
        "RANK": str(rank),
        "WORLD_SIZE": str(world_size),
        "LOCAL_RANK": str(rank),
        "LOCAL_WORLD_SIZE": str(world_size),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }


def collator_for(strategy: str, store: Any, tokenizer: Any, settings: Settings) -> Any:
    """The collator of a strategy: it tokenizes the documents' text exactly where the report's
    "tokenized" column (:data:`TOKENIZED_IN`) says the loop does."""
    from lading.ir import CrossEncoderCollator

    return CrossEncoderCollator(
        store,
        tokenizer,
        max_length=settings.max_length,
        use_tokens=TOKENIZED_IN[strategy] != "collator",
        emit=EMIT.get(strategy, "wide"),
    )


def rank_main(
    rank: int, cell: Cell, settings: Settings, data: BenchData, env: dict[str, str], out: Any
) -> None:
    """Entry point of one rank (spawned), joining its cell's group through ``env``
    (:func:`serve_rank` reports what it measured, or its error, and its warnings)."""

    def work() -> dict[str, float]:
        quiet_ir_datasets()
        os.environ.update(env)  # ddp.setup joins the group from these
        return _run_rank(cell, settings, data)

    serve_rank(rank, out, work)


def serve_rank(rank: int, out: Any, work: Callable[[], dict[str, float]]) -> None:
    """Run ``work`` in a rank process and put its report in ``out``: ``(rank, "ok", result)``
    or ``(rank, "error", traceback)``, after a ``(rank, "warning", text)`` for each distinct
    warning it raised, sent when raised (a rank that dies later has its warnings told). The
    bench shows each once, however many cells and ranks raise it (:mod:`lading.bench.warned`):
    every rank of every cell building the same groups printed the same warnings, 72 times
    on one grid.

    Once its report is in the pipe the rank leaves with ``os._exit``: tearing down torch at
    interpreter exit costs ~1 s per process on a busy 2-core machine, 24 times in the quick
    grid. Progress bars get a thread lock instead of tqdm's multiprocessing one, whose
    semaphore would otherwise be reported leaked by the parent's resource tracker.
    """
    from tqdm import tqdm

    tqdm.set_lock(threading.RLock())
    with warnings_to(lambda text: out.put((rank, "warning", text))):
        try:
            out.put((rank, "ok", work()))
        except BaseException:
            out.put((rank, "error", traceback.format_exc()))
    out.close()
    out.join_thread()  # the report has left this process
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


@contextlib.contextmanager
def warnings_to(send: Callable[[str], None]) -> Iterator[None]:
    """Send the warnings this process shows to ``send``, each distinct one once, as the text
    Python would print (``file:line: Category: message`` and the source line), instead of
    printing them; the filters still decide what is shown. A process forked inside (a
    DataLoader worker) prints its own warnings as before: it must not write to the rank's
    queue, which a worker killed mid-write would leave locked."""
    pid, sent = os.getpid(), set()
    with warnings.catch_warnings():
        show = warnings.showwarning

        def to_send(
            message: Warning | str,
            category: type[Warning],
            filename: str,
            lineno: int,
            file: TextIO | None = None,
            line: str | None = None,
        ) -> None:
            if os.getpid() != pid:
                show(message, category, filename, lineno, file, line)
                return
            text = warnings.formatwarning(message, category, filename, lineno, line)
            if text not in sent:
                sent.add(text)
                send(text)

        warnings.showwarning = to_send
        yield


def _train_parts(cell: Cell, settings: Settings, vocab: int, device: Any) -> tuple[Any, Any, Any]:
    """A train cell's model, the model as its parallel mode wraps it, and its optimizer; three
    Nones for a loader cell (the step then only moves batches)."""
    if cell.mode != "train":
        return None, None, None
    import torch

    from lading.ir import CrossEncoder
    from lading.ir.model import tiny_bert_config
    from lading.train import ddp

    torch.manual_seed(settings.seed)
    if settings.model == "tiny":
        model = CrossEncoder.from_config(tiny_bert_config(vocab))
    else:
        model = CrossEncoder.from_pretrained(settings.model)
    model = model.to(device)
    cuda = device.type == "cuda"
    net = ddp.wrap(model, "dp" if cell.parallel == "dp" and cuda else "ddp", device)
    return model, net, torch.optim.AdamW(model.parameters(), lr=1e-4)


def _run_rank(cell: Cell, settings: Settings, data: BenchData) -> dict[str, float]:
    import torch

    from lading.bench.synthetic import Recorded
    from lading.bench.window import endless, run_replay, run_window
    from lading.device import to_device
    from lading.ir.train import CrossEncoderStep, groups_from_files
    from lading.loading.map_workload import loader as make_loader
    from lading.stores.tokens import load_tokenizer
    from lading.train import LoopConfig, Trainer, ddp
    from lading.train.procmem import process_memory

    world, device = ddp.setup("ddp")  # a dp cell's ranks (if several) still form a group
    cuda = device.type == "cuda"
    preload(cell.strategy)  # a peer's package: its import is no document (in the totals still)
    anon_before = process_memory().anon  # torch and friends loaded, no documents yet
    store = open_strategy(cell.strategy, data)
    store_anon = process_memory().anon - anon_before  # the store alone: a dict, or ~nothing
    groups = groups_from_files(store, data.queries, data.qrels, data.negatives, settings)
    tokenizer = load_tokenizer(data.tokenizer)
    collate = collator_for(cell.strategy, store, tokenizer, settings)
    resident = to_device(store, device) if EMIT.get(cell.strategy) == "rows" else None
    batch_size = settings.batch_size * (
        torch.cuda.device_count() if cell.parallel == "dp" and cuda else 1
    )
    loader = make_loader(
        groups,
        batch_size,
        collate,
        num_workers=cell.workers,
        pin_memory=cell.pin_memory and cuda,
        seed=settings.seed,
        world=world,
    )
    model, net, optimizer = _train_parts(cell, settings, tokenizer.get_vocab_size(), device)
    workload = Recorded(
        CrossEncoderStep(net, device, settings.precision, resident=resident), cell.mode == "train"
    )
    config = LoopConfig(
        1,
        seed=settings.seed,
        progress=False,
        memory=False,
        prefetch=False,  # the prefetched strategies' prefetcher is inside the window's loader
    )
    source = endless(loader, device, cuda and cell.strategy in PREFETCHED)
    trainer = Trainer(workload, source, config, world, device, model, optimizer)
    timed = run_window(trainer, settings.seconds, settings.steps, settings.warmup)
    kept = workload.kept_host_bytes()  # the replay's batches: no part of the data path
    synthetic = 0.0
    if cell.mode == "train":  # the same step on the same batches, already on the device
        ideal = Trainer(workload.inner, workload.replay(), config, world, device, model, optimizer)
        synthetic = run_replay(ideal, timed.sizes, settings.warmup)
    ddp.barrier()
    ddp.teardown()
    anon_after = process_memory().anon
    close = getattr(store, "close", None)
    if callable(close):  # a peer's shared memory, released before the rank's os._exit
        close()
    return {
        "rows": timed.rows,
        "steps": timed.steps,
        "blocks": timed.blocks,
        "seconds": timed.seconds,  # the group's window, the same on every rank
        "busy_s": timed.busy_s,  # this rank's own time in its blocks
        "cpu_s": timed.cpu_s,
        "wait_s": timed.wait_s,
        "synthetic_s": synthetic,
        "h2d_bytes_per_step": workload.bytes_per_step(),
        "strategy_anon": anon_after - anon_before,
        "baseline_anon": anon_before,
        "store_anon": store_anon,
        "replay_kept_bytes": kept,
    }


def kill_tree(pids: list[int]) -> None:
    """Kill these processes and all their descendants (DataLoader workers)."""
    for pid in pids:
        try:
            parent = psutil.Process(pid)
            for child in parent.children(recursive=True):
                child.kill()
            parent.kill()
        except psutil.Error:
            continue


@contextlib.contextmanager
def ctrl_c_to_parent_only() -> Iterator[None]:
    """Processes started inside ignore SIGINT (a disposition kept across the spawn's exec; an
    ignored SIGINT is one Python leaves ignored): Ctrl-C reaches the whole foreground process
    group, and each rank printed a KeyboardInterrupt traceback, mid-import or mid-step, where
    the parent alone stops the run, killing the cell's processes, and says so in one line."""
    if threading.current_thread() is not threading.main_thread():
        yield  # (signal handlers are set from the main thread only)
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def run_cell(cell: Cell, settings: Settings, data: BenchData, budget: int | None) -> dict[str, Any]:
    """Run ``cell`` in fresh processes; its record (status ok, oom, error or n/a)."""
    why = unavailable(cell.strategy, cell.pin_memory)
    if why is not None:
        return {**asdict(cell), "memory": {"samples": 0}, "status": "n/a", "reason": why}
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = free_port()
    load1 = load_average()
    procs = [
        ctx.Process(
            target=rank_main,
            args=(r, cell, settings, data, local_env(r, cell.world_size, port), out),
        )
        for r in range(cell.world_size)
    ]
    with ctrl_c_to_parent_only():
        for p in procs:
            p.start()
    pids = [p.pid for p in procs if p.pid is not None]
    monitor: MemoryMonitor | None = None
    results: dict[int, Any] = {}
    errors: list[str] = []
    warned: list[str] = []  # the ranks' distinct warnings, in the order raised
    died_at = 0.0  # when a rank was first seen dead
    deadline = time.monotonic() + settings.timeout_s
    try:  # (from the start: the ranks ignore Ctrl-C, so they go with the parent on any exit)
        monitor = MemoryMonitor(pids, budget=budget, on_budget=lambda: kill_tree(pids)).start()
        while len(results) + len(errors) < cell.world_size and time.monotonic() < deadline:
            try:
                rank, status, value = out.get(timeout=0.5)
            except Exception:  # queue.Empty: check whether a rank died without reporting
                if any(p.exitcode not in (None, 0) for p in procs):
                    # what it put arrives within a moment; a rank killed right after a put
                    # (a warning) counts it in qsize() but never sends it
                    died_at = died_at or time.monotonic()
                    if not out.qsize() or time.monotonic() - died_at > DEAD_RANK_GRACE_S:
                        break
                continue
            if status == "warning":
                warned.append(value)
            elif status == "ok":
                results[rank] = value
            else:
                errors.append(value)
        timed_out = len(results) + len(errors) < cell.world_size and time.monotonic() >= deadline
        monitor.stop()  # the monitor's own kill (over the budget) is in monitor.over_budget
        exits = [p.exitcode for p in procs]  # before finish() kills what is left: not the cell's
        finish(procs, pids)
    except BaseException:  # Ctrl-C: the cell's processes go with it
        if monitor is not None:
            monitor.stop()
        kill_tree(pids)
        finish(procs, pids, grace_s=5.0)
        out.cancel_join_thread()
        raise
    out.close()
    out.join_thread()
    record = cell_record(
        cell,
        results,
        errors,
        monitor.summary(),
        monitor.over_budget,
        exits,
        settings.timeout_s if timed_out else None,
    )
    return {**record, "load1": load1, "cpus": os.cpu_count(), **_warnings(warned)}


def _warnings(texts: list[str]) -> dict[str, Any]:
    """A record's ``warnings`` (its ranks' distinct warnings, which the grid shows once and
    takes out of the record), absent without any."""
    return {"warnings": list(dict.fromkeys(texts))} if texts else {}


def finish(procs: list[Any], pids: list[int], grace_s: float = 10.0) -> None:
    """Let the ranks exit by themselves, then kill what is left.

    A rank killed at once leaves its multiprocessing semaphores (tqdm's lock) registered with
    the parent's resource tracker, which warns "leaked semaphore objects" at exit.
    """
    deadline = time.monotonic() + grace_s
    for p in procs:
        p.join(timeout=max(0.0, deadline - time.monotonic()))
    kill_tree(pids)
    for p in procs:
        p.join(timeout=10)


def cell_record(
    cell: Cell,
    results: dict[int, dict[str, float]],
    errors: list[str],
    memory: dict[str, Any],
    over_budget: bool,
    exits: Sequence[int | None] = (),
    timeout_s: float | None = None,
) -> dict[str, Any]:
    """A cell's record from what its ranks reported (rank -> result) and its memory.

    ``exits`` are the ranks' exit codes when the cell ended, before the bench killed what was
    left (None: still running; negative: the signal); ``timeout_s`` is set when the cell ran
    past it. Status ``oom`` only when the memory monitor saw the budget passed, or a rank that
    did not report got a SIGKILL the bench did not send (the kernel's OOM killer); ``error``
    when a rank failed, died otherwise, or had not reported by the timeout; else ``ok`` with
    the throughput (the rows of all ranks over the group's window: the slowest rank's), the
    mean wait share (of each rank's own time in its blocks), and E for a training cell.
    """
    record: dict[str, Any] = {**asdict(cell), "memory": _without_replay(memory, results)}
    silent = [r for r in range(cell.world_size) if r not in results]
    sigkilled = [r for r in silent if r < len(exits) and exits[r] == -signal.SIGKILL]
    if over_budget:
        record["status"] = "oom"
        record["reason"] = "anonymous memory passed the budget"
    elif sigkilled and not errors:
        record["status"] = "oom"
        record["reason"] = (
            f"rank {sigkilled[0]} got a SIGKILL the bench did not send, under the budget "
            "(the kernel's OOM killer?)"
        )
    elif errors or silent:
        record["status"] = "error"
        record["reason"] = errors[0][-2000:] if errors else _no_report(silent, exits, timeout_s)
    else:
        record["status"] = "ok"
        # what the group delivered: a rank timed on its own clock leaves out its wait for the
        # others, and a sum of each rank's rows/seconds overstated a group at uneven speeds
        window_s = max(r["seconds"] for r in results.values())
        record["samples_per_s"] = sum(r["rows"] for r in results.values()) / window_s
        # the cost: samples per CPU-second of all ranks (and workers), robust to other work
        cpu = sum(r.get("cpu_s", 0.0) for r in results.values())
        if cpu > 0:
            record["samples_per_cpu_s"] = sum(r["rows"] for r in results.values()) / cpu
        record["wait_share"] = sum(
            r["wait_s"] / r.get("busy_s", r["seconds"]) for r in results.values()
        ) / len(results)
        record["ranks"] = [results[r] for r in sorted(results)]
        record["window_s"] = window_s
        record["steps"] = results[min(results)].get("steps", 0)
        # what holding the documents cost the ranks (their workers' memory is in "memory")
        record["strategy_anon"] = sum(r["strategy_anon"] for r in results.values())
        record["store_anon"] = sum(r["store_anon"] for r in results.values())
        # the ranks' interpreters with torch loaded, before any document: what every cell pays
        record["baseline_anon"] = sum(r.get("baseline_anon", 0) for r in results.values())
        record["h2d_bytes_per_step"] = results[min(results)]["h2d_bytes_per_step"]
        if cell.mode == "train":  # E: the same step on device-resident batches / the real loop
            record["efficiency"] = sum(
                r["synthetic_s"] / r["seconds"] for r in results.values()
            ) / len(results)
    return record


def _no_report(silent: list[int], exits: Sequence[int | None], timeout_s: float | None) -> str:
    """Why ranks ``silent`` never reported: the first that died, else the timeout."""
    for r in silent:
        code = exits[r] if r < len(exits) else None
        if code is not None and code < 0:
            return f"rank {r} died by {_signal_name(-code)} without a report"
        if code is not None:
            return f"rank {r} exited with code {code} without a report"
    ranks = f"rank {silent[0]}" if len(silent) == 1 else "ranks " + ", ".join(map(str, silent))
    if timeout_s is not None:
        return f"timed out after {timeout_s:g} s (no report from {ranks})"
    return f"no report from {ranks}"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _without_replay(memory: dict[str, Any], results: dict[int, dict[str, float]]) -> dict[str, Any]:
    """``memory`` with the batches a train cell's ranks kept for the replay (up to
    :data:`~lading.bench.synthetic.KEEP_AT_MOST` each, held from the window to the end) taken
    out of the peak anonymous memory and PSS the report shows, and given as ``replay_kept``.
    The budget's figures (``pss_anon``, which OOM is judged and predicted on) keep them: the
    memory was held."""
    kept = int(sum(r.get("replay_kept_bytes", 0) for r in results.values()))
    if not kept or not memory.get("samples"):
        return memory
    out = {**memory, "replay_kept": kept}
    for key in ("peak_anon", "peak_pss"):
        if key in memory:
            out[key] = max(0, memory[key] - kept)
    return out
