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
# the reads of many batches: which batch (its index in the keys asked of) reads each range,
# and the ``[k, 3]`` ranges (corpus, first token, end token)
ManyReads = tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]


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

    def reads_many(
        self, seg: LMSegment, keys: list[SegmentBatchKey], reading: Reading
    ) -> ManyReads | None:
        """:meth:`reads` of batches ``keys`` of ``seg`` at once (a remote corpus's plan of an
        epoch asks of every batch): a batch at a time here; window modes compute them
        together."""
        return gathered([self.reads(seg, key, reading) for key in keys])

    def fetches_many(
        self, seg: LMSegment, keys: list[SegmentBatchKey], reading: Reading
    ) -> ManyReads | None:
        """:meth:`fetches` of batches ``keys`` of ``seg`` at once, as :meth:`reads_many`."""
        return gathered([self.fetches(seg, key, reading) for key in keys])

    def layout(self) -> dict[str, Any]:
        """What this mode adds to who reads what (another value: an elastic resume)."""
        return {}

    def fingerprint(self) -> dict[str, Any]:
        """What this mode adds to what fixes the data and its order."""
        return {}

    def saved_fingerprint(
        self, saved: Mapping[str, Any], layout: Mapping[str, Any]
    ) -> dict[str, Any]:
        """A saved state's fingerprint in today's keys (a mode that renamed one maps it);
        ``layout``: the state's (who read what)."""
        return dict(saved)

    def packing_stats(self, data: EpochWindows) -> dict[str, Any]:
        """Refused but in packed mode (which overrides it)."""
        raise ValueError(
            f"packing_stats() is for sequence=Packed(...), this loader reads {self.name!r}"
        )


def gathered(found: list[npt.NDArray[np.int64] | None]) -> ManyReads | None:
    """Batches' ranges (``found[j]``: batch ``j``'s) as one array and each row's batch
    (:func:`stacked`); None where one batch's cannot be said."""
    kept = [f for f in found if f is not None]
    return stacked(kept) if len(kept) == len(found) else None


def stacked(found: list[npt.NDArray[np.int64]]) -> ManyReads:
    """Batches' ranges (``found[j]``: batch ``j``'s) as one array, and each row's batch."""
    counts = np.fromiter(map(len, found), np.int64, len(found))
    which = np.repeat(np.arange(len(found), dtype=np.int64), counts)
    rows = np.concatenate(found) if found else np.empty((0, 3), dtype=np.int64)
    return which, rows.astype(np.int64, copy=False)
