"""Language-model workloads: tokenized corpora and a loader that keeps BPTT continuity.

Names are imported on first use, so ``lading lm build`` (a :class:`TokenCorpus`) runs without
importing torch; only :class:`LanguageModelLoader` needs it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lading.lm.corpus import TokenCorpus
    from lading.lm.loader import LanguageModelLoader

_HOMES = {"TokenCorpus": "lading.lm.corpus", "LanguageModelLoader": "lading.lm.loader"}


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'lading.lm' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)


__all__ = ["LanguageModelLoader", "TokenCorpus"]
