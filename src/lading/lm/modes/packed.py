"""``Packed``: windows into which whole documents were packed best-fit decreasing.

No document is cut unless it is longer than a window (:mod:`lading.lm.packing`); the rest of
a window is padding, labelled ``IGNORE_INDEX`` (-100, what ``cross_entropy`` skips) in
``(x, y)`` batches, as are the starts of documents with ``eod_mask_loss`` (the default). The
packed windows are the epoch's positions, planned, shuffled and resumed as windows are.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from lading.errors import EmptyEpochError
from lading.lm.modes.windows import WindowShape, WindowsMode
from lading.lm.segment import LMSegment
from lading.lm.windows import EpochWindows, MixedWindows, PackedWindows
from lading.loading.reading import Reading


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

    def check_epoch(self, first: LMSegment, reading: Reading) -> None:
        """Refuse, as streams and windows refuse a corpus with nothing to predict, documents
        (a mixture's corpus) whose windows hold no label to score: each document its
        end-of-text token alone, every label IGNORE_INDEX and every loss NaN. Naming each."""
        windows = first.windows
        members = windows.members if isinstance(windows, MixedWindows) else [windows]
        packed = [m for m in members if isinstance(m, PackedWindows)]
        assert len(packed) == len(members)  # (the packed mode reads packed windows only)
        eod_mask_loss = self.shape.eod_mask_loss
        empty = [m for m in packed if m.scores_nothing(eod_mask_loss)]
        if empty:
            tokens = sum(m.packing.tokens for m in empty)
            if not tokens:  # no document, or only documents of no token (no end-of-text)
                why = f"the {sum(len(m.doc_start) for m in empty)} document(s) read hold 0 tokens"
            elif eod_mask_loss:
                why = (
                    "every document read is 1 token (its end-of-text token alone: an empty "
                    "text), and eod_mask_loss scores no label across documents"
                )
            else:
                why = "the documents read hold 1 token in all"
            raise EmptyEpochError(
                f"{', '.join(m.where for m in empty)}: {why}, so its packed windows hold no "
                "label to score: nothing to predict, every loss NaN; build the corpus from "
                "texts that are not empty, or leave it out (documents= selects which "
                "documents are read)"
            )
        super().check_epoch(first, reading)
