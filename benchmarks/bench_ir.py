"""Cross-encoder batches: pre-tokenized vs tokenizing in the collator, and loader memory over time.

    python benchmarks/bench_ir.py [--n 1000000] [--out bench-out/stores] [--seconds 60]

1. Pairs/s of one loader worker building batches of 32 groups x 8 documents at max_length 512,
   measured in one process side by side: the study's way (tokenize query and document text in
   the collator) and lading's (documents' token ids read from the store, only queries encoded).
2. A 4-worker ``lading.loader`` over the 1M-passage store, run for ``--seconds``: anonymous
   memory and PSS of the main process and every worker sampled each second; it must not grow.

Writes the "Ranker batches" section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import os

# One loader worker is one core: tokenizers' thread pool would otherwise give the text path
# both cores (and after a fork a DataLoader worker runs single-threaded anyway).
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import argparse
import platform
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

import lading
from common import HERE, add_write_flag, bert_vocabulary, make_corpora, write_section
from lading.ir import CrossEncoderCollator, TrainingGroups
from lading.train.procmem import tree_memory

GROUPS, GROUP_SIZE, MAX_LENGTH = 32, 8, 512


def query_set(
    store: lading.PackedStore, n_queries: int = 2000
) -> tuple[dict[str, str], dict[str, dict[str, int]]]:
    """Queries made of words of one passage each (real text), that passage judged relevant."""
    rng = np.random.default_rng(0)
    rows = rng.choice(len(store), n_queries, replace=False)
    ids = store.ids_at(rows)
    queries, qrels = {}, {}
    for q, (doc_id, text) in enumerate(zip(ids, store.texts_at(rows))):
        words = text.split()
        picks = rng.choice(len(words), min(len(words), 6), replace=False)
        queries[str(q)] = " ".join(words[i] for i in sorted(picks))
        qrels[str(q)] = {doc_id: 1}
    return queries, qrels


def pairs_per_second(
    collate: CrossEncoderCollator, groups: TrainingGroups, seconds: float
) -> float:
    """Items fetched and collated into batches, as one worker does, for ``seconds``."""
    rng = np.random.default_rng(1)
    done, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        items = [groups[int(i)] for i in rng.integers(0, len(groups), GROUPS)]
        batch = collate(items)
        done += batch["input_ids"].shape[0]
    return done / (time.perf_counter() - started)


def loader_memory(
    groups: TrainingGroups, collate: CrossEncoderCollator, seconds: float
) -> list[dict[str, float]]:
    """Run a 4-worker loader for ``seconds``; memory of the process tree each second."""
    data = lading.loader(groups, GROUPS, collate, num_workers=4, seed=0)
    samples: list[dict[str, float]] = []
    stop = threading.Event()

    def probe() -> None:
        started = time.perf_counter()
        while not stop.is_set():
            procs = tree_memory()
            samples.append(
                {
                    "t": time.perf_counter() - started,
                    "anon_mib": sum(p.anon for p in procs) / 2**20,
                    "pss_mib": sum(p.pss for p in procs) / 2**20,
                    "processes": len(procs),
                }
            )
            stop.wait(1.0)

    thread = threading.Thread(target=probe, daemon=True)
    started = time.perf_counter()
    thread.start()
    pairs, epoch = 0, 0
    while time.perf_counter() - started < seconds:
        data.set_epoch(epoch)
        for batch in data:
            pairs += batch["input_ids"].shape[0]
            if time.perf_counter() - started >= seconds:
                break
        epoch += 1
    stop.set()
    thread.join()
    samples.append({"t": time.perf_counter() - started, "pairs": pairs})
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--out", default="bench-out/stores")
    parser.add_argument("--seconds", type=float, default=60.0, help="loader memory run length")
    parser.add_argument("--pair-seconds", type=float, default=10.0)
    add_write_flag(parser)
    args = parser.parse_args()
    work = Path(args.out)
    work.mkdir(parents=True, exist_ok=True)
    int_tsv, _, origin = make_corpora(args.n, work)
    tok_path = work / "bert-like-tokenizer.json"
    if not tok_path.exists():
        bert_vocabulary(int_tsv).save(str(tok_path))
    tokens = lading.build_store(
        int_tsv,
        work / f"{int_tsv.stem}.tokens512",
        tokenizer=tok_path,
        max_length=MAX_LENGTH,
        progress=False,
    )
    plain = lading.build_store(int_tsv, work / f"{int_tsv.stem}.packed", progress=False)
    queries, qrels = query_set(plain)
    fast_groups = TrainingGroups(tokens, queries, qrels, group_size=GROUP_SIZE, sampling="random")
    slow_groups = TrainingGroups(plain, queries, qrels, group_size=GROUP_SIZE, sampling="random")
    fast = CrossEncoderCollator(tokens, max_length=MAX_LENGTH)
    slow = CrossEncoderCollator(plain, tok_path, max_length=MAX_LENGTH, use_tokens=False)
    slow_rate = pairs_per_second(slow, slow_groups, args.pair_seconds)
    fast_rate = pairs_per_second(fast, fast_groups, args.pair_seconds)
    print(
        f"pairs/s: text {slow_rate:,.0f}, tokens {fast_rate:,.0f}, "
        f"ratio {fast_rate / slow_rate:.1f}",
        flush=True,
    )
    samples = loader_memory(fast_groups, fast, args.seconds)
    report = render(slow_rate, fast_rate, samples, args.n, origin)
    print(report)
    write_section(
        HERE / "RESULTS.md",
        "Ranker batches",
        report,
        "python benchmarks/bench_ir.py",
        write=args.write,
    )


def render(slow: float, fast: float, samples: list[dict[str, Any]], n: int, origin: str) -> str:
    probes = [s for s in samples if "anon_mib" in s]
    steady = probes[len(probes) // 4 :] or probes  # after the workers have started and warmed
    first, last = steady[0], steady[-1]
    pairs = samples[-1]["pairs"]
    lines = [
        f"Corpus: {n:,} passages resampled from {origin}. Machine: {platform.machine()}, "
        f"{os.cpu_count()} cores. Batches of {GROUPS} groups x {GROUP_SIZE} documents, "
        f"max_length {MAX_LENGTH}, a BERT-style WordPiece vocabulary of 30,522 trained here. "
        "One process on one core (TOKENIZERS_PARALLELISM=false), as one DataLoader worker.",
        "",
        "| collator | pairs/s (one process) |",
        "|---|---:|",
        f"| text: tokenize query and document in the collator (the study) | {slow:,.0f} |",
        f"| tokens: document ids from the store, queries encoded | {fast:,.0f} |",
        f"| ratio | {fast / slow:.1f} (target >= 10) |",
        "",
        f"A 4-worker `lading.loader` over the store for {last['t']:.0f} s ({pairs:,} pairs, "
        f"{len(probes)} probes of the main process and its workers):",
        "",
        "| | anonymous memory, all processes | PSS, all processes |",
        "|---|---:|---:|",
        f"| at {first['t']:.0f} s | {first['anon_mib']:,.1f} MiB | {first['pss_mib']:,.1f} MiB |",
        f"| at {last['t']:.0f} s | {last['anon_mib']:,.1f} MiB | {last['pss_mib']:,.1f} MiB |",
        f"| growth | {last['anon_mib'] - first['anon_mib']:+,.1f} MiB | "
        f"{last['pss_mib'] - first['pss_mib']:+,.1f} MiB |",
        f"| peak | {max(p['anon_mib'] for p in probes):,.1f} MiB | "
        f"{max(p['pss_mib'] for p in probes):,.1f} MiB |",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
