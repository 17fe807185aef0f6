"""Counts in the bench's report and lines, in English: "once", "1 process", "2 processes"."""

from __future__ import annotations


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``1 process``, ``2 processes``, ``1,000 documents``: ``plural`` where adding an s is
    not it."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def times(n: int) -> str:
    """``once``, ``2 times``."""
    return "once" if n == 1 else f"{n:,} times"
