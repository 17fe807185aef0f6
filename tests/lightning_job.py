"""One Lightning ``fit`` of a tiny regression, fed by lading or by Lightning's own route.

``route="lading"``: :class:`lading.integrations.lightning.LadingDataModule` over
``lading.loader``. ``route="stock"``: a torch ``DataLoader`` that Lightning shards itself with
its ``DistributedSampler`` (``use_distributed_sampler=True``; Lightning then shuffles the
training data whatever the DataLoader said), or with ``sampler=True`` the user's own
``DistributedSampler`` (``use_distributed_sampler=False``). Each rank writes
``rank{R}.json``: the sample ids of every batch its ``training_step`` saw (by epoch), the loss of
every batch, the optimizer steps done, and the weights at the end.

Run in-process (``fit(config)``) for one process, or under torchrun for several:
    python -m torch.distributed.run --nproc_per_node 2 tests/lightning_job.py CONFIG.json
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, DistributedSampler

import lading
from lading.integrations.lightning import LadingDataModule
from lading.world import World


class Items(torch.utils.data.Dataset[tuple[int, torch.Tensor, torch.Tensor]]):
    """Sample ``i``: its id, 4 features and a target, the same in every process."""

    def __init__(self, n: int) -> None:
        g = torch.Generator().manual_seed(1234)
        self.x = torch.randn(n, 4, generator=g)
        self.y = self.x @ torch.tensor([1.0, -2.0, 0.5, 3.0]) + 0.1 * torch.randn(n, generator=g)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[int, torch.Tensor, torch.Tensor]:
        return i, self.x[i], self.y[i]


class Regression(pl.LightningModule):
    """A linear model that records what each step was given."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Linear(4, 1)
        self.seen: list[list[Any]] = []  # [epoch, ids, loss] per batch
        self.validated: list[list[Any]] = []  # [epoch, ids] per validation batch

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        ids, x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x).squeeze(-1), y)
        self.seen.append([self.current_epoch, ids.tolist(), loss.item()])
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        ids, x, y = batch
        self.validated.append([self.current_epoch, ids.tolist()])
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x).squeeze(-1), y))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def datamodule(config: dict[str, Any]) -> pl.LightningDataModule:
    data = Items(config["n"])
    size, shuffle = config["batch_size"], config["shuffle"]
    if config["route"] == "stock":
        return _Stock(data, size, shuffle, config.get("sampler", False))

    def train(world: World) -> Any:
        return lading.loader(
            data, size, shuffle=shuffle, world=world, num_workers=config.get("workers", 0)
        )

    def val(world: World) -> Any:
        return lading.loader(data, 2 * size, shuffle=False, world=world)

    return LadingDataModule(train=train, val=val if config.get("val") else None)


class _Stock(pl.LightningDataModule):
    """Lightning's own route: a plain DataLoader; Lightning adds its DistributedSampler."""

    def __init__(self, data: Items, size: int, shuffle: bool, sampler: bool) -> None:
        super().__init__()
        self.data, self.size, self.shuffle, self.sampler = data, size, shuffle, sampler

    def train_dataloader(self) -> DataLoader[Any]:
        if self.sampler:  # the user's own DistributedSampler (use_distributed_sampler=False)
            own = DistributedSampler(self.data, shuffle=self.shuffle)
            return DataLoader(self.data, batch_size=self.size, sampler=own)
        return DataLoader(self.data, batch_size=self.size, shuffle=self.shuffle)


def fit(config: dict[str, Any]) -> dict[str, Any]:
    """Train as ``config`` says; return (and write, when ``out`` is set) this rank's record."""
    world = int(config.get("world", 1))
    callbacks: list[Any] = []
    if config.get("checkpoint_every"):
        callbacks.append(
            pl.callbacks.ModelCheckpoint(
                dirpath=config["checkpoints"],
                every_n_train_steps=config["checkpoint_every"],
                save_top_k=-1,
                filename="{step}",
            )
        )
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=world,
        strategy="ddp" if world > 1 else "auto",
        max_epochs=config["epochs"],
        accumulate_grad_batches=config.get("accumulate", 1),
        limit_train_batches=config.get("limit_train_batches"),
        use_distributed_sampler=config.get("use_distributed_sampler", True),
        num_sanity_val_steps=0,
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
        enable_checkpointing=bool(callbacks),
        callbacks=callbacks,
    )
    model = Regression()
    trainer.fit(model, datamodule=datamodule(config), ckpt_path=config.get("resume"))
    record = {
        "rank": trainer.global_rank,
        "seen": model.seen,
        "global_step": trainer.global_step,
        "validated": model.validated,
        "weights": torch.cat([p.detach().flatten() for p in model.parameters()]).tolist(),
    }
    if config.get("out"):
        path = Path(config["out"]) / f"rank{trainer.global_rank}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record))
    return record


if __name__ == "__main__":
    fit(json.loads(Path(sys.argv[1]).read_text()))
    # Lightning starts the gloo group and leaves it up; under torch 2.13 a group alive at
    # interpreter exit can abort the process (pytorch#190489), so the script ends it.
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    # and leaves without the interpreter's finalization: the framework still holds the group
    # object, and gloo's threads torn down there abort the process now and then ("terminate
    # called without an active exception", SIGABRT after every result was written: CI saw it
    # once in ~40 runs; pytorch#179291). The results are on disk; nothing else is left to do.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
