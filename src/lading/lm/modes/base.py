"""What every way of reading an LM epoch answers, and the checks its options share.

A mode is two classes in one module: a frozen dataclass of options a user passes as
``LanguageModelLoader(corpus, batch_size, sequence)``, holding only what that mode reads, and
a :class:`Mode` the loader asks what the mode decides (planning, one batch, layout and
fingerprint). The options name their mode (``mode``, a class variable); the registry in
:mod:`lading.lm.modes` maps that name to the :class:`Mode`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from lading.lm.batches import Batch
    from lading.lm.corpus import TokenCorpus
    from lading.lm.loader import LanguageModelLoader
    from lading.lm.segment import LMSegment
    from lading.lm.windows import TokenMixture
    from lading.loading.state import Cursor


Options = TypeVar("Options")


def options_as(lm: LanguageModelLoader, kind: type[Options]) -> Options:
    """The loader's sequence options, known to be ``kind``: a mode reads only its own."""
    options = lm.sequence
    assert isinstance(options, kind)
    return options


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

    def length(self, lm: LanguageModelLoader) -> int:
        """The target length of a batch row: the bptt of streams, a window's ``seq_len``."""
        raise NotImplementedError

    def backwards(self, lm: LanguageModelLoader) -> bool:
        """Whether the epoch stream is read from its end to its start."""
        return False

    def max_seq(self, lm: LanguageModelLoader) -> int:
        """The longest batch row, in (input, target) pairs."""
        return self.length(lm)

    def plan(self, lm: LanguageModelLoader, cursor: Cursor, layout: Mapping[str, Any]) -> LMSegment:
        """``cursor``'s segment of the epoch under ``layout``."""
        raise NotImplementedError

    def check_epoch(self, lm: LanguageModelLoader) -> None:
        """Refuse settings whose first epoch has no batch, as every lading loader does."""
        raise NotImplementedError

    def build(
        self,
        lm: LanguageModelLoader,
        seg: LMSegment,
        cursor: Cursor,
        batch: int,
        x: npt.NDArray[np.int64],
    ) -> Batch:
        """Batch ``batch`` of ``seg``, read row by row into ``x`` (``[batch_size, seq + 1]``)."""
        raise NotImplementedError

    def layout(self, lm: LanguageModelLoader) -> dict[str, Any]:
        """What this mode adds to who reads what (another value: an elastic resume)."""
        return {}

    def fingerprint(self, lm: LanguageModelLoader) -> dict[str, Any]:
        """What this mode adds to what fixes the data and its order."""
        return {}

    def packing_stats(self, lm: LanguageModelLoader) -> dict[str, Any]:
        """Refused but in packed mode (which overrides it)."""
        raise ValueError(
            f"packing_stats() is for sequence=Packed(...), this loader reads {self.name!r}"
        )
