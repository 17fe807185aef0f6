"""The ``lading`` command: argparse subcommands that call the library and print its answers.

One module per command group holds its commands and parsers: :mod:`lading.cli.stores`,
:mod:`lading.cli.train`, :mod:`lading.cli.lm`, :mod:`lading.cli.bench`. None imports torch at
the top, so building the parser (and ``lading lm build``, ``lading repartition``) stays light.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from lading import __version__
from lading.cli.bench import _add_bench, _default_world_sizes, bench_plan
from lading.cli.lm import _add_lm
from lading.cli.stores import add_repartition, add_store_commands, add_synth, describe
from lading.cli.train import _add_run_args, _add_train, add_rerank

__all__ = [
    "_add_run_args",
    "_default_world_sizes",
    "bench_plan",
    "build_parser",
    "describe",
    "main",
]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``lading`` command."""
    parser = argparse.ArgumentParser(
        prog="lading",
        description="Move training data from disk to RAM to GPU without a copy per process.",
    )
    parser.add_argument("--version", action="version", version=f"lading {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    add_store_commands(sub)
    _add_train(sub)
    _add_lm(sub)
    _add_bench(sub)
    add_repartition(sub)
    add_rerank(sub)
    add_synth(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``lading`` command; errors lading raises on purpose print as one line."""
    from lading.errors import LadingError

    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except BrokenPipeError:
        # the reader went away (`lading inspect STORE | head -1`): as the Python docs advise,
        # point stdout at devnull so the interpreter's final flush does not fail again
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except (LadingError, FileNotFoundError, FileExistsError, ImportError, ValueError) as e:
        print(f"lading {args.command}: {e}", file=sys.stderr)
        return 2
