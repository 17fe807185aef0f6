"""Where a loader builds its batches: in this process or in DataLoader workers, and how
(:class:`Workers`, the one record of those keywords every loader takes)."""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class Workers:
    """Where batches are built: in this process (``num_workers=0``) or in DataLoader workers.

    Attributes:
        num_workers: DataLoader worker processes per rank (0: build in this process).
        pin_memory: page-locked batches, for faster copies to a GPU.
        prefetch_factor: batches each worker keeps ready, an int >= 1 (default 2; workers
            only: refused with ``num_workers=0``, as a DataLoader refuses it).
        persistent_workers: keep the workers from one epoch to the next (default: yes;
            ``True`` refused with ``num_workers=0``, as a DataLoader refuses it).
        multiprocessing_context: ``"fork"``, ``"spawn"`` or ``"forkserver"`` (workers only).
        read_ahead: with ``num_workers=0``, batches built ahead on a thread of this process
            while the caller holds the last one (:mod:`lading.loading.read_ahead`); 0: each built
            when asked for; refused with ``num_workers > 0``, where no thread builds. None: the
            loader's default (2 for remote LM corpora and parquet files read in this process,
            else 0).
    """

    num_workers: int = 0
    pin_memory: bool = False
    prefetch_factor: int | None = None
    persistent_workers: bool | None = None
    multiprocessing_context: str | None = None
    read_ahead: int | None = None

    def __post_init__(self) -> None:
        """Refuse what a DataLoader refuses or the loader would pass over, naming it; numpy's
        ints and bools are taken, as Python's."""
        workers = self.num_workers
        if _not_int(workers) or workers < 0:
            raise ValueError(
                f"num_workers={workers!r}: an int >= 0 (0 builds batches in this process)"
            )
        ahead = self.read_ahead
        if ahead is not None and (_not_int(ahead) or ahead < 0):
            raise ValueError(
                f"read_ahead={ahead!r}: batches built ahead on a thread, an int >= 0 (0: none)"
            )
        if not isinstance(self.pin_memory, (bool, np.bool_)):  # "no" is truthy: it pinned
            raise TypeError(f"pin_memory={self.pin_memory!r}: pin_memory must be True or False")
        persistent = self.persistent_workers
        if persistent is not None and not isinstance(persistent, (bool, np.bool_)):
            raise TypeError(
                f"persistent_workers={persistent!r}: persistent_workers must be True, False or "
                "None (the default: kept, with workers)"
            )
        prefetch = self.prefetch_factor
        says = (
            f"prefetch_factor={prefetch!r}: prefetch_factor must be an int >= 1 (batches each "
            "worker keeps ready), or None for the default (2)"
        )
        if prefetch is not None and _not_int(prefetch):
            raise TypeError(says)
        if prefetch is not None and prefetch < 1:  # (0 ran as the default, 2)
            raise ValueError(says)
        fields = {
            "num_workers": int(workers),
            "read_ahead": None if ahead is None else int(ahead),
            "pin_memory": bool(self.pin_memory),
            "persistent_workers": None if persistent is None else bool(persistent),
            "prefetch_factor": None if prefetch is None else int(prefetch),
        }
        prefetch = fields["prefetch_factor"]
        for name, value in fields.items():  # Python's: trainer settings compare them
            object.__setattr__(self, name, value)
        _refuse_unused(self.num_workers, self.read_ahead, self.persistent_workers, prefetch)

    def with_read_ahead(self, asked: int | None, default: int) -> Workers:
        """These settings with ``read_ahead`` as ``asked``; where it was not (None, here or
        when these were made), the loader's ``default`` without workers, 0 with them (the
        thread builds batches in this process only: a default never trips the refusal of
        ``read_ahead`` with workers)."""
        depth = asked if asked is not None else self.read_ahead
        if depth is None:
            depth = 0 if self.num_workers else default
        return dataclasses.replace(self, read_ahead=depth)

    def for_remote(self, asked: int | None, what: str, default: int = 2) -> Workers:
        """These settings for data read from object storage (``what`` names it): ``read_ahead``
        as ``asked``, else ``default`` (2: batches built on a thread beside the step; 0 with
        workers); with DataLoader workers, a warning that says so, since workers measured
        slower on every such run (:data:`REMOTE_WORKERS`)."""
        if self.num_workers:
            warnings.warn(
                f"{what} is read from object storage with num_workers={self.num_workers}: "
                f"{REMOTE_WORKERS} Pass num_workers=0 (and read_ahead=2 where it is not the "
                "default): batches are then built on a thread beside the step.",
                UserWarning,
                stacklevel=3,
            )
        return self.with_read_ahead(asked, default=default)


def _not_int(value: object) -> bool:
    """Whether ``value`` is no int (numpy's are; a bool is not one)."""
    return isinstance(value, bool) or not isinstance(value, (int, np.integer))


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


def _refuse_unused(
    workers: int, ahead: int | None, persistent: bool | None, prefetch: int | None
) -> None:
    """Refuse an option given for the other side of ``num_workers``, where it would be passed
    over: a DataLoader refuses ``persistent_workers=True`` and ``prefetch_factor`` without
    workers, and ``read_ahead`` builds on a thread of this process, without them only (its
    default is 0 with workers: only a value given explicitly is refused)."""
    if not workers and persistent:
        raise ValueError(
            "persistent_workers=True with num_workers=0: there are no DataLoader workers to "
            "keep between epochs; leave it out, or pass num_workers > 0"
        )
    if not workers and prefetch is not None:
        raise ValueError(
            f"prefetch_factor={prefetch!r} with num_workers=0: prefetch_factor is the batches "
            "each DataLoader worker keeps ready; leave it out, or pass num_workers > 0 "
            "(read_ahead= builds batches ahead in this process)"
        )
    if workers and ahead:
        raise ValueError(
            f"read_ahead={ahead!r} with num_workers={workers!r}: read_ahead builds batches on a "
            "thread of this process, with num_workers=0 only (workers build ahead themselves: "
            "prefetch_factor); pass one or the other"
        )
