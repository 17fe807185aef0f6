"""A token corpus built on a cluster: every rank of a process group a shard (torchrun), and
shards built straight into object storage (``s3://``), committed by one merge in the bucket.

- :func:`build_in_group`: ``TokenCorpus.build(..., shard="auto")`` under torchrun: rank ``r``
  of ``w`` tokenizes shard ``r`` of ``w``, rank 0 merges, every rank opens that snapshot (the
  stores' rule, :func:`lading.stores.building.group.shards_in_group`).

Shards built straight into a bucket, and their merge there: :mod:`lading.lm.remote_shards`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lading.lm.shards import DocumentOptions


def build_in_group(
    source: Any,
    dest: str | os.PathLike[str],
    tokenizer: Any,
    build_id: str | None,
    progress: bool | None,
    documents: DocumentOptions,
) -> str:
    """Rank ``r`` of ``w`` builds shard ``r`` of ``w`` of ``dest`` (its documents cut and ended
    as ``documents`` says); rank 0 merges; every rank returns the snapshot rank 0 committed
    (the caller opens it). ``dest`` must be on a filesystem every rank sees."""
    from lading.lm.merge import merge_corpus
    from lading.lm.shards import build_corpus_shard
    from lading.stores.building.group import shards_in_group
    from lading.world import resolve_shared_fs

    where = Path(dest)
    ids: list[str] = []

    def write(shard: tuple[int, int]) -> None:
        report = build_corpus_shard(
            source, where, shard, tokenizer, documents, build_id=build_id, progress=progress
        )
        ids.append(report.build_id)

    def merge(n: int) -> str:
        done = merge_corpus(where, ids[0] if ids else build_id)
        return done if isinstance(done, str) else str(done["snapshot"])

    shared = resolve_shared_fs(None)  # (TokenCorpus.build takes no shared_fs=: the variable)
    return str(shards_in_group(write, merge, where, shared, "LADING_SHARED_FS=1"))
