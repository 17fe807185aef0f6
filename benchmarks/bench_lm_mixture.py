"""What a TokenMixture costs per batch against one corpus, and how evenly it mixes.

    python benchmarks/bench_lm_mixture.py [--repeats 5] [--write]

Three synthetic corpora (random words, word-level tokenizer, 4M tokens each)
are read in ``"windows"`` mode at batch 16 x 1024, alone and as a mixture of the three
(weights 0.5/0.3/0.2). Timed window: 200 batches after 5 warm-up batches, per repeat; repeats
alternate single and mixture; median and min–max ms per batch.

Evenness: over epochs of 1,000–4,000 windows, the share of each corpus in every run of 16
consecutive windows of the epoch order is compared with what a uniform shuffle of the same
windows gives (averaged over 20 seeds): the ratio of mean squared deviations from the weights
(mixture / uniform; <= 1 means at least as even as a uniform shuffle).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from common import HERE, write_section
from lading.lm import LanguageModelLoader, TokenCorpus, TokenMixture, Windows
from lading.lm.windows import EpochWindows, MixedWindows
from lading.world import World

BATCH, SEQ, WEIGHTS = 16, 1024, (0.5, 0.3, 0.2)


def synthetic_corpus(path: Path, tokens: int, seed: int) -> TokenCorpus:
    """A corpus of random words (documents of 200-3,000), tokenized by a word-level tokenizer."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = [f"w{i}" for i in range(5000)]
    tok = Tokenizer(
        models.WordLevel({"<|endoftext|>": 0, **{w: i + 1 for i, w in enumerate(words)}}, "w0")
    )
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(path.with_suffix(".json")))
    rng = np.random.default_rng(seed)
    vocab = np.array(words)
    docs = [
        " ".join(vocab[rng.integers(0, 5000, n)]) for n in rng.integers(200, 3000, tokens // 1600)
    ]
    text = path.with_suffix(".txt")
    text.write_text("\n\n".join(docs) + "\n")
    return TokenCorpus.build(text, path, path.with_suffix(".json"), progress=False)


def ms_per_batch(corpus: TokenCorpus | TokenMixture, batches: int = 200) -> float:
    loader = LanguageModelLoader(corpus, BATCH, Windows(SEQ), world=World(), seed=3)
    it = iter(loader)
    for _ in range(5):
        next(it)
    started = time.perf_counter()
    for _ in range(batches):
        next(it)
    return (time.perf_counter() - started) / batches * 1e3


def evenness(corpora: list[TokenCorpus], windows: int, run: int = 16, seeds: int = 20) -> float:
    """Mean squared deviation of corpus shares over runs of ``run`` windows, mixture order
    divided by a uniform shuffle's, averaged over ``seeds``."""
    weights = np.array(WEIGHTS)
    ours, uniform = [], []
    for seed in range(seeds):
        mix = TokenMixture(dict(zip(corpora, WEIGHTS)), windows=windows)
        # the windows a loader of Windows(64) over the mixture reads in epoch 0, in its order
        data = EpochWindows(mix, np.arange(0), "windows", 64, seed, shuffle=True, backwards=False)
        source = data.of_epoch(0)
        assert isinstance(source, MixedWindows)
        order = [source.locate(int(p))[0] for p in epoch_positions(source.n, seed)]
        labels = np.array(order)
        shuffled = np.random.default_rng(seed).permutation(labels)
        ours.append(deviation(labels, weights, run))
        uniform.append(deviation(shuffled, weights, run))
    return float(np.mean(ours) / np.mean(uniform))


def epoch_positions(n: int, seed: int) -> list[int]:
    """The order a loader of ``seed`` reads ``n`` windows in, in epoch 0."""
    from lading.loading.order import feistel_permutation

    return feistel_permutation(np.arange(n), n, seed, 0).tolist()


def deviation(labels: np.ndarray, weights: np.ndarray, run: int) -> float:
    runs = labels[: len(labels) // run * run].reshape(-1, run)
    shares = np.stack([(runs == i).mean(axis=1) for i in range(len(weights))], axis=1)
    return float(((shares - weights) ** 2).mean())


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} [{min(values):.2f}–{max(values):.2f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--write", action="store_true", help="update benchmarks/RESULTS.md")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        corpora = [synthetic_corpus(Path(tmp) / f"c{i}", 4_000_000, i) for i in range(3)]
        mixture = TokenMixture(dict(zip(corpora, WEIGHTS)))
        single, mixed = [], []
        for _ in range(args.repeats):
            single.append(ms_per_batch(corpora[0]))
            mixed.append(ms_per_batch(mixture))
        even = {w: evenness(corpora, w) for w in (1000, 2000, 4000)}
    ratio = statistics.median(mixed) / statistics.median(single)
    lines = [
        f"Windows mode, batch {BATCH} x {SEQ}, three synthetic corpora of 4M tokens; timed "
        f"window: 200 batches after 5 warm-up, {args.repeats} repeats alternating; median "
        "[min–max] ms per batch.",
        "",
        "| reading | ms per batch |",
        "|---|---:|",
        f"| one corpus | {spread(single)} |",
        f"| mixture of three | {spread(mixed)} |",
        f"| mixture / one corpus (medians) | {ratio:.2f} (target <= 1.5) |",
        "",
        "Short-run evenness (runs of 16 windows; mean squared deviation of the corpus shares "
        "from the weights, mixture order / a uniform shuffle, 20 seeds; <= 1: at least as even):",
        "",
        "| epoch windows | mixture / uniform |",
        "|---:|---:|",
        *(f"| {w:,} | {r:.2f} |" for w, r in even.items()),
    ]
    report = "\n".join(lines)
    print(report)
    where = write_section(
        HERE / "RESULTS.md",
        "Language model: mixtures",
        report,
        "python benchmarks/bench_lm_mixture.py --write",
        write=args.write,
    )
    print(f"written to {where}")


if __name__ == "__main__":
    main()
