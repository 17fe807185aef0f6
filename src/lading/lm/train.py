"""Training the LSTM language model: hidden state carried across batches, DDP via torchrun.

The proof that continuity matters: with ``break_continuity=True`` the rows of every batch are
shuffled before the step, so the hidden state a row inherits belongs to another stream, which
is what a loader that serves unrelated windows does to an RNN. Validation perplexity is
computed on held-out documents with the state carried through them, on every rank's share.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from lading import checkpoint, ddp
from lading.lm.corpus import TokenCorpus
from lading.lm.loader import LanguageModelLoader
from lading.lm.model import LSTMLanguageModel, State, detach
from lading.world import World


@dataclass
class LMConfig:
    """Everything ``lading train lm`` takes (see ``lading train lm -h``)."""

    corpus: Path
    out: Path
    valid_fraction: float = 0.02
    batch_size: int = 32
    bptt: int = 70
    steps: int | None = None
    epochs: int = 1
    lr: float = 3e-3
    clip: float = 0.25
    emb: int = 256
    hidden: int = 256
    layers: int = 2
    dropout: float = 0.2
    seed: int = 0
    parallel: str = "ddp"
    break_continuity: bool = False
    eval_every: int = 0
    eval_batches: int | None = None
    log_every: int = 50
    checkpoint_every: int = 0
    resume: bool = False
    progress: bool | None = None


def split_documents(count: int, valid_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train, valid) document indices: a fixed random ``valid_fraction`` held out."""
    order = np.random.default_rng([seed, 7]).permutation(count)
    n_valid = max(1, round(count * valid_fraction)) if valid_fraction > 0 else 0
    return np.sort(order[n_valid:]), np.sort(order[:n_valid])


@torch.no_grad()
def evaluate(
    model: nn.Module,
    loader: LanguageModelLoader,
    device: torch.device,
    max_batches: int | None = None,
) -> float:
    """Perplexity over the loader's epoch 0 (state carried), summed over all ranks."""
    model.eval()
    loader.set_epoch(0)
    state: State | None = None
    loss_sum, count = 0.0, 0
    for i, (x, y) in enumerate(loader):
        if max_batches is not None and i >= max_batches:
            break
        logits, state = model(x.to(device), state)
        loss = nn.functional.cross_entropy(
            logits.flatten(0, 1).float(), y.to(device).flatten(), reduction="sum"
        )
        loss_sum += loss.item()
        count += y.numel()
    model.train()
    total, tokens = ddp.sum_over_ranks([loss_sum, float(count)], device)
    return math.exp(total / max(tokens, 1.0))


def train_lm(config: LMConfig) -> dict[str, Any]:
    """Train; return a summary with the validation perplexities (on every rank)."""
    world, device = ddp.setup(config.parallel)
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    corpus = TokenCorpus.open(config.corpus)
    train_docs, valid_docs = split_documents(len(corpus), config.valid_fraction, config.seed)
    data = LanguageModelLoader(
        corpus, config.batch_size, config.bptt, seed=config.seed, documents=train_docs, world=world
    )
    valid = (
        LanguageModelLoader(
            corpus,
            config.batch_size,
            config.bptt,
            bptt_jitter=None,
            shuffle=False,
            documents=valid_docs,
            world=world,
        )
        if len(valid_docs)
        else None
    )
    torch.manual_seed(config.seed)  # the same initial weights on every rank
    model = LSTMLanguageModel(
        corpus.vocab_size, config.emb, config.hidden, config.layers, config.dropout
    ).to(device)
    torch.manual_seed(config.seed + world.rank)  # dropout differs per rank
    net: nn.Module = model
    if torch.distributed.is_initialized():
        net = nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None
        )
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    total = config.steps if config.steps is not None else len(data) * config.epochs
    step = 0
    hidden: State | None = None
    ckpt = out / "checkpoint"
    if config.resume and (ckpt / "meta.json").is_file():
        state = checkpoint.load(ckpt)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step = int(state["step"])
        saved_world = len(state["loaders"])
        # every rank saved the same account of what is left of the epoch, so any of them
        # serves a resume on another number of processes (elastic)
        data.load_state_dict(state["loaders"][world.rank % saved_world])
        if saved_world == world.world_size and state["loaders"][0]["batch_size"] == data.batch_size:
            torch.set_rng_state(state["rng"][world.rank])
            saved = state["hidden"][world.rank]
            hidden = (saved[0].to(device), saved[1].to(device)) if saved is not None else None
        else:  # new streams: no row has a predecessor whose hidden state it could carry
            seed = np.random.SeedSequence([config.seed, world.rank, step]).generate_state(1)
            torch.manual_seed(int(seed[0]))
    log = open(out / "log.jsonl", "a") if world.rank == 0 else None  # noqa: SIM115
    shuffle_rng = np.random.default_rng([config.seed, world.rank, 99])
    evaluations: list[dict[str, float]] = []
    tokens, loss_sum, losses, since = 0, 0.0, 0, time.perf_counter()
    from tqdm.auto import tqdm

    bar = tqdm(
        total=total,
        initial=step,
        unit="step",
        desc="train lm",
        disable=True if world.rank != 0 or config.progress is False else None,
    )
    while step < total:
        for x, y in data:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            if config.break_continuity:  # the ablation: rows inherit another stream's state
                perm = torch.from_numpy(shuffle_rng.permutation(x.shape[0])).to(device)
                x, y = x[perm], y[perm]
            logits, hidden = net(x, detach(hidden) if hidden is not None else None)
            loss = nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten())
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), config.clip)
            optimizer.step()
            step += 1
            tokens += y.numel()
            loss_sum, losses = loss_sum + loss.item(), losses + 1
            bar.update(1)
            if config.checkpoint_every and step % config.checkpoint_every == 0:
                _save(ckpt, step, model, optimizer, data, world, hidden)
            if step % config.log_every == 0 or step >= total:
                seconds = time.perf_counter() - since
                rate = ddp.sum_over_ranks([tokens / max(seconds, 1e-9)], device)[0]
                mean = ddp.mean_over_ranks(loss_sum / max(losses, 1), device)
                record = {"step": step, "loss": mean, "tokens_per_s": rate}
                if valid is not None and config.eval_every and step % config.eval_every == 0:
                    record["valid_ppl"] = evaluate(model, valid, device, config.eval_batches)
                    evaluations.append({"step": step, "valid_ppl": record["valid_ppl"]})
                if log is not None:
                    log.write(json.dumps(record) + "\n")
                    log.flush()
                    bar.set_postfix(loss=f"{mean:.3f}", tok_s=f"{rate:,.0f}")
                tokens, loss_sum, losses, since = 0, 0.0, 0, time.perf_counter()
            if step >= total:
                break
        else:
            data.set_epoch(data.epoch + 1)
            hidden = None  # a new epoch starts new streams
    bar.close()
    final = evaluate(model, valid, device, config.eval_batches) if valid is not None else math.nan
    summary = {
        "steps": step,
        "valid_ppl": final,
        "evaluations": evaluations,
        "world_size": world.world_size,
        "break_continuity": config.break_continuity,
        "train_documents": len(train_docs),
        "valid_documents": len(valid_docs),
        "config": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(config).items()},
    }
    if config.checkpoint_every:
        _save(ckpt, step, model, optimizer, data, world, hidden)
    if world.rank == 0:
        (out / "summary.json").write_text(json.dumps(summary, indent=2))
        if log is not None:
            log.close()
    ddp.barrier()
    return summary


def _save(
    ckpt: Path,
    step: int,
    model: nn.Module,
    optimizer: Any,
    data: LanguageModelLoader,
    world: World,
    hidden: State | None,
) -> None:
    loaders = ddp.gather_objects(data.state_dict())
    rngs = ddp.gather_objects(torch.get_rng_state())
    states = ddp.gather_objects([t.detach().cpu() for t in hidden] if hidden is not None else None)
    if world.rank == 0:
        checkpoint.save(
            {
                "step": step,
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "loaders": loaders,
                "rng": rngs,
                "hidden": states,
            },
            ckpt,
        )
    ddp.barrier()
