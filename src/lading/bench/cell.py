"""One cell of the study: a fresh group of processes reading documents one way, measured.

Every rank opens its document strategy, builds the training groups and a DDP loader, and runs
``warmup + steps`` iterations of the whole loop: waiting for the batch, copying it to the
device, and (in train mode) a forward/backward/optimizer step of a cross-encoder under DDP.
Only the iterations after the warm-up are timed. The launcher watches the memory of every rank
and DataLoader worker and stops the cell if it passes the budget.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import socket
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

from lading.bench.data import BenchData
from lading.bench.monitor import MemoryMonitor

MODES: tuple[str, ...] = ("loader", "train")


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
    """What every cell of a grid shares."""

    steps: int = 30
    warmup: int = 5
    batch_size: int = 8
    group_size: int = 4
    max_length: int = 128
    model: str = "tiny"
    sampling: str = "random"
    seed: int = 0
    timeout_s: float = 900.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def open_strategy(strategy: str, data: BenchData) -> Any:
    """The document store a strategy reads from, opened in the calling process."""
    from lading.stores import InMemoryStore, IrDatasetsStore, OffsetStore, open_store

    if strategy == "memory":
        return InMemoryStore.from_source(data.corpus)  # the study: every rank loads a dict
    if strategy == "offsets":
        return OffsetStore(data.offsets)
    if strategy in ("packed", "packed-text"):  # packed-text: the same store, read as text
        return open_store(data.packed)
    if strategy == "irds":
        assert data.irds_tsv is not None
        return IrDatasetsStore.from_tsv(data.irds_tsv)
    raise ValueError(f"unknown strategy {strategy!r}")


def rank_main(
    rank: int, cell: Cell, settings: Settings, data: BenchData, port: int, out: Any
) -> None:
    """Entry point of one rank (spawned)."""
    try:
        out.put((rank, "ok", _run_rank(rank, cell, settings, data, port)))
    except BaseException:
        out.put((rank, "error", traceback.format_exc()))


def _run_rank(
    rank: int, cell: Cell, settings: Settings, data: BenchData, port: int
) -> dict[str, float]:
    import torch
    import torch.distributed as dist

    from lading.dataloader import loader as make_loader
    from lading.ir import (
        CrossEncoder,
        CrossEncoderCollator,
        TrainingGroups,
        read_qrels,
        read_queries,
        read_run,
    )
    from lading.ir.model import ranking_loss, tiny_bert_config
    from lading.tokens import load_tokenizer
    from lading.world import World

    cuda = torch.cuda.is_available()
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(cell.world_size),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(cell.world_size),
    )
    dist.init_process_group(
        "nccl" if cuda else "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=cell.world_size,
    )
    device = torch.device("cuda", rank % torch.cuda.device_count()) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    from lading.procmem import process_memory

    anon_before = process_memory().anon  # torch and friends loaded, no documents yet
    store = open_strategy(cell.strategy, data)
    store_anon = process_memory().anon - anon_before  # the store alone: a dict, or ~nothing
    negatives = read_run(data.negatives) if data.negatives else None
    groups = TrainingGroups(
        store,
        read_queries(data.queries),
        read_qrels(data.qrels),
        negatives,
        group_size=settings.group_size,
        sampling=settings.sampling,
        seed=settings.seed,
        on_missing="skip",
    )
    tokenizer = load_tokenizer(data.tokenizer)
    collate = CrossEncoderCollator(
        store, tokenizer, max_length=settings.max_length, use_tokens=cell.strategy == "packed"
    )
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
        world=World.detect(),
    )
    model: Any = None
    if cell.mode == "train":
        torch.manual_seed(settings.seed)
        if settings.model == "tiny":
            model = CrossEncoder.from_config(tiny_bert_config(tokenizer.get_vocab_size()))
        else:
            model = CrossEncoder.from_pretrained(settings.model)
        model = model.to(device)
        if cell.parallel == "dp" and cuda:
            model = torch.nn.DataParallel(model)
        elif cell.world_size > 1:
            model = torch.nn.parallel.DistributedDataParallel(
                model, device_ids=[device.index] if cuda else None
            )
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    total = settings.warmup + settings.steps
    rows = 0
    waited = 0.0
    started = 0.0
    step = 0
    epoch = 0
    dist.barrier()
    while step < total:
        loader.set_epoch(epoch)
        before = time.perf_counter()
        for batch in loader:
            got = time.perf_counter()
            if step == settings.warmup:
                if cuda:
                    torch.cuda.synchronize()
                dist.barrier()  # every rank starts the clock together
                started = time.perf_counter()
                before = got = started
                rows, waited = 0, 0.0
            waited += got - before
            inputs = {
                k: batch[k].to(device, non_blocking=True)
                for k in ("input_ids", "attention_mask", "token_type_ids")
            }
            if model is not None:
                logits = model(**inputs)
                loss = ranking_loss(logits.float(), batch["labels"].to(device), batch["group_size"])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
            elif cuda:
                torch.cuda.synchronize()
            rows += int(inputs["input_ids"].shape[0])
            step += 1
            if step >= total:
                break
            before = time.perf_counter()
        epoch += 1
    if cuda:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    dist.barrier()
    dist.destroy_process_group()
    anon_after = process_memory().anon
    return {
        "rows": rows,
        "seconds": seconds,
        "wait_s": waited,
        "strategy_anon": anon_after - anon_before,
        "store_anon": store_anon,
    }


def _kill_tree(pids: list[int]) -> None:
    for pid in pids:
        try:
            parent = psutil.Process(pid)
            for child in parent.children(recursive=True):
                child.kill()
            parent.kill()
        except psutil.Error:
            continue


def run_cell(cell: Cell, settings: Settings, data: BenchData, budget: int | None) -> dict[str, Any]:
    """Run ``cell`` in fresh processes; its record (status ok, oom or error)."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = _free_port()
    procs = [
        ctx.Process(target=rank_main, args=(r, cell, settings, data, port, out))
        for r in range(cell.world_size)
    ]
    for p in procs:
        p.start()
    pids = [p.pid for p in procs if p.pid is not None]
    monitor = MemoryMonitor(pids, budget=budget, on_budget=lambda: _kill_tree(pids)).start()
    results: dict[int, Any] = {}
    errors: list[str] = []
    deadline = time.monotonic() + settings.timeout_s
    while len(results) + len(errors) < cell.world_size and time.monotonic() < deadline:
        try:
            rank, status, value = out.get(timeout=0.5)
        except Exception:  # queue.Empty: check whether a rank died without reporting
            if any(p.exitcode not in (None, 0) for p in procs) and not out.qsize():
                break
            continue
        if status == "ok":
            results[rank] = value
        else:
            errors.append(value)
    monitor.stop()
    _kill_tree(pids)
    for p in procs:
        p.join(timeout=10)
    record: dict[str, Any] = {**asdict(cell), "memory": monitor.summary()}
    killed = any(p.exitcode is not None and p.exitcode < 0 for p in procs)
    if monitor.over_budget or (killed and not errors and len(results) < cell.world_size):
        record["status"] = "oom"
        record["reason"] = (
            "anonymous memory passed the budget"
            if monitor.over_budget
            else "a process was killed (out of memory?)"
        )
    elif errors or len(results) < cell.world_size:
        record["status"] = "error"
        record["reason"] = errors[0][-2000:] if errors else "timed out or died without a report"
    else:
        record["status"] = "ok"
        record["samples_per_s"] = sum(r["rows"] / r["seconds"] for r in results.values())
        record["wait_share"] = sum(r["wait_s"] / r["seconds"] for r in results.values()) / len(
            results
        )
        record["ranks"] = [results[r] for r in sorted(results)]
        # what holding the documents cost the ranks (their workers' memory is in "memory")
        record["strategy_anon"] = sum(r["strategy_anon"] for r in results.values())
        record["store_anon"] = sum(r["store_anon"] for r in results.values())
    return record


def data_from_dict(values: dict[str, str | None]) -> BenchData:
    """Inverse of :meth:`BenchData.as_dict` (for results files)."""
    return BenchData(**{k: Path(v) if v is not None else None for k, v in values.items()})  # type: ignore[arg-type]
