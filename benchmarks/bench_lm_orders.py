"""Local token corpora: the client CPU a token of finding windows' orders a run of batches at
a time against a batch at a time, side by side in one process.

    python benchmarks/bench_lm_orders.py [--tokens 20000000] [--repeats 5] [--write]

A synthetic corpus (Zipf words in log-normal documents of ~680 tokens, a word-level
vocabulary, built once under bench-out/) read for one epoch by ``LanguageModelLoader``
(windows of 2,049 tokens, batches of 8, no read-ahead, no step) in three window modes: the
exact shuffle over permuted documents (``Windows(2048)``), over the stored order
(``shuffle_documents=False``) and the locality shuffle (``block_tokens``, the remote
benchmark's blocks). Each mode is read by the route in the code (a run of
:data:`~lading.lm.modes.windows.ORDERS_RUN` batches' orders at once) and by the old one (each
batch's order alone, ``WindowsMode._order``), alternated, ``--repeats`` times; CPU is
``time.process_time`` over the epoch. Ratios are paired within a repeat.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from common import HERE, OUT, add_write_flag, cell, write_section
from lading.lm import LanguageModelLoader, TokenCorpus, Windows
from lading.lm.modes.windows import ORDERS_RUN, WindowsMode
from remote_lm_corpus import corpus_for

MODES = {
    "exact, documents permuted": lambda: Windows(2048),
    "exact, stored order": lambda: Windows(2048, shuffle_documents=False),
    "locality (blocks)": lambda: Windows(2048, shuffle_documents=False, block_tokens=137_567),
}


def epoch_cpu(corpus: TokenCorpus, mode: str, alone: bool) -> float:
    """Client CPU seconds a million tokens of one epoch of ``mode``; ``alone``: each batch's
    order computed by itself (the route before runs)."""
    run = WindowsMode.order
    if alone:
        WindowsMode.order = lambda self, seg, key, reading: self._order(seg, key, reading)  # type: ignore[method-assign]
    try:
        loader = LanguageModelLoader(corpus, 8, MODES[mode](), seed=1, read_ahead=0)
        cpu, tokens = time.process_time(), 0
        for x, _ in loader:
            tokens += x.numel()
        loader.close()
        return (time.process_time() - cpu) / tokens * 1e6
    finally:
        WindowsMode.order = run  # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=20_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    add_write_flag(parser)
    args = parser.parse_args()
    out = OUT.parent / "lm-orders"
    out.mkdir(parents=True, exist_ok=True)
    built = corpus_for(
        SimpleNamespace(synthetic=True, tokens=args.tokens, doc_tokens=680, share=1.0,
                        seq_len=2048, batch=8), out,
    )  # fmt: skip
    corpus = TokenCorpus.open(Path(built["local"]))
    figures: dict[tuple[str, bool], list[float]] = {}
    started, loads = time.time(), []
    for repeat in range(args.repeats):
        for mode in MODES:
            for alone in (False, True) if repeat % 2 else (True, False):
                loads.append(os.getloadavg()[0])
                cpu = epoch_cpu(corpus, mode, alone)
                figures.setdefault((mode, alone), []).append(cpu)
                print(f"{mode:28s} {'alone' if alone else 'runs':5s} {cpu:.4f} s/M", flush=True)
    body = render(figures, args, built, time.time() - started, loads)
    print(body)
    command = "python benchmarks/bench_lm_orders.py " + " ".join(sys.argv[1:])
    title = "Local token corpora: window orders a run at a time"
    write_section(HERE / "RESULTS.md", title, body, command, write=args.write)


def render(
    figures: dict[tuple[str, bool], list[float]],
    args: Any,
    built: dict[str, Any],
    seconds: float,
    loads: list[float],
) -> str:
    lines = [
        f"{built['n_tokens']:,} tokens ({built['origin']}, {built['documents']:,} documents), "
        "one epoch of windows of 2,049 tokens in batches of 8, no read-ahead, no step; "
        f"{args.repeats} repeats, the routes alternated, median [min-max]; load "
        f"{min(loads):.1f}-{max(loads):.1f}; {seconds:.0f} s in all.",
        "",
        f"| mode | a batch at a time, s / M tokens | {ORDERS_RUN} batches at a time | "
        "runs / alone, paired |",
        "|---|---:|---:|---:|",
    ]
    for mode in MODES:
        alone, runs = figures[mode, True], figures[mode, False]
        ratio = [r / a for r, a in zip(runs, alone)]
        alone_s, runs_s = cell(alone, "{:.4f}"), cell(runs, "{:.4f}")
        lines.append(f"| {mode} | {alone_s} | {runs_s} | {cell(ratio, '{:.2f}')} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
