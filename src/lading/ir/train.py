"""Training a cross-encoder with DDP, DP or one process: the study's task, measured honestly.

Launch with ``torchrun --nproc_per_node N -m lading train cross-encoder …`` (NCCL on GPUs, gloo
on CPUs; multi-node through torchrun's own flags) or as one process. Throughput counts the whole
loop: waiting for the batch, the host-to-device copy, and the step. Checkpoints hold model,
optimizer, scheduler, loader position and RNG state; ``resume=True`` continues exactly.
"""

from __future__ import annotations

import itertools
import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from lading import checkpoint, ddp
from lading.dataloader import ResumableLoader, loader
from lading.ir.collate import CrossEncoderCollator
from lading.ir.groups import TrainingGroups
from lading.ir.inputs import read_qrels, read_queries, read_run
from lading.ir.model import CrossEncoder, ranking_loss, tiny_bert_config
from lading.procmem import tree_memory
from lading.stores import build_store, open_store
from lading.stores.base import DocStore
from lading.tokens import save_tokenizer, train_tokenizer
from lading.world import World

PRECISION: tuple[str, ...] = ("bf16", "fp16", "fp32")


@dataclass
class TrainConfig:
    """Everything ``lading train cross-encoder`` takes (see ``lading train cross-encoder -h``)."""

    out: Path
    queries: Path
    qrels: Path
    store: Path | None = None
    corpus: Path | None = None
    negatives: Path | None = None
    model: str = "tiny"
    tokenizer: str | None = None
    group_size: int = 8
    batch_size: int = 8
    steps: int | None = None
    epochs: int = 1
    lr: float = 2e-5
    warmup: float = 0.1
    weight_decay: float = 0.01
    precision: str = "fp32"
    parallel: str = "ddp"
    loss: str = "bce"
    sampling: str = "run"
    depth: int = 100
    min_relevance: int = 1
    max_length: int = 512
    max_query_length: int = 64
    num_workers: int = 0
    pin_memory: bool | None = None
    seed: int = 0
    checkpoint_every: int = 0
    log_every: int = 10
    resume: bool = False
    trace: bool = False
    use_tokens: bool | None = None
    progress: bool | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _tiny_tokenizer(texts: list[str], path: Path, world: World) -> Path:
    """Rank 0 trains a BERT-style WordPiece tokenizer on ``texts`` into ``path``; all wait."""
    if world.rank == 0 and not path.is_file():
        save_tokenizer(train_tokenizer(texts, "wordpiece", 8000), path)
    ddp.barrier()
    return path


def _sample_texts(store: DocStore, limit: int = 20_000) -> list[str]:
    ids = store.ids()
    step = max(1, len(ids) // limit)
    return store.get_many(ids[::step][:limit])


def prepare(config: TrainConfig, world: World) -> tuple[DocStore, Any, CrossEncoder]:
    """Open (or build) the store, and make the tokenizer and the model."""
    out = Path(config.out)
    if config.corpus is None and config.store is None:
        raise ValueError("pass --store (a built store) or --corpus (a file to build one from)")
    tokenizer: Any = config.tokenizer
    if config.model != "tiny" and tokenizer is None:
        tokenizer = config.model  # a local HF model folder holds tokenizer.json
    if config.corpus is not None:
        if tokenizer is None:  # tiny: learn a vocabulary from the corpus head, offline
            from lading.sources import read_records

            head = itertools.islice(read_records(config.corpus), 20_000)
            texts = [r.text for r in head] if world.rank == 0 else []
            tokenizer = _tiny_tokenizer(texts, out / "tokenizer" / "tokenizer.json", world)
        store: DocStore = build_store(
            config.corpus,
            out / "store",
            tokenizer=tokenizer,
            max_length=config.max_length,
            progress=False,
        )
    else:
        assert config.store is not None
        store = open_store(config.store)
        if tokenizer is None:
            if store.has_tokens:
                tokenizer = store.tokenizer_path
            else:
                tokenizer = _tiny_tokenizer(
                    _sample_texts(store) if world.rank == 0 else [],
                    out / "tokenizer" / "tokenizer.json",
                    world,
                )
    from lading.tokens import load_tokenizer

    tok = load_tokenizer(tokenizer)
    if config.model == "tiny":
        torch.manual_seed(config.seed)  # the same initial weights on every rank
        model = CrossEncoder.from_config(
            tiny_bert_config(tok.get_vocab_size(), max(512, config.max_length))
        )
    else:
        model = CrossEncoder.from_pretrained(config.model)
    return store, tok, model


def _linear_schedule(total: int, warmup: float) -> Any:
    warm = max(1, int(total * warmup))

    def factor(step: int) -> float:
        if step < warm:
            return (step + 1) / warm
        return max(0.0, (total - step) / max(1, total - warm))

    return factor


def train(config: TrainConfig) -> dict[str, Any]:
    """Run training; return a summary (steps, final loss, samples/s, memory) on every rank."""
    if config.precision not in PRECISION:
        raise ValueError(f"unknown precision {config.precision!r}; choose from {sorted(PRECISION)}")
    world, device = ddp.setup(config.parallel)
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    store, tok, model = prepare(config, world)
    torch.manual_seed(config.seed + world.rank)  # dropout: reproducible, different per rank
    queries = read_queries(config.queries)
    qrels = read_qrels(config.qrels)
    negatives = read_run(config.negatives) if config.negatives else None
    groups = TrainingGroups(
        store,
        queries,
        qrels,
        negatives,
        group_size=config.group_size,
        sampling=config.sampling,
        depth=config.depth,
        min_relevance=config.min_relevance,
        seed=config.seed,
        on_missing="skip",
    )
    collate = CrossEncoderCollator(
        store, tok, config.max_length, config.max_query_length, use_tokens=config.use_tokens
    )
    pin = device.type == "cuda" if config.pin_memory is None else config.pin_memory
    data = loader(
        groups,
        config.batch_size,
        collate,
        num_workers=config.num_workers,
        pin_memory=pin,
        shuffle=True,
        drop_last=False,
        seed=config.seed,
        world=world,
    )
    per_epoch = len(data)
    total = config.steps if config.steps is not None else per_epoch * config.epochs
    model.to(device)
    net: nn.Module = model
    if config.parallel == "ddp" and dist.is_initialized():
        ids = [device.index] if device.type == "cuda" else None
        net = nn.parallel.DistributedDataParallel(model, device_ids=ids)
    elif config.parallel == "dp" and torch.cuda.device_count() > 1:
        net = nn.DataParallel(model)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=config.lr, weight_decay=config.weight_decay
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _linear_schedule(total, config.warmup))
    scaler = torch.amp.GradScaler(
        "cuda", enabled=config.precision == "fp16" and device.type == "cuda"
    )
    step = 0
    ckpt_dir = out / "checkpoint"
    if config.resume and (ckpt_dir / "meta.json").is_file():
        step = _restore(ckpt_dir, model, optimizer, scheduler, data, world, config.seed)
    else:
        data.set_epoch(0)
    trace = open(out / f"trace-rank{world.rank}.jsonl", "a") if config.trace else None  # noqa: SIM115
    summary = _loop(
        config,
        net,
        model,
        optimizer,
        scheduler,
        scaler,
        data,
        device,
        world,
        step,
        total,
        trace,
        ckpt_dir,
    )
    if trace is not None:
        trace.close()
    if world.rank == 0:
        model.save(out / "model")
        tok.save(str(out / "model" / "tokenizer.json"))
        (out / "summary.json").write_text(json.dumps(summary, indent=2))
    ddp.barrier()
    return summary


def _restore(
    ckpt_dir: Path,
    model: CrossEncoder,
    optimizer: Any,
    scheduler: Any,
    data: ResumableLoader,
    world: World,
    seed: int,
) -> int:
    state = checkpoint.load(ckpt_dir)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    saved_world = len(state["loaders"])
    # every rank saved the same loader position (it counts samples of the global order), so
    # any of them serves a run on another number of processes: an elastic resume
    data.load_state_dict(state["loaders"][world.rank % saved_world])
    step = int(state["step"])
    if saved_world == world.world_size:
        torch.set_rng_state(state["rng"][world.rank])
    else:  # no saved dropout stream for this rank: a fresh one, still reproducible
        torch.manual_seed(
            int(np.random.SeedSequence([seed, world.rank, step]).generate_state(1)[0])
        )
    return step


def _save(
    ckpt_dir: Path,
    step: int,
    model: CrossEncoder,
    optimizer: Any,
    scheduler: Any,
    data: ResumableLoader,
    world: World,
) -> None:
    loaders = ddp.gather_objects(data.state_dict())
    rngs = ddp.gather_objects(torch.get_rng_state())
    if world.rank == 0:
        checkpoint.save(
            {
                "step": step,
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(),
                "loaders": loaders,
                "rng": rngs,
            },
            ckpt_dir,
        )
    ddp.barrier()


def _loop(
    config: TrainConfig,
    net: nn.Module,
    model: CrossEncoder,
    optimizer: Any,
    scheduler: Any,
    scaler: Any,
    data: ResumableLoader,
    device: torch.device,
    world: World,
    step: int,
    total: int,
    trace: Any,
    ckpt_dir: Path,
) -> dict[str, Any]:
    from tqdm.auto import tqdm

    show = world.rank == 0 and config.progress is not False
    bar = tqdm(
        total=total,
        initial=step,
        disable=None if show else True,
        unit="step",
        desc="train cross-encoder",
    )
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[config.precision]
    log = open(Path(config.out) / "log.jsonl", "a") if world.rank == 0 else None  # noqa: SIM115
    rows_seen, loss_sum, losses = 0, 0.0, 0
    last_loss = math.nan
    window_start = time.perf_counter()
    model.train()
    while step < total:
        waited = time.perf_counter()
        for batch in data:
            fetch_s = time.perf_counter() - waited
            inputs = {
                k: batch[k].to(device, non_blocking=True)
                for k in ("input_ids", "attention_mask", "token_type_ids")
            }
            labels = batch["labels"].to(device, non_blocking=True)
            with torch.autocast(device.type, dtype=dtype, enabled=config.precision != "fp32"):
                logits = net(**inputs)
                loss = ranking_loss(logits.float(), labels, batch["group_size"], config.loss)
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            scheduler.step()
            step += 1
            last_loss = float(loss.item())
            rows_seen += int(labels.shape[0])
            loss_sum, losses = loss_sum + last_loss, losses + 1
            if trace is not None:
                trace.write(
                    json.dumps(
                        {
                            "step": step,
                            "epoch": data.epoch,
                            "loss": last_loss,
                            "rows": int(labels.shape[0]),
                            "pairs": batch["pairs"],
                            "input_sum": int(inputs["input_ids"].sum()),
                            "fetch_s": fetch_s,
                        }
                    )
                    + "\n"
                )
                trace.flush()  # a killed run leaves every finished step on disk
            bar.update(1)
            if config.checkpoint_every and step % config.checkpoint_every == 0:
                _save(ckpt_dir, step, model, optimizer, scheduler, data, world)
            if step % config.log_every == 0 or step >= total:
                record = _log_record(
                    step, rows_seen, loss_sum / max(losses, 1), window_start, device, world
                )
                if log is not None:
                    log.write(json.dumps(record) + "\n")
                    log.flush()
                    bar.set_postfix(
                        loss=f"{record['loss']:.4f}", samples_s=f"{record['samples_per_s']:.1f}"
                    )
                rows_seen, loss_sum, losses = 0, 0.0, 0
                window_start = time.perf_counter()
            if step >= total:
                break
            waited = time.perf_counter()
        else:
            data.set_epoch(data.epoch + 1)
    bar.close()
    if config.checkpoint_every:
        _save(ckpt_dir, step, model, optimizer, scheduler, data, world)
    if log is not None:
        log.close()
    return {
        "steps": step,
        "last_loss": last_loss,
        "epoch": data.epoch,
        "world_size": world.world_size,
        "config": _jsonable(asdict(config)),
    }


def _log_record(
    step: int, rows: int, loss: float, since: float, device: torch.device, world: World
) -> dict[str, Any]:
    seconds = time.perf_counter() - since
    rate = rows / seconds if seconds > 0 else 0.0
    total_rate = ddp.mean_over_ranks(rate, device) * world.world_size  # summed over ranks
    mean_loss = ddp.mean_over_ranks(loss, device)
    memory = ddp.gather_objects([m.as_dict() for m in tree_memory()])
    return {
        "step": step,
        "loss": mean_loss,
        "samples_per_s": total_rate,
        "memory": {f"rank{r}": procs for r, procs in enumerate(memory)},
        "anon_bytes_total": sum(p["anon"] for procs in memory for p in procs),
        "pss_bytes_total": sum(p["pss"] for procs in memory for p in procs),
    }


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value
