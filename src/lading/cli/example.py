"""``lading example DIR``: what the examples of README and docs/ read, made offline
(:mod:`lading.bench.examples`)."""

from __future__ import annotations

import argparse
import warnings
from typing import Any


def _cmd_example(args: argparse.Namespace) -> int:
    from lading.bench.examples import ExampleLeftOutWarning, describe, make_example

    with warnings.catch_warnings(record=True) as left_out:
        warnings.simplefilter("always", ExampleLeftOutWarning)
        made = make_example(args.dir, passages=args.passages, queries=args.queries, seed=args.seed)
    print(describe(made))
    ours = [w for w in left_out if issubclass(w.category, ExampleLeftOutWarning)]
    for warning in left_out:
        if warning not in ours:  # not ours: shown as it would have been
            warnings.showwarning(
                warning.message, warning.category, warning.filename, warning.lineno
            )
    for warning in ours:
        print(f"not made: {warning.message}")
    but = ", but for what was not made" if ours else ""
    print(f"the examples in README.md and docs/ run in {args.dir} as written{but}")
    return 0


def add_example(sub: Any) -> None:
    """The parser of ``example``."""
    p = sub.add_parser(
        "example",
        help="make, offline, every file the examples of README and docs/ read (a small "
        "collection, runs, tokenizers, a tiny model, LM text, parquet sessions)",
        description="lading example DIR writes into DIR what the examples of README.md and "
        "docs/ read, under the names they use: collection.tsv, docs.tsv, docs.jsonl, "
        "queries.tsv, qrels.txt, bm25.run, tokenizer.json, bert-tokenizer/, tiny-bert/, "
        "wiki.jsonl, wiki/, code.txt, code/, sessions/. "
        "Nothing is downloaded; the model is built from a config with random weights.",
    )
    p.add_argument("dir", help="folder to write into (created; files of the same names replaced)")
    p.add_argument("--passages", type=int, default=500, help="documents (ids 0..N-1)")
    p.add_argument("--queries", type=int, default=50, help="queries, each with one relevant")
    p.add_argument("--seed", type=int, default=0, help="same seed, same files (default 0)")
    p.set_defaults(func=_cmd_example)
