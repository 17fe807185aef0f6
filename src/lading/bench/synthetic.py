"""The bench's upper bound: the same model step on batches already on the device.

A training cell first runs the real loop (loader, copy, step) and keeps the batches it stepped;
then, in the same processes, it replays those batches, expanded on the device beforehand, through
the same step: no loader, no copy. The efficiency E = step time synthetic / step time real
(1.0: the data path is hidden entirely). How the strategies of the GPU leg send a batch to the
device is a table of :mod:`lading.bench.data` (``EMIT``, ``PREFETCHED``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from lading.device import batch_bytes
from lading.train import StepResult, TrainingTask

KEEP_AT_MOST = 256  # batches kept for the replay (which cycles them): a window may take 1000s


class Recorded(TrainingTask):
    """``inner``'s step, counting the bytes each batch brings to the device and keeping the
    first :data:`KEEP_AT_MOST` batches (references only: nothing is computed or copied in the
    timed loop)."""

    def __init__(self, inner: Any, keep: bool) -> None:
        self.inner, self.keep = inner, keep
        self.kept: list[Any] = []
        self.bytes, self.steps = 0, 0

    def step(self, batch: Any) -> StepResult:
        self.bytes += batch_bytes(batch)
        self.steps += 1
        if self.keep and len(self.kept) < KEEP_AT_MOST:
            self.kept.append(batch)
        result: StepResult = self.inner.step(batch)
        return result

    def bytes_per_step(self) -> float:
        return self.bytes / max(1, self.steps)

    def kept_host_bytes(self) -> int:
        """Bytes the kept batches hold in host memory (their tensors not on a GPU): the bench's
        own, which a cell's memory figures leave out (:func:`lading.bench.cell.cell_record`)."""
        from lading.device.prefetch import tensors

        return sum(
            t.numel() * t.element_size()
            for batch in self.kept
            for t in tensors(batch)
            if t.device.type == "cpu"
        )

    def replay(self) -> Replay:
        """The kept batches with the model's inputs already built on the device."""
        return Replay([self.inner.inputs(b) for b in self.kept])


class Replay:
    """A loader over batches already on the device, cycled epoch after epoch."""

    def __init__(self, batches: list[Any]) -> None:
        if not batches:
            raise ValueError("nothing to replay: the real run stepped no batch")
        self.batches, self._epoch = batches, 0

    @property
    def epoch(self) -> int:
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        self._epoch = epoch

    def __len__(self) -> int:
        return len(self.batches)

    def remaining(self) -> int:
        return len(self.batches)

    def position(self) -> Any:
        return None  # nothing to resume: every epoch replays the same batches

    def __iter__(self) -> Iterator[Any]:
        return iter(self.batches)

    def state_dict(self, at: Any = None) -> dict[str, Any]:
        return {"epoch": self._epoch}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._epoch = int(state["epoch"])
