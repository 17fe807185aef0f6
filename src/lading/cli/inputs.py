"""Argument types that check an input exists (and is what it should be) when the command line
is read: a missing ``--queries`` is reported before a tokenizer is trained or a store is built,
not after minutes (hours at MS MARCO size) of work. Each failure is argparse's one-line error
naming the flag, with exit code 2."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def existing(value: str) -> str:
    """A file or folder that exists."""
    if not Path(value).exists():
        raise argparse.ArgumentTypeError(f"{value} does not exist")
    return value


def store_location(value: str) -> str:
    """A store: a folder that exists, or an object-store URL (``s3://bucket/prefix/name``)."""
    if "://" in value and not value.startswith("file://"):
        return value
    return existing(value)


def local_model(value: str) -> str:
    """A model folder on this machine (lading never downloads one)."""
    path = Path(value)
    if not path.is_dir():
        raise argparse.ArgumentTypeError(
            f"{value} is not a model folder on this machine (lading does not download models): "
            "pass OUT/model of `lading train cross-encoder` or a save_pretrained() folder"
        )
    return value


def model_or_tiny(value: str) -> str:
    """``tiny`` (a small BERT made locally) or a local model folder."""
    return value if value == "tiny" else local_model(value)


def tokenizer(value: str) -> str:
    """A tokenizer.json (or a folder holding one) that ``tokenizers`` can load."""
    from lading.stores.tokens import load_tokenizer

    try:
        load_tokenizer(value)
    except (FileNotFoundError, ValueError) as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return value


def positive_int(value: str) -> int:
    """A whole number of at least 1 (a count or a length: 0 or less means nothing)."""
    return _int_at_least(value, 1)


def nonnegative_int(value: str) -> int:
    """A whole number of at least 0 (0 a meaningful count: e.g. no DataLoader workers)."""
    return _int_at_least(value, 0)


def clip_norm(value: str) -> float | None:
    """``--clip``: the gradients' largest norm, a finite number of at least 0 (0: no clipping)."""
    try:
        number = float(value)
    except ValueError:
        number = float("nan")
    if not number >= 0 or number == float("inf"):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a gradient norm; pass a number such as 1.0 (0: no clipping)"
        )
    return number or None


def _int_at_least(value: str, least: int) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a whole number; pass an int of at least {least}"
        ) from None
    if number < least:
        raise argparse.ArgumentTypeError(f"must be at least {least}, got {number}")
    return number


# what a train step's autocast may be (lading.ir.train.PRECISION, named without importing torch)
PRECISIONS: tuple[str, ...] = ("fp32", "bf16", "fp16")


def add_choice(
    p: argparse.ArgumentParser, flag: str, choices: Sequence[str], help: str, **more: Any
) -> None:
    """A flag taking one of ``choices``, the first by default (``default=`` in ``more`` for
    another; the rest of ``more`` as ``add_argument`` takes it). Its help ends with the
    default (``(default: raise)``) unless it says it already."""
    more.setdefault("default", choices[0])
    said = help if "default" in help else f"{help} (default: {more['default']})"
    p.add_argument(flag, choices=list(choices), help=said, **more)


def add_precision(p: argparse.ArgumentParser, help: str) -> None:
    """``--precision``: the autocast precision of a train step (``lading train cross-encoder``,
    the bench's train cells), fp32 by default."""
    add_choice(p, "--precision", PRECISIONS, help)


def add_raise_or_skip(p: argparse.ArgumentParser, flag: str, help: str) -> None:
    """A policy flag for bad input (``--on-error``, ``--on-missing``): ``raise`` (the default)
    stops at the first, naming it; ``skip`` leaves it out and says how much was left out."""
    add_choice(p, flag, ("raise", "skip"), help)


def query_column_names(value: str) -> tuple[str, ...]:
    """``--query-columns id,text,type`` as the names ``read_queries`` takes (``columns=``),
    checked while the command line is read (before a model is loaded or trained)."""
    from lading.ir.inputs import check_query_columns

    names = tuple(value.split(","))
    try:
        check_query_columns(names)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{value}: {e}") from None
    return names


def add_query_columns(p: Any) -> None:
    """``--query-columns``, of every command that reads ``--queries``."""
    p.add_argument(
        "--query-columns",
        type=query_column_names,
        help="with a TSV --queries: its column names, comma-separated, one per column "
        "(default: id,text); a wider TSV names every column, e.g. id,text,type (the columns "
        "but id and text are left out)",
    )
