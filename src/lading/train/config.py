"""What every ``lading train`` command shares: where it writes, how long, how often, how parallel.

Each workload's config (``TrainConfig``, ``LMConfig``, ``SessionsConfig``) extends
:class:`RunConfig` with its own fields and may give these fields other defaults. Keyword-only,
so a workload's required fields can follow these defaults.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


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
