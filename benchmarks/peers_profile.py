"""Where lading's time goes beside HF datasets and the dict: lookups and scan taken apart.

    python benchmarks/peers_profile.py bench-out/peers/synth-200000   # after bench_peers.py

Reads the stores bench_peers.py left (``lading``, ``hf``) and its TSV, warm, in one process,
and prints ns per document for each step of a lookup (id -> row through the index; copy and
decode of the text; the copy alone, as ``get_many_bytes`` returns it; the decode alone of bytes
already in RAM, the floor of any store that hands out a new ``str``; the dict, which hands out
an existing one) and for a scan (row-by-row loop, lading's Arrow path, HF's ``Dataset.iter``).
Best of 5 runs each: a lower bound on a shared machine, not a benchmark figure.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

import lading
from lading.bench.peers import HFDatasetStore
from lading.stores.layout import column_bytes
from lading.stores.shards import rows_bytes


def best_ns(fn: Callable[[], int], repeats: int = 5) -> float:
    """Fewest ns per document over ``repeats`` runs of ``fn`` (which returns its count)."""
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        count = fn()
        best = min(best, (time.perf_counter() - started) / count * 1e9)
    return best


def lookups(store: lading.PackedStore) -> dict[str, float]:
    ids = store.ids()
    rng = random.Random(0)
    batches = [rng.sample(ids, 64) for _ in range(200)]
    rows = [store.rows(b) for b in batches]
    column = store._maps().text
    owned = [[bytes(b) for b in store.get_many_bytes(batch)] for batch in batches]
    docs = dict(zip(ids, store.texts_range(0, len(store))))
    return {
        "get_many (whole lookup)": best_ns(lambda: sum(len(store.get_many(b)) for b in batches)),
        "  id -> row (index)": best_ns(lambda: sum(len(store.rows(b)) for b in batches)),
        "  row -> str (copy + decode)": best_ns(lambda: sum(len(column.texts(r)) for r in rows)),
        "  row -> bytes (copy only)": best_ns(
            lambda: sum(len(rows_bytes(column, r)) for r in rows)
        ),
        "  bytes in RAM -> str (decode only)": best_ns(
            lambda: sum(len([b.decode("utf-8") for b in batch]) for batch in owned)
        ),
        "get_many_bytes (whole lookup)": best_ns(
            lambda: sum(len(store.get_many_bytes(b)) for b in batches)
        ),
        "dict (an existing str)": best_ns(lambda: sum(len([docs[i] for i in b]) for b in batches)),
    }


def scans(store: lading.PackedStore, hf: HFDatasetStore) -> dict[str, float]:
    n = len(store)
    column = store._maps().text

    def loop() -> int:
        return sum(
            len(column.texts(np.arange(lo, min(lo + 1024, n), dtype=np.int64)))
            for lo in range(0, n, 1024)
        )

    def arrow() -> int:
        return sum(len(store.texts_range(lo, min(lo + 1024, n))) for lo in range(0, n, 1024))

    arrow()  # imports pyarrow
    return {
        "scan, row-by-row loop": best_ns(loop),
        "scan, Arrow (texts_range)": best_ns(arrow),
        "scan, HF Dataset.iter(1024)": best_ns(hf.scan),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("folder", type=Path, help="a bench_peers corpus folder (lading/, hf/)")
    folder = parser.parse_args().folder
    store = lading.PackedStore(folder / "lading")  # a folder: open_store would give the same
    hf = HFDatasetStore(folder / "hf")
    mean = column_bytes(store.meta, "text") / max(len(store), 1)
    print(f"{folder}: {len(store):,} documents, {mean:,.0f} bytes each on average")
    for name, ns in {**lookups(store), **scans(store, hf)}.items():
        print(f"{name:40s} {ns:9,.0f} ns/doc  {1e9 / ns / 1e6:7.2f}M docs/s")


if __name__ == "__main__":
    main()
