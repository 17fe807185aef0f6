"""Which batch a read belongs to, and which loader: carried by the read itself.

Steps are one clock for every rank: ``epoch * STEPS_PER_EPOCH + batch`` (:func:`step_of`);
rank ``r`` reads batch ``b`` of an epoch at the same step as every other rank. The loader sets
the step around each batch's build (:func:`at_step`), in whichever thread or DataLoader worker
builds it, and a remote read with no step of its own takes :func:`current_step`: a value local
to the building thread, never a clock field on an object other threads read. A map-style
loader also says whose the reads and hints are (:func:`as_reader`, its workload): a remote
store read by two loaders (a training and a validation loader over one store object) keeps
one plan and one window for each, where the second's plan had replaced the first's.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

STEPS_PER_EPOCH = 1 << 32

_STEP: contextvars.ContextVar[int | None] = contextvars.ContextVar("lading_step", default=None)
_READER: contextvars.ContextVar[object | None] = contextvars.ContextVar(
    "lading_reader", default=None
)


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


def current_reader() -> object | None:
    """The loader this thread reads or hints for (its workload), or None (a direct read)."""
    return _READER.get()


@contextlib.contextmanager
def as_reader(reader: object) -> Iterator[None]:
    """``with as_reader(r):`` the reads and hints in this block (this thread only) are
    loader ``r``'s."""
    token = _READER.set(reader)
    try:
        yield
    finally:
        _READER.reset(token)
