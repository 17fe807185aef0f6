"""Deterministic synthetic collections shaped like MS MARCO: corpus, queries, qrels and a run.

For demos, tests and benchmarks on machines without the real data. Same (kind, n, seed, format),
same bytes. Shapes follow MS MARCO v1/v2:

- ``passages``: ``collection.tsv`` (``pid<TAB>text``, integer pids 0..n-1, ~60 words each).
- ``documents``: ``docs.jsonl`` (``{"docid", "url", "title", "body"}``) or, with
  ``corpus_format="tsv"``, ``docs.tsv`` (``docid<TAB>url<TAB>title<TAB>body`` like
  ``msmarco-docs.tsv``); ids like ``msmarco_doc_31_726131``; lengths log-normal with a median
  of ~680 words, a mean of ~1,100 and a long tail (clipped at 40,000 words).
- both: ``queries.tsv`` (``qid<TAB>text``), ``qrels.txt`` (TREC: ``qid 0 docid rel``) and
  ``run.trec`` (``qid Q0 docid rank score tag``, depth 100).

Each document draws most words from its topic's vocabulary and each query takes words from its
relevant document, so a ranker trained on the data has something real to learn and a term-
overlap run ranks relevant documents high, though not always first.

Generation streams: every random draw is a counter-based hash of (seed, document, position),
so blocks of documents are generated with a few numpy calls, any document can be regenerated
alone (the run scores candidates that way), and memory does not grow with ``n``. Text bytes are
assembled in numpy from a padded vocabulary matrix, not joined word by word in Python. Because
blocks are independent, ``workers`` processes generate them side by side while this process
writes them in order: the bytes do not depend on the number of workers.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import numpy.typing as npt

Kind = Literal["passages", "documents"]
KINDS: tuple[str, ...] = ("documents", "passages")
CorpusFormat = Literal["jsonl", "tsv"]
CORPUS_FORMATS: tuple[str, ...] = ("jsonl", "tsv")
_SYLLABLES = (
    "a",
    "e",
    "i",
    "o",
    "u",
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
_TITLE_WORDS = 6
RUN_DEPTH = 100
_TABLE_BITS = 20  # a uniform draw's top bits index a table of word ranks, not a CDF search
_BLOCK_WORDS = 1 << 19  # words generated per numpy block: ~5 MiB of text, memory bounded

# hash streams: one per kind of draw, so draws never share bits
_LENGTH, _WORD, _PICK = 1, 2, 3
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


@dataclass(frozen=True)
class SynthFiles:
    """Paths of a generated collection."""

    corpus: Path
    queries: Path
    qrels: Path
    run: Path


def _mix(x: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """splitmix64's finaliser: every input bit spread over the output (wraps mod 2**64)."""
    x = x ^ (x >> np.uint64(30))
    x = x * _M1
    x = x ^ (x >> np.uint64(27))
    x = x * _M2
    return x ^ (x >> np.uint64(31))


def _unit(h: npt.NDArray[np.uint64]) -> npt.NDArray[np.float64]:
    """Uniform floats in (0, 1) from the top 48 bits of hashes."""
    return ((h >> np.uint64(16)).astype(np.float64) + 0.5) * 2.0**-48


def _rank_table(weights: npt.NDArray[np.float64]) -> npt.NDArray[np.uint16]:
    """Inverse CDF of ``weights`` sampled at 2**_TABLE_BITS points: table[top bits] = rank.

    A lookup in a 2 MiB table instead of a binary search over the CDF (~10x faster); ranks whose
    probability is below 2**-20 are drawn at a rounded rate, which a synthetic corpus can afford.
    """
    cdf = np.cumsum(weights)
    cdf /= cdf[-1]
    points = (np.arange(1 << _TABLE_BITS, dtype=np.float64) + 0.5) / (1 << _TABLE_BITS)
    return np.minimum(np.searchsorted(cdf, points), len(weights) - 1).astype(np.uint16)


def _ranks(table: npt.NDArray[np.uint16], h: npt.NDArray[np.uint64]) -> npt.NDArray[np.int64]:
    return table[(h >> np.uint64(64 - _TABLE_BITS)).astype(np.int64)].astype(np.int64)


def _vocabulary() -> tuple[list[str], npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
    """Words, their bytes + a trailing space as a padded matrix, and each row's used width.

    Shortest words first: the Zipf draws make low ranks frequent, so frequent words are short
    and text averages ~5.5 bytes per word with its space, as English does.
    """
    rng = np.random.default_rng(12345)
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < _VOCAB:
        n = int(rng.integers(1, 5))
        word = "".join(_SYLLABLES[i] for i in rng.integers(0, len(_SYLLABLES), n))
        if word not in seen:
            seen.add(word)
            words.append(word)
    words.sort(key=len)  # stable: same order for every run
    width = max(map(len, words)) + 1
    padded = np.zeros((len(words), width), dtype=np.uint8)
    for i, word in enumerate(words):
        padded[i, : len(word) + 1] = np.frombuffer(word.encode("ascii") + b" ", np.uint8)
    return words, padded, np.array([len(w) + 1 for w in words], dtype=np.int64)


class _Generator:
    def __init__(self, kind: Kind, n: int, seed: int) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown kind {kind!r}; choose from {sorted(KINDS)}")
        if n < 1:
            raise ValueError(f"need at least one document, got n={n}")
        self.kind, self.n, self.seed = kind, n, seed
        self.vocab, self.padded, self.widths = _vocabulary()
        self.n_topics = max(1, min(n // 50, 2000))
        rng = np.random.default_rng([seed, 0])
        # mid-frequency words (ranks 200..8000, 3-6 letters) make a topic, as in real text
        self.topic_words = rng.integers(200, 8000, (self.n_topics, _WORDS_PER_TOPIC))
        self.topic_shift = int(rng.integers(0, self.n_topics))
        self.key = _mix(np.array([seed & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64))[0]
        self.global_ranks = _rank_table(1 / np.arange(1, _VOCAB + 1, dtype=np.float64))
        self.topic_ranks = _rank_table(np.arange(1, _WORDS_PER_TOPIC + 1, dtype=np.float64) ** -0.8)

    def _hash(self, stream: int, docs: npt.NDArray[np.int64], pos: np.ndarray) -> np.ndarray:
        base = _mix((docs.astype(np.uint64) * _GOLDEN) ^ self.key ^ np.uint64(stream << 56))
        return _mix(base + pos.astype(np.uint64) * _M2)

    def doc_id(self, i: int) -> str:
        if self.kind == "passages":
            return str(i)
        return f"msmarco_doc_{i % 60:02d}_{(i // 60) * 9173 + 17}"  # (bundle, offset)-like

    def topic_of(self, docs: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        return (docs + self.topic_shift) % self.n_topics

    def members(self, topic: int, count: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """Documents of ``topic`` picked by the integers ``count`` (any size, wrapped)."""
        first = (topic - self.topic_shift) % self.n_topics
        if first >= self.n:
            return np.full(len(count), self.n - 1, dtype=np.int64)
        in_topic = (self.n - 1 - first) // self.n_topics + 1
        return first + (count % in_topic) * self.n_topics

    def lengths(self, docs: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """Word counts: normal(60, 20) for passages, log-normal (median 750) for documents."""
        zero = np.zeros(len(docs), dtype=np.int64)
        u1 = _unit(self._hash(_LENGTH, docs, zero))
        u2 = _unit(self._hash(_LENGTH, docs, zero + 1))
        z = np.sqrt(-2 * np.log(u1)) * np.cos(2 * np.pi * u2)  # Box-Muller: one normal each
        if self.kind == "passages":
            return np.clip(np.rint(60 + 20 * z), 8, 240).astype(np.int64)
        return np.clip(np.rint(750 * np.exp(z)), 20, 40_000).astype(np.int64)

    def words_of(
        self, docs: npt.NDArray[np.int64], limit: int | None = None
    ) -> tuple[np.ndarray, npt.NDArray[np.int64]]:
        """Word ids of ``docs`` back to back (at most ``limit`` each), and their counts."""
        lengths = self.lengths(docs)
        if limit is not None:
            lengths = np.minimum(lengths, limit)
        total = int(lengths.sum())
        owner = np.repeat(docs, lengths)
        starts = np.cumsum(lengths) - lengths
        pos = np.arange(total, dtype=np.int64) - np.repeat(starts, lengths)
        h = self._hash(_WORD, owner, pos)
        from_topic = (h & np.uint64(0xFFFF)) < np.uint64(int(_TOPIC_SHARE * 65536))
        out = _ranks(self.global_ranks, h)
        topics = self.topic_of(owner[from_topic])
        out[from_topic] = self.topic_words[topics, _ranks(self.topic_ranks, h[from_topic])]
        return out, lengths

    def words(self, i: int) -> np.ndarray:
        """Word ids of document ``i`` (any document can be regenerated alone)."""
        return self.words_of(np.array([i], dtype=np.int64))[0]

    def text_bytes(self, words: np.ndarray) -> tuple[bytes, npt.NDArray[np.int64]]:
        """The words as text, each followed by a space, and the byte end of each word."""
        rows = np.take(self.padded, words, axis=0).ravel()  # take: ~2x faster than [words]
        return rows[rows != 0].tobytes(), np.cumsum(self.widths[words])  # padding is the zeros

    def text(self, words: np.ndarray) -> str:
        return " ".join(self.vocab[w] for w in words.tolist())


def _blocks(gen: _Generator) -> list[tuple[int, int]]:
    per_block = max(1, _BLOCK_WORDS // (60 if gen.kind == "passages" else 1100))
    return [(lo, min(lo + per_block, gen.n)) for lo in range(0, gen.n, per_block)]


def _corpus_block(gen: _Generator, lo: int, hi: int, corpus_format: CorpusFormat) -> bytes:
    """The corpus lines of documents ``lo..hi-1``."""
    docs = np.arange(lo, hi, dtype=np.int64)
    words, lengths = gen.words_of(docs)
    text, word_ends = gen.text_bytes(words)
    doc_last = np.cumsum(lengths) - 1
    ends = (word_ends[doc_last] - 1).tolist()  # each document's trailing space excluded
    starts = [0, *(e + 1 for e in ends[:-1])]
    view = memoryview(text)
    out: list[bytes | memoryview] = []
    if gen.kind == "passages":
        for i, a, b in zip(range(lo, hi), starts, ends):
            out += (f"{i}\t".encode(), view[a:b], b"\n")
        return b"".join(out)
    titled = doc_last - lengths + np.minimum(lengths, _TITLE_WORDS)
    title_ends = (word_ends[titled] - 1).tolist()
    for i, a, b, t in zip(range(lo, hi), starts, ends, title_ends):
        doc_id, url = gen.doc_id(i), f"http://example.org/{i}"
        if corpus_format == "tsv":
            out += (f"{doc_id}\t{url}\t".encode(), view[a:t], b"\t", view[a:b], b"\n")
        else:  # the vocabulary is plain ASCII letters: nothing to escape, same bytes as json.dumps
            head = f'{{"docid": "{doc_id}", "url": "{url}", "title": "'.encode()
            out += (head, view[a:t], b'", "body": "', view[a:b], b'"}\n')
    return b"".join(out)


_WORKER: tuple[_Generator, CorpusFormat] | None = None
_TASK_BLOCKS = 4  # blocks per task sent to a worker: ~15-20 MiB of text, pipes stay busy


def _start_worker(gen: _Generator, corpus_format: CorpusFormat) -> None:
    global _WORKER
    _WORKER = (gen, corpus_format)


def _worker_blocks(ranges: list[tuple[int, int]]) -> bytes:
    assert _WORKER is not None, "the pool's initializer did not run"
    gen, fmt = _WORKER
    return b"".join(_corpus_block(gen, lo, hi, fmt) for lo, hi in ranges)


def _corpus_chunks(gen: _Generator, fmt: CorpusFormat, workers: int) -> Iterator[bytes]:
    """The corpus's bytes in order, generated here (``workers`` 1) or by a process pool.

    The pool is fed at most two tasks per worker ahead of the writer, so memory stays bounded
    however far generation runs ahead of the disk.
    """
    blocks = _blocks(gen)
    if workers <= 1 or len(blocks) < 2:
        for lo, hi in blocks:
            yield _corpus_block(gen, lo, hi, fmt)
        return
    tasks = [blocks[i : i + _TASK_BLOCKS] for i in range(0, len(blocks), _TASK_BLOCKS)]
    workers = min(workers, len(tasks))
    import multiprocessing

    # fork: workers inherit the generator's tables (building the vocabulary takes ~0.8 s), and
    # spawn would re-run an unguarded __main__ script; only numpy runs in them
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(
        workers, context, initializer=_start_worker, initargs=(gen, fmt)
    ) as pool:
        pending: list[Future[bytes]] = []
        for task in tasks:
            pending.append(pool.submit(_worker_blocks, task))
            if len(pending) >= 2 * workers:
                yield pending.pop(0).result()
        for future in pending:
            yield future.result()


def default_workers() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def synth(
    kind: Kind,
    n: int,
    out: str | os.PathLike[str],
    *,
    queries: int | None = None,
    seed: int = 0,
    corpus_format: CorpusFormat | None = None,
    workers: int = 1,
) -> SynthFiles:
    """Write a synthetic collection of ``n`` documents into the folder ``out``.

    Streams: memory stays a few tens of MiB per process whatever ``n`` (8.8M passages: ~3 GB
    written).

    Args:
        kind: ``"passages"`` or ``"documents"``.
        n: number of documents.
        out: folder to write into (created).
        queries: number of queries (default: n // 100, between 10 and 5,000).
        seed: different seeds, different collections.
        corpus_format: documents only: ``"jsonl"`` (default, ``docs.jsonl``) or ``"tsv"``
            (``docs.tsv``: ``docid<TAB>url<TAB>title<TAB>body``); passages are always TSV.
        workers: processes generating the corpus (1: this one; see ``default_workers``). The
            output is the same bytes for any number.
    """
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    gen = _Generator(kind, n, seed)
    fmt: CorpusFormat = corpus_format or ("tsv" if kind == "passages" else "jsonl")
    if fmt not in CORPUS_FORMATS or (kind == "passages" and fmt != "tsv"):
        raise ValueError(
            f"corpus_format {corpus_format!r} does not suit {kind}: passages are TSV, documents "
            f"one of {sorted(CORPUS_FORMATS)}"
        )
    n_queries = queries if queries is not None else int(np.clip(n // 100, 10, 5000))
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    corpus = folder / ("collection.tsv" if kind == "passages" else f"docs.{fmt}")
    tmp = corpus.with_name(corpus.name + f".tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            for chunk in _corpus_chunks(gen, fmt, workers):
                f.write(chunk)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    tmp.replace(corpus)
    files = SynthFiles(corpus, folder / "queries.tsv", folder / "qrels.txt", folder / "run.trec")
    _write_queries_qrels_run(gen, n_queries, files)
    return files


def _write_queries_qrels_run(gen: _Generator, n_queries: int, files: SynthFiles) -> None:
    rng = np.random.default_rng([gen.seed, 2])
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
            topic = int(gen.topic_of(np.array([doc]))[0])
            near = gen.members(topic, rng.integers(0, 2**62, RUN_DEPTH))
            extra = rng.integers(0, gen.n, RUN_DEPTH // 2)
            candidates = np.unique(np.concatenate([near, extra, [doc]]))
            scores = _overlap(gen, candidates, picked)
            scores += rng.random(len(candidates))  # break ties, and blur the ranking a little
            ranked = candidates[np.argsort(-scores, kind="stable")][:RUN_DEPTH]
            best = np.sort(scores)[::-1]
            for rank, (c, s) in enumerate(zip(ranked.tolist(), best.tolist()), start=1):
                fx.write(f"{qid} Q0 {gen.doc_id(c)} {rank} {s:.4f} synth\n")


def _overlap(
    gen: _Generator, candidates: npt.NDArray[np.int64], picked: np.ndarray
) -> npt.NDArray[np.float64]:
    """How many of each candidate's first 200 words are query words (one numpy pass)."""
    words, lengths = gen.words_of(candidates, limit=200)
    hit = np.isin(words, picked)
    owner = np.repeat(np.arange(len(candidates)), lengths)
    return np.bincount(owner, weights=hit, minlength=len(candidates)).astype(np.float64)
