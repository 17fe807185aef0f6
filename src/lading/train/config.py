"""What every ``lading train`` command shares: where it writes, how long, how often, how parallel.

Each workload's config (``TrainConfig``, ``LMConfig``, ``SessionsConfig``) extends
:class:`RunConfig` with its own fields and may give these fields other defaults. Keyword-only,
so a workload's required fields can follow these defaults.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from lading.errors import LadingError
from lading.remote.objects import is_remote

# what Path() leaves of a URL: "s3://b/x" -> "s3:/b/x" (a scheme of 2+ letters: not "C:/")
_MERGED_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):/(?!/)(.+)$")


class DataLocationError(LadingError, ValueError):
    """A run config's data location that cannot be what was meant: an object-store URL made
    into a ``Path`` (which merges its two slashes: ``s3://b/x`` becomes the folder ``s3:/b/x``)."""


def data_location(value: str | os.PathLike[str], field: str) -> Path | str:
    """A config's data input as the trainer reads it: an object-store URL (``s3://b/x``)
    kept as its string, anything else a local ``Path``.

    Raises:
        DataLocationError: ``value`` is a ``Path`` holding a URL whose ``//`` became ``/``
            and no such local path exists; the message gives the string to pass instead.
    """
    if isinstance(value, Path) and not value.exists():
        merged = _MERGED_URL.match(value.as_posix())
        if merged:
            url = f"{merged[1]}://{merged[2]}"
            raise DataLocationError(
                f"{field}=Path({url!r}) is the local path {value.as_posix()}: Path() merges "
                f"the two slashes of a URL; pass the URL as a string, {field}={url!r}"
            )
    text = os.fspath(value)
    return text if is_remote(text) else Path(text)


@dataclass(kw_only=True)
class RunConfig:
    """The run-level settings of a training command.

    Attributes:
        out: the run's folder (log.jsonl, summary.json, checkpoint/, model).
        batch_size: rows per batch on each rank.
        steps: optimizer steps to take (None: ``epochs`` whole epochs).
        epochs: epochs to take when ``steps`` is None.
        lr: peak learning rate.
        seed: fixes every order, draw and initial weight.
        parallel: ``"ddp"`` (torchrun), ``"dp"`` (one process, DataParallel) or ``"none"``.
        num_workers: DataLoader workers per rank.
        log_every: steps between log records.
        checkpoint_every: steps between checkpoints (0: none).
        resume: continue from ``out/checkpoint`` when there is one.
        progress: the progress bar on rank 0 (None: only on a terminal).
        prefetch: on CUDA, copy batches ahead on a side stream (lading.DevicePrefetcher).
        clip: the gradients' largest norm, clipped to it before each update (None or 0:
            none).
        keep_on_resume: optimizer settings (``"lr"``, ``"weight_decay"``) a resume keeps
            from the checkpoint instead of setting this config's; by default a resume sets
            this run's. ``lading train`` keeps ``lr`` where ``--lr`` was not given.
    """

    out: Path
    batch_size: int = 8
    steps: int | None = None
    epochs: int = 1
    lr: float = 1e-3
    seed: int = 0
    parallel: str = "ddp"
    num_workers: int = 0
    log_every: int = 50
    checkpoint_every: int = 0
    resume: bool = False
    progress: bool | None = None
    prefetch: bool = True
    clip: float | None = None
    keep_on_resume: tuple[str, ...] = ()
