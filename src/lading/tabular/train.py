"""Training the next-item transformer on parquet sessions with DDP (torchrun), DP or one process.

The default protocol follows Transformers4Rec's YOOCHOOSE example: train on the sessions of
days 178-181, evaluate on day 182. With ``parallel="dp"`` one process drives every GPU through
``nn.DataParallel`` and ``batch_size`` is the total batch, as in Transformers4Rec; with DDP it is
the batch of each rank, so the effective batch grows with the world size: retune the learning
rate when changing either.

The T4R files pad every item list with 0s on the right to 20 items, so the list in the file is
not the session: the loader reads the lists whole (as wide as the longest, :func:`item_stats`)
and this trainer, which knows 0 is the padding id of these files, strips it and keeps the
``max_len`` most recent real items (:func:`recent_items`). The loader keeps a list's last
``max_len`` entries and cannot tell padding from an item; cut there, a session shorter than
the file's width lost its items to the padding (at ``--max-len 5``, 435 of day 178's first
1,500 sessions trained instead of 1,500).
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
from lading.train.weights import check_replaceable, load_weights, model_dir, save_model
from lading.world import World

ITEMS = "item_id-list_seq"


def recent_items(items: torch.Tensor, max_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(items [rows, max_len], lengths [rows])``: each row's last ``max_len`` non-zero items
    in their order, right-padded with 0.

    Item id 0 is padding in the T4R files (lists are right-padded to 20), wherever the loader
    put it: a list's length in the file is not the session's length, and its last entries are
    padding, not the most recent items.
    """
    real = items != 0
    after = real.flip(1).cumsum(1).flip(1)  # real items at or after each position
    lengths = real.sum(dim=1).clamp(max=max_len)
    kept = real & (after <= max_len)
    rows, cols = kept.nonzero(as_tuple=True)
    out = torch.zeros(items.shape[0], max_len, dtype=items.dtype, device=items.device)
    out[rows, lengths[rows] - after[rows, cols]] = items[rows, cols]
    return out, lengths


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
        days = ",".join(str(d) for d in self.train_days)
        if self.eval_day in self.train_days:  # (keyword= spellings: the CLI names its flags)
            raise ValueError(
                f"the evaluation day {self.eval_day} (eval_day={self.eval_day}) is also a "
                f"training day (train_days= {days}): the model would be scored on sessions "
                f"it trained on; drop {self.eval_day} from train_days= or evaluate on "
                "another day"
            )
        twice = sorted({d for d in self.train_days if self.train_days.count(d) > 1})
        if twice:
            raise ValueError(
                f"train_days= {days} names day {twice[0]} twice: its sessions would be "
                "trained on twice an epoch; name each day once (raise epochs= for more passes)"
            )


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


class ColumnError(LadingError, ValueError):
    """A ``--column`` the train files do not hold, or that is not a list of integers (item
    ids): named with the file, what the column is and the columns that would do."""


def check_column(file: Path | str, column: str) -> None:
    """Refuse a ``column`` that ``file`` (the first train file: a path or an object URL, read
    from its footer) lacks or that is not a list of integers, before anything is read.

    Raises:
        ColumnError: naming ``--column``, ``file``, the column's type where it has one, and
            the integer-list columns ``file`` holds.
    """
    schema = _schema(file)
    lists = [f.name for f in schema if _integer_list(f.type)]
    choices = (
        f"its integer-list columns: {', '.join(lists)}; pass one with --column"
        if lists
        else "it has no integer-list column (item ids); --data must hold session files"
    )
    where = schema.get_field_index(column)
    if where < 0:
        raise ColumnError(
            f"--column {column}: {os.fspath(file)} has no column {column!r}; {choices}"
        )
    if not _integer_list(schema.field(where).type):
        raise ColumnError(
            f"--column {column}: in {os.fspath(file)} it is {schema.field(where).type}, not a "
            f"list of integers (the item ids of each session); {choices}"
        )


def _schema(file: Path | str) -> Any:
    """The arrow schema of ``file``: a local parquet file's, or an object's (its footer
    through the node cache)."""
    import pyarrow.parquet as pq

    if not is_remote(file):
        return pq.read_schema(file)
    remote = RemoteParquet.open([os.fspath(file)], RemoteSettings.of(None, None))
    try:
        return remote.metadata(remote.urls[0]).schema.to_arrow_schema()
    finally:
        remote.close()


def _integer_list(kind: Any) -> bool:
    """Whether the arrow type ``kind`` is a list (any kind) of integers."""
    import pyarrow as pa

    nested = pa.types.is_list(kind) or pa.types.is_large_list(kind)
    nested = nested or pa.types.is_fixed_size_list(kind)
    return bool(nested and pa.types.is_integer(kind.value_type))


def item_stats(files: Sequence[Path | str], column: str) -> tuple[int, int]:
    """``(items, longest)``: the largest item id in ``files`` plus one (id 0 is padding), and
    the longest list, padding included (the width the loader reads them at, whole)."""
    import pyarrow.compute as pc

    top, longest = 0, 1
    for table in _column_tables(files, column):
        lists = table.column(column).combine_chunks()
        top = max(top, int(pc.max(lists.flatten()).as_py() or 0))
        longest = max(longest, int(pc.max(pc.list_value_length(lists)).as_py() or 0))
    return top + 1, longest


def _column_tables(files: Sequence[Path | str], column: str) -> Iterator[Any]:
    """``column`` of each local file, or of each row group of each object (ranged GETs
    through the node cache: every rank reads the same, so the node fetches it once)."""
    import pyarrow.parquet as pq

    if not files or not is_remote(files[0]):
        for file in files:
            yield pq.read_table(file, columns=[column], page_checksum_verification=True)
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
    width: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Ranks and true last items of every evaluation session (sessions of length >= 2, their
    ``max_len`` most recent items; ``width``: the files' longest list)."""
    model.eval()
    ranks, last = [], []
    with torch.no_grad():
        for batch in _whole(files, config, 1024, width):
            items, lengths = recent_items(batch[config.column], config.max_len)
            keep = lengths >= 2
            items, lengths = items[keep].to(device), lengths[keep].to(device)
            if len(items):
                ranks.append(last_item_ranks(model, items, lengths).cpu().numpy())
                rows = torch.arange(len(items), device=device)
                last.append(items[rows, lengths - 1].cpu().numpy())
    model.train()
    return np.concatenate(ranks), np.concatenate(last)


def _whole(
    files: list[Path | str], config: SessionsConfig, batch_size: int, width: int
) -> PartitionedParquet:
    """Every session of ``files`` in file order, in one process, lists whole (``width``)."""
    return PartitionedParquet(
        files,
        columns=[config.column],
        batch_size=batch_size,
        list_columns={config.column: width},
        shuffle=False,
        world=World(),
    )


class SessionsStep(TrainingTask):
    """A next-item step: sessions of two items or more (their ``max_len`` most recent real
    items, :func:`recent_items`), loss at (some) positions of each.

    A run whose model diverges (its loss NaN or infinite, its weights no longer finite) is
    stopped by the shared loop (:class:`lading.errors.DivergedError`) at the next step that
    logs, checkpoints or ends the run, every rank together, so that no checkpoint, model or
    metrics of a diverged model are written.
    """

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
        items, lengths = recent_items(items, self.config.max_len)
        keep = lengths >= 2  # a session of one item has nothing to predict
        if not bool(keep.any()):
            # Nothing to learn here, but the step still runs forward and backward with a zero
            # loss: under DDP a rank that skipped would leave the others waiting in the
            # gradient all-reduce. Lengths of at least 1 keep every attention row unmasked.
            hidden = self.net(items, lengths.clamp(min=1))
            zero = hidden.sum() * 0.0  # NaN where the model diverged: checked as any loss
            return StepResult(zero, 0)
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
    check_replaceable(model_dir(out))  # refused now, not after the training
    train_files = day_files(config.data, config.train_days, ("train",))
    eval_files = day_files(config.data, [config.eval_day], ("train", "valid", "test"))
    check_column(train_files[0], config.column)  # before a table is read: one line, not pyarrow's
    num_items, width = item_stats(train_files + eval_files, config.column)
    data = PartitionedParquet(  # lists whole: the step strips the padding (recent_items)
        train_files,
        config.batch_size,
        columns=[config.column],
        list_columns={config.column: width},
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
        LoopConfig.of(
            config,
            total,
            desc="train sessions",
            rate_key="sessions_per_s",
            model_settings={k: getattr(config, k) for k in ("dim", "layers", "heads", "max_len")},
        ),
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
        "resumed": result.resumed,
        "model_dir": str(model_dir(out)),
    }
    if world.rank == 0:
        save_model(model, model_dir(out), model_settings(config, num_items))
        ranks, last = evaluate(model, eval_files, config, device, width)
        train_seqs = [
            recent_items(b[config.column], config.max_len)[0].numpy()
            for b in _whole(train_files, config, 4096, width)
        ]
        summary["model"] = metrics(ranks)
        summary["most_popular"] = metrics(popularity_ranks(train_seqs, last, num_items))
        summary["config"] = jsonable(asdict(config))
    write_summary(out, summary, world)
    return summary


def model_settings(config: SessionsConfig, num_items: int) -> dict[str, Any]:
    """What rebuilds the model ``config`` trains (``OUT/model/config.json``): its kind and
    :class:`NextItemTransformer`'s arguments."""
    sizes = {k: getattr(config, k) for k in ("dim", "layers", "heads", "max_len")}
    return {"kind": "sessions", "arch": "next-item-transformer", "num_items": num_items, **sizes}


def load_sessions_model(directory: str | os.PathLike[str]) -> NextItemTransformer:
    """The model a ``lading train sessions`` run kept in ``OUT/model`` (``directory``), on the
    CPU.

    Raises:
        FileNotFoundError, ValueError: ``directory`` holds no model of ``lading train
            sessions``'s, naming the file and the fix (:func:`lading.train.weights.load_weights`).
    """
    saved, state = load_weights(directory, "sessions")
    model = NextItemTransformer(**{k: v for k, v in saved.items() if k not in ("kind", "arch")})
    model.load_state_dict(state)
    return model
