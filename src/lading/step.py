"""Which batch a read belongs to: the step, carried by the read itself.

Steps are one clock for every rank: ``epoch * STEPS_PER_EPOCH + batch`` (:func:`step_of`);
rank ``r`` reads batch ``b`` of an epoch at the same step as every other rank. The loader sets
the step around each batch's build (:func:`at_step`), in whichever thread or DataLoader worker
builds it, and a remote read with no step of its own takes :func:`current_step`: a value local
to the building thread, never a clock field on an object other threads read.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

STEPS_PER_EPOCH = 1 << 32

_STEP: contextvars.ContextVar[int | None] = contextvars.ContextVar("lading_step", default=None)


def step_of(epoch: int, batch: int) -> int:
    """The clock value of batch ``batch`` of ``epoch``."""
    return epoch * STEPS_PER_EPOCH + batch


def current_step() -> int | None:
    """The step of the batch this thread is building, or None (a read outside any batch)."""
    return _STEP.get()


@contextlib.contextmanager
def at_step(step: int | None) -> Iterator[None]:
    """``with at_step(s):`` the reads in this block (this thread only) are step ``s``'s."""
    token = _STEP.set(step)
    try:
        yield
    finally:
        _STEP.reset(token)
