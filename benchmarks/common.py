"""Helpers the benchmark scripts share: the real data, the 1M-passage corpus, a tokenizer, the
results file. Benchmarks import lading; they never copy it."""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

import lading
from lading.bench.synth import synth

HERE = Path(__file__).resolve().parent


def data_dir() -> Path | None:
    env = os.environ.get("LADING_DATA")
    for candidate in [Path(env)] if env else [HERE.parent.parent / "shared" / "data"]:
        if candidate.is_dir():
            return candidate
    return None


def make_corpora(n: int, work: Path) -> tuple[Path, Path, str]:
    """Two TSVs of ``n`` passages (integer ids, string ids) and where their text came from."""
    int_tsv, str_tsv = work / f"passages-{n}-int.tsv", work / f"passages-{n}-str.tsv"
    if int_tsv.exists() and str_tsv.exists():
        return int_tsv, str_tsv, (work / "origin.txt").read_text()
    real = data_dir()
    if real is not None:
        pool = real / "ir/normalized/msmarco-passage-trecdl1920-pool/docs.tsv"
        texts = [r.text for r in lading.read_records(pool)]
        origin = f"{len(texts):,} real MS MARCO passages ({pool.name} of the TREC DL 19/20 pool)"
    else:
        files = synth("passages", min(n, 50_000), work / "synth")
        texts = [r.text for r in lading.read_records(files.corpus)]
        origin = "synthetic passages (lading synth; real data not found)"
    rng = np.random.default_rng(0)
    picks = rng.integers(0, len(texts), n)
    with open(int_tsv, "w") as fi, open(str_tsv, "w") as fs:
        for i, k in enumerate(picks.tolist()):
            fi.write(f"{i}\t{texts[k]}\n")
            fs.write(f"msmarco_passage_{i}\t{texts[k]}\n")
    (work / "origin.txt").write_text(origin)
    return int_tsv, str_tsv, origin


def first(source: Path, n: int) -> Iterator[str]:
    """The texts of the first ``n`` documents of ``source`` (anything lading.lm reads)."""
    from lading.lm.texts import iter_texts

    return itertools.islice(iter_texts(source), n)


def bert_vocabulary(src: Path) -> Any:
    """A BERT-style WordPiece vocabulary of 30,522 trained on the first 20,000 passages."""
    from lading.stores.tokens import train_tokenizer

    texts = [r.text for _, r in zip(range(20_000), lading.read_records(src))]
    return train_tokenizer(texts, "wordpiece", 30_522)


# where a script's sections go unless --write: under the repository's bench-out/, which git
# ignores, so running a benchmark never leaves a clone dirty
OUT = HERE.parent / "bench-out" / "results"


def add_write_flag(parser: argparse.ArgumentParser) -> None:
    """``--write``: also update the tracked results file (default: only the copy in OUT)."""
    parser.add_argument(
        "--write",
        action="store_true",
        help=f"also rewrite the tracked benchmarks/*.md (default: write only under {OUT})",
    )


def write_section(path: Path, title: str, body: str, command: str, *, write: bool) -> Path:
    """Replace (or add) the ``## title`` section of a results file, keeping the others.

    With ``write`` the tracked file ``path`` (benchmarks/RESULTS.md) is rewritten; without it,
    a copy of it under :data:`OUT` (made from the tracked file the first time). Returns the file
    written.
    """
    target = path if write else OUT / path.name
    source = target if target.exists() else path
    text = source.read_text() if source.exists() else "# Benchmark results\n"
    marker = f"\n## {title}\n"
    section = f"{marker}\nReproduce: `{command}`\n\n{body}\n"
    if marker in text:
        head, rest = text.split(marker, 1)
        tail = rest[rest.find("\n## ") :] if "\n## " in rest else ""
        text = head + section + tail
    else:
        text = text.rstrip("\n") + "\n" + section
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    hint = "" if write else f" (tracked {path.name} unchanged; --write updates it)"
    print(f"section {title!r} written to {target}{hint}")
    return target


def spread(values: list[float], digits: int = 2) -> str:
    """``median (min-max)`` of ``values`` with ``digits`` decimals: a table cell of repeats."""
    return (
        f"{statistics.median(values):.{digits}f} "
        f"({min(values):.{digits}f}-{max(values):.{digits}f})"
    )


def cell(values: list[float], fmt: str = "{:.3f}") -> str:
    """``median [min-max]`` of ``values``, each as ``fmt``: a table cell of repeats."""
    mid = statistics.median(values)
    return f"{fmt.format(mid)} [{fmt.format(min(values))}-{fmt.format(max(values))}]"
