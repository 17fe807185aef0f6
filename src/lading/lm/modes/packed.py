"""``Packed``: windows into which whole documents were packed best-fit decreasing.

No document is cut unless it is longer than a window (:mod:`lading.lm.packing`); the rest of
a window is padding, labelled ``IGNORE_INDEX`` (-100, what ``cross_entropy`` skips) in
``(x, y)`` batches, as are the starts of documents with ``eod_mask_loss`` (the default). The
packed windows are the epoch's positions, planned, shuffled and resumed as windows are.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from lading.lm.modes.windows import WindowShape, WindowsMode
from lading.lm.windows import EpochWindows


@dataclass(frozen=True)
class Packed(WindowShape):
    """Whole documents packed into windows (``LanguageModelLoader(..., Packed(512))``).

    Args:
        seq_len, boundaries, eod_mask_loss: as for every window mode (:class:`WindowShape`).
            There is no ``backwards``: a packing places whole documents, read forwards.
    """

    mode: ClassVar[str] = "packed"


class PackedMode(WindowsMode):
    """Windows of whole documents packed best-fit decreasing; the rest of a window padding."""

    name = "packed"
    options = Packed
    padded = True

    def packing_stats(self, data: EpochWindows) -> dict[str, Any]:
        """Windows, pieces, tokens and padding, summed over a mixture's corpora."""
        return data.packing_stats()
