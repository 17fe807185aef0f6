"""What every way of reading an LM epoch answers, and the checks its options share.

A mode is two classes in one module: a frozen dataclass of options a user passes as
``LanguageModelLoader(corpus, batch_size, sequence)``, holding only what that mode reads, and
a :class:`Mode` made from those options that answers for them: the epoch's view it reads (the
epoch stream, or its windows), the plan of a segment of it, one batch, and what the mode adds
to the layout and fingerprint of a state. A mode is given what it reads (the epoch's view, the
:class:`~lading.loading.reading.Reading` settings, a batch's key), never the loader. The options
name their mode (``mode``, a class variable); the registry in :mod:`lading.lm.modes` maps that
name to the :class:`Mode` class.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from lading.lm.batches import Batch
from lading.lm.corpus import TokenCorpus
from lading.lm.segment import LMSegment, SegmentBatchKey
from lading.lm.stream import EpochStream
from lading.lm.windows import EpochWindows, TokenMixture, WindowReader
from lading.loading.reading import Reading
from lading.loading.state import Cursor

EpochView = EpochStream | WindowReader  # what a mode reads an epoch from


def check_length(options: object, name: str, value: object, meaning: str) -> None:
    """Refuse a sequence length that is not a positive int (a bool is not one), naming the
    options object, the field and what it means."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(
            f"{type(options).__name__}({name}={value!r}): {name} must be an int >= 1 ({meaning})"
        )


def check_flag(options: object, name: str, value: object) -> None:
    """Refuse a flag that is not a bool (``"no"`` would be true)."""
    if not isinstance(value, bool):
        raise ValueError(
            f"{type(options).__name__}({name}={value!r}): {name} must be True or False"
        )


class Mode:
    """What differs between the ways of reading an epoch; a subclass per registered name.

    Attributes:
        name: the name it is registered under (its options' ``mode``).
        options: the options class a user passes for it.
        bulk: whole-epoch batches are read many at a time in-process (streams).
    """

    name: ClassVar[str]
    options: ClassVar[type]
    bulk: ClassVar[bool] = False

    def check(self, corpus: TokenCorpus | TokenMixture) -> None:
        """Refuse a corpus this mode cannot serve (ValueError naming the fix)."""

    def length(self) -> int:
        """The target length of a batch row: the bptt of streams, a window's ``seq_len``."""
        raise NotImplementedError

    def backwards(self) -> bool:
        """Whether the epoch stream is read from its end to its start."""
        return False

    def shuffles_documents(self) -> bool:
        """Whether a shuffled epoch permutes the documents (window modes may keep them)."""
        return True

    def max_seq(self) -> int:
        """The longest batch row, in (input, target) pairs."""
        return self.length()

    def chunk_batches(self) -> int:
        """Batches an in-process bulk read holds at a time (1: this mode reads batch by batch)."""
        return 1

    def view(self, data: EpochWindows, epoch: int) -> EpochView:
        """What this mode reads ``epoch`` from: its stream, or its windows."""
        raise NotImplementedError

    def plan(
        self, view: EpochView, cursor: Cursor, layout: Mapping[str, Any], reading: Reading
    ) -> LMSegment:
        """``cursor``'s segment of the epoch read from ``view``, under ``layout``."""
        raise NotImplementedError

    def check_epoch(self, first: LMSegment, reading: Reading) -> None:
        """Refuse settings whose first epoch (``first``) has no batch, as every loader does."""
        raise NotImplementedError

    def build(
        self, seg: LMSegment, key: SegmentBatchKey, x: npt.NDArray[np.int64], reading: Reading
    ) -> Batch:
        """Batch ``key.batch`` of ``seg``, read row by row into ``x`` (``[rows, seq + 1]``)."""
        raise NotImplementedError

    def reads(
        self, seg: LMSegment, key: SegmentBatchKey, reading: Reading
    ) -> npt.NDArray[np.int64] | None:
        """``[k, 3]``: (corpus, first token, end token) of each token range batch ``key`` of
        ``seg`` reads, computed from the plan (no token read), or None where this mode cannot
        say without building the batch."""
        return None

    def plan_orders(self, seg: LMSegment, batches: list[int], epoch: int, reading: Reading) -> None:
        """Prepare what :meth:`reads` asks of ``batches`` at once, where a mode can (window
        modes: their orders); nothing here."""

    def fetches(
        self, seg: LMSegment, key: SegmentBatchKey, reading: Reading
    ) -> npt.NDArray[np.int64] | None:
        """What a remote corpus should fetch for batch ``key`` (as :meth:`reads`): what it
        reads, unless the mode reads blocks whole (the locality shuffle of ``Windows``)."""
        return self.reads(seg, key, reading)

    def layout(self) -> dict[str, Any]:
        """What this mode adds to who reads what (another value: an elastic resume)."""
        return {}

    def fingerprint(self) -> dict[str, Any]:
        """What this mode adds to what fixes the data and its order."""
        return {}

    def saved_fingerprint(self, saved: Mapping[str, Any]) -> dict[str, Any]:
        """A saved state's fingerprint in today's keys (a mode that renamed one maps it)."""
        return dict(saved)

    def packing_stats(self, data: EpochWindows) -> dict[str, Any]:
        """Refused but in packed mode (which overrides it)."""
        raise ValueError(
            f"packing_stats() is for sequence=Packed(...), this loader reads {self.name!r}"
        )
