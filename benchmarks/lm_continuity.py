"""Does BPTT continuity matter? The same LSTM trained with and without it, side by side.

    python benchmarks/lm_continuity.py [--steps 800] [--out bench-out/lm]

On the Wikipedia sample of ../shared/data/lm (WikiExtractor JSONL): a byte-level BPE tokenizer
trained here, a TokenCorpus, then two runs of ``lading train lm`` that differ only in
``--break-continuity`` (the rows of every batch shuffled, so each row's hidden state comes from
another stream). Validation perplexity on held-out documents is recorded along the way. Writes
the "Language model: continuity" section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
from pathlib import Path

from common import HERE, add_write_flag, data_dir, first, write_section
from lading.lm import TokenCorpus
from lading.lm.train import LMConfig, train_lm
from lading.stores.tokens import save_tokenizer, train_tokenizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=800)
    parser.add_argument("--eval-every", type=int, default=200)
    parser.add_argument("--vocab-size", type=int, default=2000)
    parser.add_argument("--out", default="bench-out/lm")
    add_write_flag(parser)
    args = parser.parse_args()
    root = data_dir()
    if root is None:
        raise SystemExit("the Wikipedia sample is in ../shared/data/lm; set LADING_DATA")
    source = root / "lm/enwiki-2015-wikiextractor.jsonl"
    out = Path(args.out)
    tok = save_tokenizer(
        train_tokenizer(first(source, 3000), "bpe", args.vocab_size),
        out / f"bpe{args.vocab_size}.json",
    )
    corpus = TokenCorpus.build(source, out / f"corpus{args.vocab_size}", tok, progress=False)
    runs = {}
    for broken in (False, True):
        name = "broken" if broken else "continuous"
        config = LMConfig(
            corpus=corpus.path,
            out=out / name,
            steps=args.steps,
            batch_size=32,
            bptt=70,
            emb=128,
            hidden=256,
            layers=2,
            dropout=0.1,
            lr=3e-3,
            eval_every=args.eval_every,
            eval_batches=None,
            log_every=max(1, min(50, args.steps // 4)),  # a few records however short
            parallel="none",
            break_continuity=broken,
            progress=False,
        )
        for stale in (out / name / "log.jsonl",):
            stale.unlink(missing_ok=True)
        runs[name] = train_lm(config)
        print(name, json.dumps(runs[name]["evaluations"]), runs[name]["valid_ppl"], flush=True)
    rates = {name: _rate(out / name) for name in runs}
    lines = [
        f"Corpus: {source.name} ({len(corpus):,} articles, {corpus.n_tokens:,} tokens with a "
        f"{args.vocab_size:,}-entry byte-level BPE trained here; 2% of articles held out). "
        f"LSTM 2 x 256 (embedding 128), batch 32, bptt 70 (fastai jitter), Adam 3e-3, "
        f"{args.steps} steps, one process on {platform.machine()} with {os.cpu_count()} cores.",
        "",
        "| step | validation perplexity, continuity kept | continuity broken (rows shuffled) |",
        "|---:|---:|---:|",
    ]
    for a, b in zip(runs["continuous"]["evaluations"], runs["broken"]["evaluations"]):
        lines.append(f"| {a['step']} | {a['valid_ppl']:.1f} | {b['valid_ppl']:.1f} |")
    cont, brok = runs["continuous"]["valid_ppl"], runs["broken"]["valid_ppl"]
    lines += [
        f"| end | {cont:.1f} | {brok:.1f} |",
        "",
        f"Broken continuity ends {100 * (brok / cont - 1):+.1f}% in perplexity. Training "
        f"throughput {rates['continuous']:,.0f} tokens/s (the model, not the loader, is "
        "the limit here).",
    ]
    report = "\n".join(lines)
    print(report)
    write_section(
        HERE / "RESULTS.md",
        "Language model: continuity",
        report,
        "python benchmarks/lm_continuity.py",
        write=args.write,
    )


def _rate(run: Path) -> float:
    """Mean tokens/s of the log's records after the first (its window holds the warm-up),
    or of the first where it is the only one."""
    records = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    timed = records[1:] or records
    if not timed:
        raise SystemExit(f"{run}/log.jsonl holds no record: give --steps of at least 1")
    return sum(r["tokens_per_s"] for r in timed) / len(timed)


if __name__ == "__main__":
    main()
