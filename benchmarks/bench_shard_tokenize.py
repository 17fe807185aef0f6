"""Client CPU per token of a sharded tokenizing build against the bare tokenizer, side by side.

    python benchmarks/bench_shard_tokenize.py [--docs 200000] [--shards 4] [--repeats 3] [--write]

Texts: ``--docs`` documents of real MS MARCO passages when the data is here
(:func:`common.make_corpora`), else synthetic ones, as JSONL; a byte-level BPE of 8,000 entries
trained on them locally. Each round, alternating which goes first, in this one process:

- bare: ``tokenizer.encode_batch_fast(texts, add_special_tokens=False)`` over the same texts in
  batches of 1,000 (the texts already in memory: the tokenizer's own cost);
- sharded: ``TokenCorpus.build_shard(src, dest, (i, n), tokenizer)`` for every ``i`` (reading
  the JSONL, tokenizing, writing and fsyncing the shard files), then ``TokenCorpus.merge``.

The bare leg loads the tokenizer afresh for each quarter (outside its timed window), as
each ``build_shard`` does: a BPE's word cache fills up to its capacity and then keeps what it
holds, so one tokenizer kept across the whole run encodes later texts with a cache of earlier
ones' words (single-threaded, the bare leg then read 1-28 % slower than the builds that load
their own).

The two go in turn a shard at a time (bare over the ``i``-th quarter of the texts, then shard
``i``, or the other way round, alternating): whole runs in turn gave ratios of 0.77-1.23 on
this shared 2-core machine, where the tokenizer's own CPU per token moved by 1.5x between
runs.

CPU is this process's user + system time (``time.process_time``: every thread, the
tokenizer's pool included) per token; the ratio is sharded over bare. datatrove, the other
system this is set beside, is measured by ``bench_tokenize_datatrove.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from common import HERE, add_write_flag, make_corpora, write_section


def bare(tok: object, texts: list[str]) -> tuple[float, int]:
    started, tokens = time.process_time(), 0
    encode = tok.encode_batch_fast  # type: ignore[attr-defined]
    for lo in range(0, len(texts), 1000):
        tokens += sum(len(e.ids) for e in encode(texts[lo : lo + 1000], add_special_tokens=False))
    return time.process_time() - started, tokens


class EncodeClock:
    """Wraps :func:`lading.lm.tokenize.encoder` so that the CPU the build spends inside
    ``encode_batch_fast`` is counted (process CPU around each call: the tokenizer's pool
    included): the build's total over it is the build's CPU over its own tokenizer's, taken in
    the same run, so the machine's drift (the bare tokenizer's CPU a token moved by 1.3x from
    round to round) falls on both alike."""

    def __init__(self) -> None:
        import lading.lm.tokenize as tokenize

        self.module, self.seconds = tokenize, 0.0
        self.original = tokenize.encoder

    def __enter__(self) -> EncodeClock:
        def timed(tok: object) -> object:
            encode = self.original(tok)

            def call(*args: object, **kwargs: object) -> object:
                started = time.process_time()
                try:
                    return encode(*args, **kwargs)
                finally:
                    self.seconds += time.process_time() - started

            return call

        self.module.encoder = timed
        return self

    def __exit__(self, *exc: object) -> None:
        self.module.encoder = self.original


def paired(
    texts: list[str], src: Path, dest: Path, tok_path: Path, shards: int, first: int
) -> tuple[float, int, float, int, float]:
    """One round: for each shard ``i``, the bare tokenizer over the ``i``-th quarter of the
    texts and ``build_shard`` of shard ``i``, the two in turn (``first``: which leads), then
    the merge (counted with the build). Slices of a few seconds each, so a change of the
    machine's speed during the round falls on both alike. (bare CPU, tokens, sharded CPU,
    tokens, the sharded build's CPU inside its tokenizer's encode calls)."""
    from lading.lm import TokenCorpus
    from lading.stores.tokens import load_tokenizer

    shutil.rmtree(dest, ignore_errors=True)
    bare_cpu = bare_tokens = shard_cpu = 0.0
    clock = EncodeClock()
    for i in range(shards):
        part = texts[i * len(texts) // shards : (i + 1) * len(texts) // shards]
        for leg in (0, 1) if (first + i) % 2 == 0 else (1, 0):
            if leg == 0:  # a tokenizer of its own, as each build_shard loads one (untimed)
                cpu, tokens = bare(load_tokenizer(tok_path), part)
                bare_cpu, bare_tokens = bare_cpu + cpu, bare_tokens + tokens
            else:
                started = time.process_time()
                with clock:
                    TokenCorpus.build_shard(
                        src, dest, (i, shards), tok_path, append_eos=False, progress=False
                    )
                shard_cpu += time.process_time() - started
    started = time.process_time()
    corpus = TokenCorpus.merge(dest)
    shard_cpu += time.process_time() - started
    return bare_cpu, int(bare_tokens), shard_cpu, corpus.n_tokens, clock.seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=200_000)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    add_write_flag(parser)
    args = parser.parse_args()
    from lading.stores.tokens import save_tokenizer, train_tokenizer

    with tempfile.TemporaryDirectory(prefix="bench-shard-tok-") as tmp:
        work = Path(tmp)
        tsv, _, origin = make_corpora(args.docs, work)
        texts = [line.split("\t", 1)[1] for line in tsv.read_text().splitlines()]
        src = work / "docs.jsonl"
        with open(src, "w") as f:
            f.writelines(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(texts))
        tok_path = work / "t.json"
        save_tokenizer(train_tokenizer(iter(texts[:50_000]), "bpe", 8000), tok_path)
        ratios, bare_rate, shard_rate, loads, inside = [], [], [], [], []
        for r in range(args.repeats):
            loads.append(os.getloadavg()[0])
            b_cpu, b_tok, s_cpu, s_tok, enc_cpu = paired(
                texts, src, work / "corpus", tok_path, args.shards, r
            )
            assert b_tok == s_tok, (b_tok, s_tok)  # the same ids: the same count
            bare_rate.append(1e9 * b_cpu / b_tok)
            shard_rate.append(1e9 * s_cpu / s_tok)
            ratios.append((s_cpu / s_tok) / (b_cpu / b_tok))
            inside.append(s_cpu / enc_cpu)
            print(
                f"round {r}: bare {bare_rate[-1]:.0f} ns/token, sharded {shard_rate[-1]:.0f}, "
                f"build / its own encode calls {inside[-1]:.3f}"
            )

    def spread(v: list[float], f: str = "{:.0f}") -> str:
        return f"{f.format(statistics.median(v))} ({f.format(min(v))}-{f.format(max(v))})"

    body = (
        f"{args.docs:,} documents ({origin}), byte-level BPE of 8,000 entries, {args.shards} "
        f"shards built one after another in one process and merged; machine: {os.cpu_count()} "
        f"cores (shared), Python {sys.version.split()[0]}, load (1 min) "
        f"{min(loads):.1f}-{max(loads):.1f}; {args.repeats} rounds alternating, median "
        "(min-max). CPU: the process's user + system seconds (every thread) per token.\n\n"
        "| bare encode_batch_fast, ns CPU/token | sharded build + merge, ns CPU/token | "
        "sharded / bare | sharded build / its own encode calls |\n|---:|---:|---:|---:|\n"
        f"| {spread(bare_rate)} | {spread(shard_rate)} | **{spread(ratios, '{:.2f}')}** | "
        f"**{spread(inside, '{:.3f}')}** |\n\n"
        "The last column is the build's CPU (merge included) over the CPU it spent inside its "
        "tokenizer's `encode_batch_fast` calls, both in the same run.\n\n"
        "datatrove, side by side: `benchmarks/bench_tokenize_datatrove.py`."
    )
    command = "python benchmarks/bench_shard_tokenize.py " + " ".join(sys.argv[1:])
    title = "Tokenizing in shards: client CPU per token (issue 49)"
    write_section(HERE / "RESULTS.md", title, body, command, write=args.write)


if __name__ == "__main__":
    main()
