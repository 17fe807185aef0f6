"""Training the next-item transformer on parquet sessions with DDP (torchrun), DP or one process.

The default protocol follows Transformers4Rec's YOOCHOOSE example: train on the sessions of
days 178-181, evaluate on day 182. With ``parallel="dp"`` one process drives every GPU through
``nn.DataParallel`` and ``batch_size`` is the total batch, as in Transformers4Rec; with DDP it is
the batch of each rank, so the effective batch grows with the world size: retune the learning
rate when changing either.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from lading.errors import LadingError
from lading.remote.objects import is_remote
from lading.remote.settings import RemoteSettings
from lading.sources.tables import import_pyarrow
from lading.tabular.dataset import PartitionedParquet
from lading.tabular.remote import RemoteParquet
from lading.tabular.remote_files import split_root
from lading.tabular.sessions import (
    NextItemTransformer,
    last_item_ranks,
    metrics,
    next_item_loss,
    popularity_ranks,
)
from lading.train import LoopConfig, StepResult, Trainer, TrainingTask, ddp, jsonable, write_summary
from lading.train.config import RunConfig, data_location
from lading.world import World

ITEMS = "item_id-list_seq"


def true_lengths(items: torch.Tensor) -> torch.Tensor:
    """Items per session, not counting the 0s the T4R preprocessing pads lists with.

    Item id 0 is padding in those files (lists are right-padded to 20), so a list's length in
    the file is not the session's length.
    """
    return (items > 0).sum(dim=1)


@dataclass(kw_only=True)
class SessionsConfig(RunConfig):
    """Everything ``lading train sessions`` takes (see ``lading train sessions -h``).

    ``data`` is a folder or an object-store prefix (``"s3://bucket/yoochoose"``, a string:
    ``Path()`` merges a URL's slashes) holding ``<day>/<split>.parquet``; objects are read by
    ranged GETs through the node cache every rank of the node shares, with
    :func:`lading.open_store`'s defaults (``remote/`` in ``$LADING_CACHE``, capped at
    ``$LADING_REMOTE_CACHE_BYTES``).
    """

    data: Path | str
    train_days: list[int] = field(default_factory=lambda: [178, 179, 180, 181])
    eval_day: int = 182
    column: str = ITEMS
    max_len: int = 20
    dim: int = 64
    layers: int = 2
    heads: int = 2
    positions: int = 4
    # RunConfig fields with this workload's defaults
    batch_size: int = 256
    epochs: int = 3

    def __post_init__(self) -> None:
        self.data = data_location(self.data, "data")


class MissingDaysError(LadingError, FileNotFoundError):
    """Day files ``--data`` should hold and does not (a folder or an object-store prefix)."""


def day_files(data: Path | str, days: list[int], splits: tuple[str, ...]) -> list[Path | str]:
    """``data/<day>/<split>.parquet`` of every day and split: local files, or the objects
    below an object-store prefix (``s3://b/yoochoose`` -> ``s3://b/yoochoose/178/train.parquet``,
    checked by one LIST of the prefix).

    Raises:
        MissingDaysError: naming every file or object missing and the layout expected.
        RemoteNotSupportedError, RemoteReadError: a scheme lading cannot reach, a LIST failed.
    """
    files: list[Path | str]
    if is_remote(data):
        prefix = os.fspath(data).rstrip("/")
        files = [f"{prefix}/{day}/{split}.parquet" for day in days for split in splits]
        present = _objects_below(prefix)
        missing = [str(f) for f in files if f not in present]
    else:
        files = [Path(data) / str(day) / f"{split}.parquet" for day in days for split in splits]
        missing = [str(f) for f in files if not Path(f).is_file()]
    if missing:
        raise MissingDaysError(
            f"missing {missing}; --data must hold one folder per day with "
            f"{', '.join(s + '.parquet' for s in splits)}"
        )
    return files


def _objects_below(prefix: str) -> set[str]:
    """The URLs of every object below ``prefix`` (one LIST, retried and timed out as the
    node cache's reads are; the client of the environment's remote settings)."""
    root, key = split_root(prefix)
    fetcher = RemoteSettings.from_environment().fetcher(root)
    try:
        return {f"{root}/{name}" for name in fetcher.list(key)}
    finally:
        fetcher.close()


def item_count(files: Sequence[Path | str], column: str) -> int:
    """Largest item id in ``files`` plus one (id 0 is padding)."""
    import pyarrow.compute as pc

    top = 0
    for table in _column_tables(files, column):
        values = table.column(column).combine_chunks().flatten()
        top = max(top, int(pc.max(values).as_py() or 0))
    return top + 1


def _column_tables(files: Sequence[Path | str], column: str) -> Iterator[Any]:
    """``column`` of each local file, or of each row group of each object (ranged GETs
    through the node cache: every rank reads the same, so the node fetches it once)."""
    import pyarrow.parquet as pq

    if not files or not is_remote(files[0]):
        for file in files:
            yield pq.read_table(file, columns=[column])
        return
    remote = RemoteParquet.open([os.fspath(f) for f in files], RemoteSettings.of(None, None))
    try:
        for url in remote.urls:
            for group in range(remote.metadata(url).num_row_groups):
                yield remote.read_group(url, group, [column])
    finally:
        remote.close()


def evaluate(
    model: NextItemTransformer,
    files: list[Path | str],
    config: SessionsConfig,
    device: torch.device,
) -> tuple[np.ndarray, np.ndarray]:
    """Ranks and true last items of every evaluation session (sessions of length >= 2)."""
    model.eval()
    ranks, last = [], []
    with torch.no_grad():
        for batch in _whole(files, config, 1024):
            items = batch[config.column]
            lengths = torch.minimum(batch[f"{config.column}_lengths"], true_lengths(items))
            keep = lengths >= 2
            items, lengths = items[keep].to(device), lengths[keep].to(device)
            if len(items):
                ranks.append(last_item_ranks(model, items, lengths).cpu().numpy())
                rows = torch.arange(len(items), device=device)
                last.append(items[rows, lengths - 1].cpu().numpy())
    model.train()
    return np.concatenate(ranks), np.concatenate(last)


def _whole(files: list[Path | str], config: SessionsConfig, batch_size: int) -> PartitionedParquet:
    """Every session of ``files`` in file order, in one process."""
    return PartitionedParquet(
        files,
        columns=[config.column],
        batch_size=batch_size,
        list_columns={config.column: config.max_len},
        shuffle=False,
        world=World(),
    )


class SessionsStep(TrainingTask):
    """A next-item step: sessions of two items or more, loss at (some) positions of each."""

    def __init__(
        self,
        model: NextItemTransformer,
        net: nn.Module,
        config: SessionsConfig,
        device: torch.device,
    ) -> None:
        self.model, self.net, self.config, self.device = model, net, config, device

    def step(self, batch: dict[str, torch.Tensor]) -> StepResult:
        column = self.config.column
        items = batch[column].to(self.device, non_blocking=True)
        lengths = torch.minimum(batch[f"{column}_lengths"].to(self.device), true_lengths(items))
        keep = lengths >= 2  # a session of one item has nothing to predict
        items, lengths = items[keep], lengths[keep]
        scores = self.net(items, lengths)
        loss = next_item_loss(self.model, scores, items, lengths, self.config.positions or None)
        return StepResult(loss, len(items))


def train_sessions(config: SessionsConfig) -> dict[str, Any]:
    """Train, evaluate on the evaluation day, compare with most-popular; return the summary."""
    import_pyarrow()  # before any process starts: one line naming the extra
    return ddp.run(config, functools.partial(_train_sessions, config))


def _train_sessions(
    config: SessionsConfig, world: World, device: torch.device, out: Path
) -> dict[str, Any]:
    train_files = day_files(config.data, config.train_days, ("train",))
    eval_files = day_files(config.data, [config.eval_day], ("train", "valid", "test"))
    num_items = item_count(train_files + eval_files, config.column)
    data = PartitionedParquet(
        train_files,
        config.batch_size,
        columns=[config.column],
        list_columns={config.column: config.max_len},
        seed=config.seed,
        world=world,
        num_workers=config.num_workers,
        pin_memory=device.type == "cuda",
    )
    torch.manual_seed(config.seed)  # the same initial weights on every rank
    model = NextItemTransformer(
        num_items, config.dim, config.layers, config.heads, config.max_len
    ).to(device)
    total = config.steps if config.steps is not None else len(data) * config.epochs
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    result = Trainer(
        SessionsStep(model, ddp.wrap(model, config.parallel, device), config, device),
        data,
        LoopConfig.of(config, total, desc="train sessions", rate_key="sessions_per_s"),
        world,
        device,
        model,
        optimizer,
    ).run()
    summary: dict[str, Any] = {
        "steps": result.steps,
        "epochs": result.epoch + 1,  # the epoch the last step was in, counted from 1
        "world_size": world.world_size,
        "parallel": config.parallel,
        "num_items": num_items,
        "effective_batch": config.batch_size * world.world_size,
    }
    if world.rank == 0:
        ranks, last = evaluate(model, eval_files, config, device)
        train_seqs = [b[config.column].numpy() for b in _whole(train_files, config, 4096)]
        summary["model"] = metrics(ranks)
        summary["most_popular"] = metrics(popularity_ranks(train_seqs, last, num_items))
        summary["config"] = jsonable(asdict(config))
    write_summary(out, summary, world)
    return summary
