"""Language-model workloads: tokenized corpora and a loader that keeps BPTT continuity.

Names are imported on first use, so ``lading lm build`` (a :class:`TokenCorpus`) runs without
importing torch; only :class:`LanguageModelLoader` and its sequence options (:class:`Streams`,
:class:`Windows`, :class:`Packed`) need it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lading._lazy import lazy_attributes

if TYPE_CHECKING:
    from lading.lm.boundaries import IGNORE_INDEX, DocumentBatch
    from lading.lm.corpus import TokenCorpus
    from lading.lm.loader import LanguageModelLoader
    from lading.lm.modes import Packed, Streams, Windows
    from lading.lm.windows import TokenMixture

__getattr__ = lazy_attributes(
    __name__,
    {
        "TokenCorpus": "lading.lm.corpus",
        "LanguageModelLoader": "lading.lm.loader",
        "Streams": "lading.lm.modes",
        "Windows": "lading.lm.modes",
        "Packed": "lading.lm.modes",
        "TokenMixture": "lading.lm.windows",
        "DocumentBatch": "lading.lm.boundaries",
        "IGNORE_INDEX": "lading.lm.boundaries",
    },
)


__all__ = [
    "IGNORE_INDEX",
    "DocumentBatch",
    "LanguageModelLoader",
    "Packed",
    "Streams",
    "TokenCorpus",
    "TokenMixture",
    "Windows",
]
