"""The one progress bar of lading's byte-streaming work (building a store, staging a copy)."""

from __future__ import annotations

from typing import Any


def byte_bar(desc: str, total: int | None, progress: bool | None) -> Any:
    """A tqdm bar counting bytes in KiB/MiB/GiB, ``update(n_bytes)`` as they go; a context
    manager too.

    Args:
        desc: what is being done, e.g. ``"building collection.tsv"``.
        total: bytes expected, or None where unknown (a compressed source): a bar without end.
        progress: True shows the bar, False hides it, None shows it only when stderr is a
            terminal (tqdm's own rule).
    """
    from tqdm.auto import tqdm  # tqdm imports in tens of ms: only when a bar is made

    return tqdm(
        total=total,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        desc=desc,
        disable=None if progress is None else not progress,
    )
