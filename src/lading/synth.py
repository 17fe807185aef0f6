"""Deterministic synthetic collections shaped like MS MARCO: corpus, queries, qrels and a run.

For demos, tests and benchmarks on machines without the real data. Same (kind, n, seed), same
bytes. Shapes follow MS MARCO v1/v2:

- ``passages``: ``collection.tsv`` (``pid<TAB>text``, integer pids 0..n-1, ~60 words each).
- ``documents``: ``docs.jsonl`` (``{"docid", "url", "title", "body"}``, ids like
  ``msmarco_doc_31_726131``, ~1,000+ words each).
- both: ``queries.tsv`` (``qid<TAB>text``), ``qrels.txt`` (TREC: ``qid 0 docid rel``) and
  ``run.trec`` (``qid Q0 docid rank score tag``, depth 100).

Each document draws most words from its topic's vocabulary and each query takes words from its
relevant document, so a ranker trained on the data has something real to learn and a term-
overlap run ranks relevant documents high, though not always first.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

Kind = Literal["passages", "documents"]
KINDS: tuple[str, ...] = ("documents", "passages")
_SYLLABLES = (
    "ka",
    "lo",
    "mi",
    "ne",
    "ru",
    "ta",
    "si",
    "po",
    "de",
    "fa",
    "gu",
    "he",
    "ji",
    "vo",
    "ze",
    "ba",
    "co",
    "di",
    "el",
    "an",
    "or",
    "um",
    "is",
    "at",
)
_VOCAB = 30_000
_WORDS_PER_TOPIC = 300
_TOPIC_SHARE = 0.6  # share of a document's words drawn from its topic
RUN_DEPTH = 100


@dataclass(frozen=True)
class SynthFiles:
    """Paths of a generated collection."""

    corpus: Path
    queries: Path
    qrels: Path
    run: Path


def _vocabulary() -> np.ndarray:
    rng = np.random.default_rng(12345)
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < _VOCAB:
        n = int(rng.integers(1, 5))
        word = "".join(_SYLLABLES[i] for i in rng.integers(0, len(_SYLLABLES), n))
        if word not in seen:
            seen.add(word)
            words.append(word)
    return np.array(words, dtype=object)


class _Generator:
    def __init__(self, kind: Kind, n: int, seed: int) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown kind {kind!r}; choose from {sorted(KINDS)}")
        if n < 1:
            raise ValueError(f"need at least one document, got n={n}")
        self.kind, self.n, self.seed = kind, n, seed
        self.vocab = _vocabulary()
        self.n_topics = max(1, min(n // 50, 2000))
        rng = np.random.default_rng([seed, 0])
        self.topic_words = rng.integers(0, _VOCAB, (self.n_topics, _WORDS_PER_TOPIC))
        self.topic_of = rng.integers(0, self.n_topics, n)
        # cumulative Zipf weights, searched with uniform draws: rng.choice(p=...) would rebuild
        # the 30,000-entry CDF on every call and dominate the run time
        self.global_cdf = np.cumsum(1 / np.arange(1, _VOCAB + 1, dtype=np.float64))
        self.global_cdf /= self.global_cdf[-1]
        self.topic_cdf = np.cumsum(np.arange(1, _WORDS_PER_TOPIC + 1, dtype=np.float64) ** -0.8)
        self.topic_cdf /= self.topic_cdf[-1]

    def doc_id(self, i: int) -> str:
        if self.kind == "passages":
            return str(i)
        return f"msmarco_doc_{i % 60:02d}_{(i // 60) * 9173 + 17}"  # (bundle, offset)-like

    def words(self, i: int) -> np.ndarray:
        """Word ids of document ``i`` (from its own seed: any document can be regenerated)."""
        rng = np.random.default_rng([self.seed, 1, i])
        mean = 60 if self.kind == "passages" else 1100
        length = int(np.clip(rng.normal(mean, mean / 3), 8, mean * 4))
        from_topic = rng.random(length) < _TOPIC_SHARE
        topic = self.topic_words[self.topic_of[i]]
        out = np.searchsorted(self.global_cdf, rng.random(length))
        local = np.searchsorted(self.topic_cdf, rng.random(int(from_topic.sum())))
        out[from_topic] = topic[local]
        return out

    def text(self, words: np.ndarray) -> str:
        return " ".join(self.vocab[words])


def synth(
    kind: Kind, n: int, out: str | os.PathLike[str], *, queries: int | None = None, seed: int = 0
) -> SynthFiles:
    """Write a synthetic collection of ``n`` documents into the folder ``out``.

    Args:
        kind: ``"passages"`` or ``"documents"``.
        n: number of documents.
        out: folder to write into (created).
        queries: number of queries (default: n // 100, between 10 and 5,000).
        seed: different seeds, different collections.
    """
    gen = _Generator(kind, n, seed)
    n_queries = queries if queries is not None else int(np.clip(n // 100, 10, 5000))
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    corpus = folder / ("collection.tsv" if kind == "passages" else "docs.jsonl")
    tmp = corpus.with_name(corpus.name + f".tmp-{os.getpid()}")
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        for i in range(n):
            words = gen.words(i)
            text = gen.text(words)
            if kind == "passages":
                f.write(f"{gen.doc_id(i)}\t{text}\n")
            else:
                title = gen.text(words[:6])
                record = {
                    "docid": gen.doc_id(i),
                    "url": f"http://example.org/{i}",
                    "title": title,
                    "body": text,
                }
                f.write(json.dumps(record, ensure_ascii=False) + "\n")
    tmp.replace(corpus)
    files = SynthFiles(corpus, folder / "queries.tsv", folder / "qrels.txt", folder / "run.trec")
    _write_queries_qrels_run(gen, n_queries, files)
    return files


def _write_queries_qrels_run(gen: _Generator, n_queries: int, files: SynthFiles) -> None:
    rng = np.random.default_rng([gen.seed, 2])
    members: dict[int, np.ndarray] = {}
    order = np.argsort(gen.topic_of, kind="stable")
    bounds = np.searchsorted(gen.topic_of[order], np.arange(gen.n_topics + 1))
    for t in range(gen.n_topics):
        members[t] = order[bounds[t] : bounds[t + 1]]
    relevant = rng.choice(gen.n, size=n_queries, replace=n_queries > gen.n)
    with open(files.queries, "w") as fq, open(files.qrels, "w") as fr, open(files.run, "w") as fx:
        for q, doc in enumerate(relevant.tolist()):
            qid = 1000 + q
            words = gen.words(doc)
            picked = words[
                rng.choice(len(words), size=min(len(words), int(rng.integers(3, 7))), replace=False)
            ]
            fq.write(f"{qid}\t{gen.text(picked)}\n")
            fr.write(f"{qid} 0 {gen.doc_id(doc)} 1\n")
            pool = members[int(gen.topic_of[doc])]
            extra = rng.integers(0, gen.n, RUN_DEPTH // 2)
            near = pool[rng.integers(0, len(pool), RUN_DEPTH)]
            candidates = np.unique(np.concatenate([near, extra, [doc]]))
            query_set = set(picked.tolist())
            scores = np.array(
                [sum(w in query_set for w in gen.words(int(c))[:200].tolist()) for c in candidates],
                dtype=np.float64,
            )
            scores += rng.random(len(candidates))  # break ties, and blur the ranking a little
            ranked = candidates[np.argsort(-scores, kind="stable")][:RUN_DEPTH]
            best = np.sort(scores)[::-1]
            for rank, (c, s) in enumerate(zip(ranked.tolist(), best.tolist()), start=1):
                fx.write(f"{qid} Q0 {gen.doc_id(c)} {rank} {s:.4f} synth\n")
