"""Language-model workloads: tokenized corpora and a loader that keeps BPTT continuity."""

from __future__ import annotations

from lading.lm.corpus import TokenCorpus
from lading.lm.loader import LanguageModelLoader

__all__ = ["LanguageModelLoader", "TokenCorpus"]
