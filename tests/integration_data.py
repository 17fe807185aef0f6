"""Tiny real-data setups for the framework integration tests: ADI (82 documents, 35 queries).

A WordPiece vocabulary is trained here on the collection (offline, ~0.1 s) and models are built
from configs, never downloaded.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

COLLECTION = "ir/normalized/adi"
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no test may reach the hub
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@dataclass
class Collection:
    """A collection's files, a store of it with tokens and the tokenizer it was built with."""

    folder: Path
    store: Any
    tokenizer: Path
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    run: dict[str, list[str]]

    def groups(self, group_size: int = 4, seed: int = 0, queries: int | None = None) -> Any:
        """Training groups of the first ``queries`` judged queries (all by default)."""
        from lading import ir

        qrels = dict(list(self.qrels.items())[:queries])
        return ir.TrainingGroups(
            self.store, self.queries, qrels, self.run, group_size=group_size, seed=seed
        )


def adi(data_dir: Path, tmp: Path) -> Collection:
    """ADI as a tokenized store under ``tmp``; skips when the collection is absent."""
    import lading
    from lading import ir
    from lading.stores.tokens import save_tokenizer, train_tokenizer

    folder = data_dir / COLLECTION
    if not folder.is_dir():
        pytest.skip(f"{folder} not found")
    texts = [line.split("\t", 1)[1] for line in (folder / "docs.tsv").read_text().splitlines()]
    queries = ir.read_queries(folder / "queries.tsv")
    tok = train_tokenizer([*texts, *queries.values()], "wordpiece", vocab_size=800)
    tok_path = save_tokenizer(tok, tmp / "tokenizer.json")
    store = lading.build_store(folder / "docs.tsv", tmp / "store", tokenizer=tok_path)
    return Collection(
        folder,
        store,
        tok_path,
        queries,
        ir.read_qrels(folder / "qrels.txt"),
        ir.read_run(folder / "bm25.run"),
    )


def hf_tokenizer_dir(tokenizer: Path, out: Path) -> Path:
    """A local HF tokenizer folder (what sentence-transformers loads) from a tokenizer.json."""
    from lading.bench.examples import hf_tokenizer_folder

    return hf_tokenizer_folder(tokenizer, out)
