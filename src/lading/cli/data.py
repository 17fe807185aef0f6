"""``lading`` commands that write data other than stores: synth (a synthetic collection) and
repartition (parquet into row groups for N readers)."""

from __future__ import annotations

import argparse
from typing import Any

from lading.cli.inputs import nonnegative_int, positive_int


def _cmd_synth(args: argparse.Namespace) -> int:
    from lading.bench.synth import default_workers, synth

    files = synth(
        args.kind,
        args.n,
        args.out,
        queries=args.queries,
        seed=args.seed,
        corpus_format=args.corpus_format,
        workers=args.workers or default_workers(),
    )
    for name, path in files.__dict__.items():
        print(f"{name:8s} {path}")
    return 0


def _cmd_repartition(args: argparse.Namespace) -> int:
    from lading.cli.stores import said_on_stderr
    from lading.errors import SkippedFilesWarning
    from lading.tabular.repartition import repartition

    with said_on_stderr("lading repartition", SkippedFilesWarning):  # one line each
        done = repartition(
            args.src,
            args.dst,
            world_size=args.world_size,
            workers=args.workers,
            row_group_size=args.row_group_size,
        )
    print(done)
    return 0


def add_repartition(sub: Any) -> None:
    """The parser of ``repartition``."""
    p = sub.add_parser("repartition", help="rewrite parquet into row groups for N readers")
    p.add_argument(
        "src",
        nargs="+",
        help="parquet files or folders (a folder is read recursively, leaving out dst, the "
        "scratch folders of killed runs; another repartition output inside it is refused)",
    )
    p.add_argument(
        "dst",
        help="folder to write; an earlier output there is replaced atomically (never mixed "
        "with new files), any other non-empty folder is refused",
    )
    p.add_argument(
        "--world-size", type=positive_int, default=1, help="ranks that will read it (default 1)"
    )
    p.add_argument(
        "--workers",
        type=nonnegative_int,
        default=1,
        help="DataLoader workers per rank (0: the main process reads, as 1)",
    )
    p.add_argument("--row-group-size", type=positive_int, help="rows per group wanted")
    p.set_defaults(func=_cmd_repartition)


def add_synth(sub: Any) -> None:
    """The parser of ``synth``."""
    p = sub.add_parser("synth", help="write a deterministic MS MARCO-shaped collection")
    p.add_argument(
        "kind",
        choices=["passages", "documents"],
        help="MS MARCO passages (collection.tsv) or documents (docs.jsonl or docs.tsv)",
    )
    p.add_argument("n", type=int, help="number of documents")
    p.add_argument("out", help="folder to write")
    p.add_argument(
        "--queries", type=positive_int, help="number of queries (default n/100, 10..5000)"
    )
    p.add_argument("--seed", type=int, default=0, help="same seed, same bytes (default 0)")
    p.add_argument(
        "--format",
        dest="corpus_format",
        choices=["jsonl", "tsv"],
        help="documents: docs.jsonl (default) or docs.tsv (docid, url, title, body)",
    )
    p.add_argument(
        "--workers",
        type=int,
        help="processes generating the corpus (default: every core; same bytes for any number)",
    )
    p.set_defaults(func=_cmd_synth)
