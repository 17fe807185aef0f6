"""Where a loader builds its batches: in this process or in DataLoader workers, and how
(:class:`Workers`, the one record of those keywords every loader takes)."""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Workers:
    """Where batches are built: in this process (``num_workers=0``) or in DataLoader workers.

    Attributes:
        num_workers: DataLoader worker processes per rank (0: build in this process).
        pin_memory: page-locked batches, for faster copies to a GPU.
        prefetch_factor: batches each worker keeps ready (default 2; workers only).
        persistent_workers: keep the workers from one epoch to the next (default: yes).
        multiprocessing_context: ``"fork"``, ``"spawn"`` or ``"forkserver"`` (workers only).
        read_ahead: with ``num_workers=0``, batches built ahead on a thread of this process
            while the caller holds the last one (:mod:`lading.loading.read_ahead`); 0: each built
            when asked for. None: the loader's default (2 for remote LM corpora and parquet
            files, else 0).
    """

    num_workers: int = 0
    pin_memory: bool = False
    prefetch_factor: int | None = None
    persistent_workers: bool | None = None
    multiprocessing_context: str | None = None
    read_ahead: int | None = None

    def __post_init__(self) -> None:
        workers = self.num_workers
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
            raise ValueError(
                f"num_workers={workers!r}: an int >= 0 (0 builds batches in this process)"
            )
        ahead = self.read_ahead
        bad = isinstance(ahead, bool) or not isinstance(ahead, int) or ahead < 0
        if ahead is not None and bad:
            raise ValueError(
                f"read_ahead={ahead!r}: batches built ahead on a thread, an int >= 0 (0: none)"
            )

    def with_read_ahead(self, asked: int | None, default: int) -> Workers:
        """These settings with ``read_ahead`` as ``asked``; where it was not (None, here or
        when these were made), the loader's ``default``."""
        depth = asked if asked is not None else self.read_ahead
        return dataclasses.replace(self, read_ahead=default if depth is None else depth)

    def for_remote(self, asked: int | None, what: str, default: int = 2) -> Workers:
        """These settings for data read from object storage (``what`` names it): ``read_ahead``
        as ``asked``, else ``default`` (2: batches built on a thread beside the step); with
        DataLoader workers, a warning that says so, since workers measured slower on every such
        run (:data:`REMOTE_WORKERS`)."""
        if self.num_workers:
            warnings.warn(
                f"{what} is read from object storage with num_workers={self.num_workers}: "
                f"{REMOTE_WORKERS} Pass num_workers=0 (and read_ahead=2 where it is not the "
                "default): batches are then built on a thread beside the step.",
                UserWarning,
                stacklevel=3,
            )
        return self.with_read_ahead(asked, default=default)


REMOTE_WORKERS = (
    "DataLoader workers wait on the fetches their parent makes ahead and read it at 0.7-0.9x "
    "of a local copy's speed, where num_workers=0 reads it at 0.97-1.03x (benchmarks/RESULTS.md, "
    "'Workers against a remote store on longer epochs')."
)


def pinnable() -> bool:
    """Whether page-locked memory can be had here (a CUDA device); where not, pin_memory=True
    is passed over with a warning, as a DataLoader does."""
    if torch.cuda.is_available():
        return True
    warnings.warn(
        "pin_memory=True, but no CUDA device is available: batches are not pinned",
        UserWarning,
        stacklevel=3,
    )
    return False
