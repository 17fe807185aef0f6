"""The warnings of a grid's cells, shown once each however many cells raise them.

Every cell runs its ranks in fresh processes, and every rank builds the training groups: a
warning about the data (judged documents the corpus lacks, queries without negatives) was
printed by every rank of every repeat of every cell, 72 times on a real collection, across the
progress bar. The ranks send their warnings to the bench instead
(:func:`lading.bench.cell.serve_rank`); :class:`CellWarnings` shows each distinct one when a
cell first raises it and, at the end, how many of the grid's cells raised it.
"""

from __future__ import annotations

from typing import Any

SHOWN_CHARS = 160  # of a warning's first line in the end's summary


class CellWarnings:
    """The distinct warnings of the ``cells`` cells of a grid, in the order first raised, with
    the cells that raised each."""

    def __init__(self, cells: int) -> None:
        self.cells = cells
        self._by_text: dict[str, list[str]] = {}

    def add(self, label: str, texts: list[str]) -> list[str]:
        """Note that cell ``label`` raised ``texts`` (each as Python prints a warning); the
        lines to show now: the warnings no cell raised before, under a line naming the cell."""
        new: list[str] = []
        for text in texts:
            text = text.rstrip("\n")
            cells = self._by_text.get(text)
            if cells is None:
                self._by_text[text] = [label]
                new.append(text)
            elif label not in cells:
                cells.append(label)
        if not new:
            return []
        return [
            f"lading bench: cell {label} warned (each warning is shown once; the cells that "
            "raised it are counted at the end):",
            *new,
        ]

    def summary(self) -> list[str]:
        """One line per distinct warning: how many of the grid's cells raised it (none
        without warnings)."""
        lines = []
        for text, cells in self._by_text.items():
            first = text.splitlines()[0] if text else ""
            if len(first) > SHOWN_CHARS:
                first = first[: SHOWN_CHARS - 3] + "..."
            lines.append(
                f"lading bench: warning shown once above, raised in {len(cells)} of "
                f"{self.cells} cell{'' if self.cells == 1 else 's'}: {first}"
            )
        return lines

    def as_json(self) -> list[dict[str, Any]]:
        """For results.json: each warning and the labels of the cells that raised it."""
        return [{"warning": text, "cells": list(cells)} for text, cells in self._by_text.items()]
