"""Stopping a diverged run, for every task the shared loop trains.

A step whose loss is NaN or infinite is noted on the device (the first such step and its
loss), with no host sync. At the steps that log, checkpoint (before the checkpoint is saved)
or end the run, the same steps on every rank, every rank joins one all-reduce of that flag;
where some rank saw a non-finite loss, each looks at its model's weights, and the run stops
(:class:`~lading.errors.DivergedError`, on every rank together) where they are not all finite
on some rank. A GradScaler (fp16) skips the update of a step whose loss overflowed, and its
weights stay finite: that is no divergence, the flag is cleared and the run goes on. Without
a scaler a NaN loss makes NaN gradients and NaN weights at its own update, so the weights tell
both cases apart.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch

from lading.errors import DivergedError
from lading.train import ddp


class DivergenceWatch:
    """The first step whose loss was not finite, on the device, and the check that stops a
    diverged run (:meth:`check`: every rank must call it at the same steps)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.checked_at: int | None = None  # the step of the last check
        self._step: torch.Tensor | None = None  # the first bad step (-1: none yet)
        self._loss: torch.Tensor | None = None  # its loss

    def note(self, step: int, loss: torch.Tensor | None) -> None:
        """Note on the device whether ``step``'s ``loss`` was finite (no host sync)."""
        if loss is None:
            return
        loss = loss.detach()
        if self._step is None or self._loss is None:  # made where the loss is
            self._step = torch.full((), -1, dtype=torch.int64, device=loss.device)
            self._loss = torch.zeros((), dtype=torch.float32, device=loss.device)
        first = ~torch.isfinite(loss).all() & (self._step < 0)
        self._step = torch.where(first, step, self._step)
        self._loss = torch.where(first, loss.to(self._loss.dtype), self._loss)

    def check(
        self,
        step: int,
        parameters: Callable[[], Iterable[torch.Tensor]],
        advice: Callable[[], Advice],
    ) -> None:
        """At ``step``, raise on every rank where a rank saw a non-finite loss and some rank's
        ``parameters()`` are not all finite; clear the flag where they all are (a step the
        scaler skipped). The weights are read only where a loss was not finite.

        Raises:
            DivergedError: naming the first step whose loss was not finite, its loss, the rank
                that saw it (of several), the learning rate and the fix (``advice``).
        """
        self.checked_at = step
        first = -1 if self._step is None else int(self._step)
        if not ddp.sum_over_ranks([float(first >= 0)], self.device)[0]:
            return
        loss = float(self._loss) if first >= 0 and self._loss is not None else math.nan
        found = ddp.gather_objects((first, loss, _finite(parameters())))
        if all(finite for _, _, finite in found):  # the scaler skipped those steps
            self._step = self._loss = None
            return
        rank, (bad_step, bad_loss, _) = min(
            ((r, f) for r, f in enumerate(found) if f[0] >= 0), key=lambda rf: (rf[1][0], rf[0])
        )
        where = f" on rank {rank}" if len(found) > 1 else ""
        raise DivergedError(advice().message(bad_step, bad_loss, where))


def _finite(parameters: Iterable[torch.Tensor]) -> bool:
    """Whether every one of ``parameters`` is finite (each checked on its device first, then
    read)."""
    flags = [torch.isfinite(p.detach()).all() for p in parameters]
    return all(bool(flag) for flag in flags)


class Advice:
    """What the error of a diverged run says beside its step and loss: the learning rate,
    whether anything was checkpointed, and the fixes that apply."""

    def __init__(self, optimizer: Any, clip: float | None, fp16: bool, checkpoints: bool) -> None:
        groups = getattr(optimizer, "param_groups", None) or [{}]
        # the lr the run was given (a scheduler keeps it as initial_lr), not the schedule's now
        self.lr = groups[0].get("initial_lr", groups[0].get("lr"))
        self.clip, self.fp16, self.checkpoints = clip, fp16, checkpoints

    def message(self, step: int, loss: float, where: str) -> str:
        lr = f" (lr= {self.lr})" if self.lr is not None else ""
        kept = ", nor checkpointed from that step on" if self.checkpoints else ""
        fixes = ["a lower lr= (10x lower to start)"]
        if self.clip is None:
            fixes.append("gradient clipping (clip=1.0, --clip 1.0)")
        if self.fp16:
            fixes.append("precision='bf16' or precision='fp32' rather than fp16")
        fix = ", ".join(fixes[:-1]) + (" or " if len(fixes) > 1 else "") + fixes[-1]
        return (
            f"training diverged: loss {loss} at step {step}{where}{lr}, and the weights are no "
            f"longer finite; the model is neither evaluated nor kept{kept}. Train again with "
            f"{fix}"
        )
