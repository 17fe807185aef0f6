"""A loader plans the columns its reads name: the texts of a tokenized remote store.

A store's plan named no columns before its first read, so a tokenized store guessed
``tokens``; a collate that reads the documents' texts (a bi-encoder tokenizing itself) then
read every text unannounced, each one a GET at its read, while the window fetched tokens that
nothing read: 13.0 s of waiting against 1.95 s for the same store built without tokens (a
review's measure). Its reads now name the columns, and the plan is made again for them."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lading
from conftest import word_tokenizer
from lading.ir import TrainingGroups
from lading.testing import LocalS3

pytest.importorskip("tokenizers")
DOCS, QUERIES, GROUP, BATCH = 800, 320, 4, 8
WORDS = [f"w{i}" for i in range(400)]


class Texts:
    """A collate that reads each group's texts (not the stored tokens)."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def __call__(self, items: list[dict[str, Any]]) -> list[tuple[str, ...]]:
        return [tuple(self.store.texts_at(np.asarray(it["doc_codes"]))) for it in items]


def _epoch(url: str, s3: LocalS3, cache: Path) -> tuple[dict[str, int], dict[str, Any]]:
    """Bytes the server sent for one epoch of a loader whose collate reads texts, by the
    kind of file (``text``, ``tokens``), and the store's figures."""
    store = lading.open_store(url, cache=cache, cache_bytes="48K")
    qs = {f"q{i}": f"query {i}" for i in range(QUERIES)}
    qrels = {f"q{i}": {f"D{(i * 7) % DOCS}": 1} for i in range(QUERIES)}
    groups = TrainingGroups(store, qs, qrels, group_size=GROUP, seed=1, sampling="random")
    s3.reset()
    with lading.loader(groups, BATCH, collate_fn=Texts(store), seed=3,
                       world=lading.World(0, 1)) as loader:  # fmt: skip
        texts = [t for batch in loader for group in batch for t in group]
    sent: dict[str, int] = {}
    for key, size in s3.stats()["get_bytes_by_key"].items():
        kind = key.rsplit("/", 1)[-1].split(".")[0]
        sent[kind] = sent.get(kind, 0) + int(size)
    stats = store.cache_stats()
    store.close()
    assert len(texts) == QUERIES * GROUP
    return sent, stats


@pytest.mark.slow  # two stores built and read over the local S3: ~20 s
def test_a_collate_reading_texts_of_a_tokenized_store_is_planned_for_texts(
    bucket: str, s3: LocalS3, tmp_path: Path
) -> None:
    rng = random.Random(0)
    lines = [
        json.dumps({"id": f"D{i}", "text": " ".join(rng.choice(WORDS) for _ in range(
            rng.randrange(20, 160)))})
        for i in range(DOCS)
    ]  # fmt: skip
    (tmp_path / "docs.jsonl").write_text("\n".join(lines) + "\n")
    tok = word_tokenizer(WORDS, tmp_path / "tok.json")
    figures = {}
    for name, tokenizer in (("plain", None), ("tokenized", tok)):
        url = f"s3://{bucket}/{name}"
        built = lading.build_store(tmp_path / "docs.jsonl", url, tokenizer=tokenizer,
                                   cache=str(tmp_path / f"up-{name}"), progress=False)  # fmt: skip
        figures[name] = _epoch(url, s3, tmp_path / f"c-{name}")
    (plain, _), (tokenized, stats) = figures["plain"], figures["tokenized"]
    tokens = sum(v["size"] for k, v in built.meta["files"].items() if k.endswith("tokens.bin"))
    print(f"bytes sent by file: without tokens {plain}, with {tokenized} of {tokens:,} in "
          f"tokens.bin; {stats['process']}")  # fmt: skip
    # the first batch's texts are read before any read named the column: unannounced
    assert stats["unplanned"] <= BATCH * GROUP, stats  # (507 of 1,280 before, and 1.75x the
    # text bytes: each text the window did not fetch was fetched at its read)
    assert tokenized["text"] <= 1.1 * plain["text"], (tokenized, plain)
    # the window announced before the first read (16 of 40 batches) fetched tokens; the
    # window after it did not (every token of the epoch, before)
    assert tokenized.get("tokens", 0) <= 0.6 * tokens, (tokenized, tokens)
