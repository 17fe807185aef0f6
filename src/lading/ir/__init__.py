"""Neural ranking workloads: inputs, training groups, cross-encoder batches, model, training."""

from __future__ import annotations

from lading.ir.collate import CrossEncoderCollator
from lading.ir.groups import GroupsWarning, TrainingGroups
from lading.ir.inputs import read_qrels, read_queries, read_run
from lading.ir.model import CrossEncoder
from lading.ir.rerank import evaluate, rerank, with_tail

__all__ = [
    "CrossEncoder",
    "CrossEncoderCollator",
    "GroupsWarning",
    "TrainingGroups",
    "evaluate",
    "read_qrels",
    "read_queries",
    "read_run",
    "rerank",
    "with_tail",
]
