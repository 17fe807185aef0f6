"""LanguageModelLoader against the naive loader on >= 200M tokens: memory and tokens/s.

    python benchmarks/bench_lm.py [--copies 25] [--out bench-out/lm]

The corpus is the Wikipedia sample of ../shared/data/lm tokenized with a 8,000-entry byte-level
BPE trained here, scaled by reading it ``--copies`` times (a folder of links to the file).
The naive loader is fastai v1's: every document's ids as int64 arrays in memory, concatenated
into one int64 tensor, batchified to ``[64, n]`` and sliced with fastai's sequence-length rule.
Each loader runs one full epoch at batch 64 x bptt 70 in a fresh process: its anonymous memory
(RssAnon, what it costs beyond shared file pages) and its tokens/s are recorded. Writes the
"Language model: loader" section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from common import HERE, add_write_flag, data_dir, first, write_section
from lading.lm import LanguageModelLoader, TokenCorpus
from lading.stores.tokens import save_tokenizer, train_tokenizer
from lading.train.procmem import process_memory
from lading.world import World

BATCH, BPTT = 64, 70


def naive_batches(corpus: TokenCorpus, seed: int = 0) -> Any:
    """fastai v1's LanguageModelLoader, faithfully: ids in RAM as int64, one big tensor."""
    docs = [corpus.document(i).astype(np.int64) for i in range(len(corpus))]  # "numericalized"
    order = np.random.default_rng(seed).permutation(len(docs))
    data = torch.from_numpy(np.concatenate([docs[i] for i in order]))
    del docs
    n = len(data) // BATCH
    batched = data[: n * BATCH].view(BATCH, n)  # batchify
    rng = np.random.default_rng(seed)
    i = 0
    while i < n - 1:
        base = BPTT if rng.random() < 0.95 else BPTT / 2
        seq = min(max(5, int(rng.normal(base, 5))), n - 1 - i)
        yield batched[:, i : i + seq], batched[:, i + 1 : i + 1 + seq]
        i += seq


def run(kind: str, corpus_path: str) -> dict[str, Any]:
    """One epoch of one loader in this (fresh) process."""
    before = process_memory()
    corpus = TokenCorpus.open(corpus_path)
    started = time.perf_counter()
    if kind == "naive":
        batches = naive_batches(corpus)
    else:
        # imported here, not at the top: bench_lm_owned.py imports this module under a
        # baseline tree whose lading has no Streams
        from lading.lm import Streams

        batches = iter(LanguageModelLoader(corpus, BATCH, Streams(BPTT), world=World()))
    tokens = 0
    first = None
    for x, _ in batches:
        if first is None:
            first = time.perf_counter()  # the naive loader pays its setup before batch one
        tokens += x.numel()
    end = time.perf_counter()
    after = process_memory()
    return {
        "kind": kind,
        "tokens": tokens,
        "setup_s": (first or end) - started,
        "epoch_s": end - started,
        "tokens_per_s": tokens / (end - (first or started)),
        "tokens_per_s_with_setup": tokens / (end - started),
        "anon_mib": (after.anon - before.anon) / 2**20,
        "rss_mib": after.rss / 2**20,
    }


def build(copies: int, out: Path) -> TokenCorpus:
    root = data_dir()
    if root is None:
        raise SystemExit("the Wikipedia sample is in ../shared/data/lm; set LADING_DATA")
    source = root / "lm/enwiki-2015-wikiextractor.jsonl"
    tok = save_tokenizer(train_tokenizer(first(source, 3000), "bpe", 8000), out / "bpe8000.json")
    folder = out / f"wiki-x{copies}"
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(copies):
        link = folder / f"part{i:03d}.jsonl"
        if not link.exists():
            link.symlink_to(source)
    return TokenCorpus.build(folder, out / f"corpus-x{copies}", tok, progress=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--copies", type=int, default=25)
    parser.add_argument("--out", default="bench-out/lm")
    parser.add_argument("--child")
    parser.add_argument("--corpus")
    add_write_flag(parser)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run(args.child, args.corpus)))
        return
    corpus = build(args.copies, Path(args.out))
    results = {}
    for kind in ("naive", "lading"):
        done = subprocess.run(
            [sys.executable, __file__, "--child", kind, "--corpus", str(corpus.path)],
            capture_output=True,
            text=True,
            check=True,
        )
        results[kind] = json.loads(done.stdout.strip().splitlines()[-1])
        print(json.dumps(results[kind]), flush=True)
    naive, ours = results["naive"], results["lading"]
    lines = [
        f"Corpus: the Wikipedia sample read {args.copies} times: {len(corpus):,} documents, "
        f"{corpus.n_tokens:,} tokens, {corpus.dtype} on disk "
        f"({corpus.n_tokens * corpus.dtype.itemsize / 2**20:,.0f} MiB). Batch {BATCH} x bptt "
        f"{BPTT} (fastai jitter), one epoch, one process each, {platform.machine()} with "
        f"{os.cpu_count()} cores. Nothing consumes the batches: this is the loader alone.",
        "",
        "| loader | anonymous memory added | setup s | tokens/s (batches) "
        "| tokens/s (with setup) |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, r in (("naive (fastai v1: one int64 tensor)", naive), ("lading", ours)):
        lines.append(
            f"| {name} | {r['anon_mib']:,.1f} MiB | {r['setup_s']:.2f} | "
            f"{r['tokens_per_s']:,.0f} | {r['tokens_per_s_with_setup']:,.0f} |"
        )
    lines += [
        "",
        "| ratio | measured | target |",
        "|---|---:|---|",
        f"| lading / naive anonymous memory | {max(ours['anon_mib'], 0) / naive['anon_mib']:.4f} "
        "| <= 0.01 |",
        f"| lading / naive tokens/s (batches) | {ours['tokens_per_s'] / naive['tokens_per_s']:.2f}"
        " | >= 1 |",
        f"| lading / naive tokens/s (with setup) | "
        f"{ours['tokens_per_s_with_setup'] / naive['tokens_per_s_with_setup']:.2f} | >= 1 |",
    ]
    report = "\n".join(lines)
    print(report)
    write_section(
        HERE / "RESULTS.md",
        "Language model: loader",
        report,
        "python benchmarks/bench_lm.py",
        write=args.write,
    )


if __name__ == "__main__":
    main()
