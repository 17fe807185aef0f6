"""Sequence lengths of language-model batches: fixed, a uniform range, or fastai's jitter.

``"fastai"``: ``bptt`` with probability 0.95, else ``bptt / 2``, then
``max(5, int(normal(that, 5)))``, capped at ``bptt + 25`` (the normal exceeds that with
probability < 1e-6), as fastai's LanguageModelLoader draws them.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

Jitter = str | tuple[int, int] | None
JITTER_CAP = 25


def check_jitter(jitter: Any) -> Jitter:
    """``jitter`` if valid, else a ValueError saying what is: a range's ends are ints (not
    bools), lengths in whole tokens (``(2.5, 4)`` drew rows of 2, below its low end)."""
    if jitter in ("fastai", None):
        return jitter
    if isinstance(jitter, tuple) and len(jitter) == 2:
        ints = all(isinstance(e, numbers.Integral) and not isinstance(e, bool) for e in jitter)
        if ints and 1 <= jitter[0] <= jitter[1]:
            return jitter
    raise ValueError(
        f"Streams(jitter={jitter!r}): jitter must be 'fastai', None or (low, high), two ints "
        "with 1 <= low <= high"
    )


def jitter_of(value: Any) -> Jitter:
    """A jitter as saved in JSON (a list for a range) back to its argument form."""
    return (int(value[0]), int(value[1])) if isinstance(value, list) else value


def max_seq(bptt: int, jitter: Jitter) -> int:
    """The longest batch ``jitter`` can draw around ``bptt``."""
    if jitter is None:
        return bptt
    if jitter == "fastai":
        return bptt + JITTER_CAP
    assert isinstance(jitter, tuple)
    return int(jitter[1])


def seq_lengths(rng: np.random.Generator, positions: int, bptt: int, jitter: Jitter) -> list[int]:
    """Lengths of consecutive batches that add up to ``positions`` (the last one is cut)."""
    cap = max_seq(bptt, jitter)
    out, pos = [], 0
    while pos < positions:
        if jitter is None:
            length = bptt
        elif jitter == "fastai":
            base = bptt if rng.random() < 0.95 else bptt / 2
            length = min(max(5, int(rng.normal(base, 5))), cap)
        else:
            assert isinstance(jitter, tuple)
            length = int(rng.integers(jitter[0], jitter[1] + 1))
        length = min(length, positions - pos)
        out.append(length)
        pos += length
    return out
