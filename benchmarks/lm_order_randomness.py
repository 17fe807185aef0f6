"""How random the LM window orders are, the orders alone (no corpus, no I/O).

For ``--windows`` windows read in batches of ``--batch``, over ``--seeds`` seeds and epochs
0-2, each order's mean batch span (largest - smallest window of a batch over the windows; a
uniform draw: ~0.77 at batches of 8), the share of a batch's pairs within 1 % of the corpus of
each other (uniform: ~0.02), and, for the blocks' own order, positions left in place (uniform:
1). ``--old FILE`` also measures the Feistel order of another ``order.py`` (e.g. one taken from
git history) side by side. Prints a Markdown table; median [min-max] over seeds and epochs.

    python benchmarks/lm_order_randomness.py --windows 1953 --seeds 10
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from lading.lm import blocks
from lading.loading import order


def batch_figures(windows: np.ndarray, batch: int) -> tuple[float, float]:
    """(mean batch span, share of a batch's pairs within 1 % of the corpus) of an order."""
    n = len(windows)
    usable = n - n % batch
    rows = windows[:usable].reshape(-1, batch).astype(np.float64) / n
    span = float(np.mean(rows.max(axis=1) - rows.min(axis=1)))
    i, j = np.triu_indices(batch, 1)
    close = np.abs(rows[:, i] - rows[:, j]) < 0.01
    return span, float(close.mean())


def _blocks(index: np.ndarray, per: int, buffer: int) -> Callable[[int, int], np.ndarray]:
    """The locality shuffle's order of ``index`` (blocks of ``per`` windows, ``buffer``)."""
    return lambda seed, epoch: blocks.block_order(index, len(index), per, buffer, seed, epoch)


def spread(values: list[float]) -> str:
    return f"{np.median(values):.3f} [{min(values):.3f}-{max(values):.3f}]"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=1953)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--old", help="another order.py whose Feistel order to measure too")
    args = parser.parse_args(argv)
    n, seeds = args.windows, range(args.seeds)
    index = np.arange(n)
    rows: list[tuple[str, Callable[[int, int], np.ndarray]]] = [
        ("numpy random permutation (the reference)",
         lambda s, e: np.random.default_rng([s, e]).permutation(n)),
        ("exact global shuffle (Feistel order)",
         lambda s, e: order.feistel_permutation(index, n, s, e)),
    ]  # fmt: skip
    if args.old:
        spec = importlib.util.spec_from_file_location("order_old", args.old)
        assert spec is not None and spec.loader is not None
        old: Any = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(old)
        rows.append(
            ("exact global shuffle, the other order.py",
             lambda s, e: old.feistel_permutation(index, n, s, e))
        )  # fmt: skip
    for per, buffer in itertools.product((12, 134), (4, 16)):
        rows.append((f"blocks of {per} windows, buffer {buffer}", _blocks(index, per, buffer)))
    print(f"{n:,} windows, batches of {args.batch}, seeds 0-{args.seeds - 1} x epochs 0-2")
    print("| order | batch span | pairs within 1 % | epoch 1 = epoch 0 |")
    print("|---|---:|---:|---:|")
    for name, draw in rows:
        spans, close, same = [], [], 0
        for seed in seeds:
            drawn = [draw(seed, epoch) for epoch in range(3)]
            same += int(np.array_equal(drawn[0], drawn[1]))
            for w in drawn:
                s, c = batch_figures(np.asarray(w), args.batch)
                spans.append(s)
                close.append(c)
        print(f"| {name} | {spread(spans)} | {spread(close)} | {same} of {args.seeds} |")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
