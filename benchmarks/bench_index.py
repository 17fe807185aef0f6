"""Id lookups by kind of id: ``store.get_many`` of 64 ids against a Python dict of the same texts.

    python benchmarks/bench_index.py [--n 1000000] [--baseline /work/main/src] [--write]

One store of ``n`` documents per kind of id (the texts: MS MARCO passages resampled, as in
bench_stores.py), ids of row i spelled as:

- ``runs``: ``i`` (``0..n-1`` in row order: one run, the runs index), looked up as ``int`` and,
  separately, as ``str``;
- ``dense``: ``0..n-1`` shuffled (a dense table), looked up as ``int`` and as ``str``;
- ``sparse``: ``7i+3``, as ``int``; ``very sparse``: distinct random integers below 2**40 (the
  sorted-int index), as ``int``;
- ``MS MARCO docs``: ``D<number>`` (``D1555982``), and ``ClueWeb``
  (``clueweb12-0001wb-02-01234``): the hash index, as ``str``.

Each (kind, code) pair runs in a fresh process, which opens the store, builds the dict
``{id: text}`` from the store's own texts, draws ``--batches`` batches of 64 ids (uniform
random rows) once, checks that both give the same texts, and then times one window over all
batches for the dict (``[d[i] for i in ids]``) and one for ``store.get_many(ids)``, alternating
which goes first, ``--repeats`` times; the ratio is store / dict within each repeat (median and
min-max reported). The codes: this checkout with its C helper, the same without it
(``LADING_NATIVE=0``: the numpy route) and, with ``--baseline SRC``, the lading at SRC (e.g.
main's), each reading a store it built itself.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from common import HERE, add_write_flag, data_dir, write_section

BATCH = 64
KINDS: dict[str, tuple[str, str, str]] = {  # kind -> (shown as, store, query spells ids as)
    "runs-int": ("0..n-1 in order, int ids", "runs", "int"),
    "runs-str": ("0..n-1 in order, str ids", "runs", "str"),
    "dense-int": ("0..n-1 shuffled, int ids", "dense", "int"),
    "dense-str": ("0..n-1 shuffled, str ids", "dense", "str"),
    "sparse": ("sparse 7i+3, int ids", "sparse", "int"),
    "very-sparse": ("very sparse (random < 2**40), int ids", "very-sparse", "int"),
    "msmarco-docs": ("MS MARCO docs style", "msmarco-docs", "str"),
    "clueweb": ("ClueWeb style", "clueweb", "str"),
}


def spell_ids(store: str, n: int) -> list[str]:
    """The id of each row for a kind of store (distinct, deterministic)."""
    rng = np.random.default_rng(7)
    if store == "runs":
        return [str(i) for i in range(n)]
    if store == "dense":
        return [str(i) for i in rng.permutation(n).tolist()]
    if store == "sparse":
        return [str(7 * i + 3) for i in range(n)]
    if store == "very-sparse":
        values = np.unique(rng.integers(0, 2**40, n + n // 10))[:n]
        return [str(v) for v in rng.permutation(values).tolist()]
    if store == "msmarco-docs":  # MS MARCO v1 documents: D followed by up to 7 digits
        return [f"D{v}" for v in rng.permutation(max(3_300_000, n))[:n].tolist()]
    if store == "clueweb":
        order = rng.permutation(n).tolist()
        return [
            f"clueweb12-{i // 50_000:04d}wb-{i // 5_000 % 10:02d}-{i % 5_000:05d}" for i in order
        ]
    raise ValueError(f"unknown store {store!r}")


def passages(n: int) -> tuple[list[str], str]:
    """``n`` passages resampled from the real MS MARCO pool (synthetic when it is absent)."""
    real = data_dir()
    pool = real / "ir/normalized/msmarco-passage-trecdl1920-pool/docs.tsv" if real else None
    if pool is not None and pool.exists():
        with open(pool, encoding="utf-8") as f:
            texts = [line.rstrip("\n").split("\t", 1)[1] for line in f]
        origin = f"{len(texts):,} real MS MARCO passages (the TREC DL 19/20 pool)"
    else:
        from lading.bench.synth import synth

        files = synth("passages", min(n, 50_000), Path(os.environ.get("TMPDIR", "/tmp")))
        with open(files.corpus, encoding="utf-8") as f:
            texts = [line.rstrip("\n").split("\t", 1)[1] for line in f]
        origin = "synthetic passages (lading synth; the real pool was not found)"
    picks = np.random.default_rng(0).integers(0, len(texts), n).tolist()
    return [texts[k] for k in picks], origin


def write_sources(n: int, work: Path) -> str:
    """One TSV per kind of store under ``work``; returns where the texts came from."""
    work.mkdir(parents=True, exist_ok=True)
    origin_file = work / "origin.txt"
    if origin_file.exists():
        return origin_file.read_text()
    texts, origin = passages(n)
    for store in sorted({store for _, store, _ in KINDS.values()}):
        with open(work / f"{store}.tsv", "w", encoding="utf-8") as f:
            f.writelines(f"{i}\t{t}\n" for i, t in zip(spell_ids(store, n), texts))
    origin_file.write_text(origin)
    return origin


def child(kind: str, store_dir: str, tsv: str, batches: int, repeats: int) -> dict[str, Any]:
    """In this process: build or open the store, then time dict and get_many side by side."""
    import lading

    store = lading.build_store(tsv, store_dir)  # reused when built already
    ids = store.ids()
    as_int = KINDS[kind][2] == "int"
    keys: list[Any] = [int(i) for i in ids] if as_int else ids
    texts = store.texts_range(0, len(ids))
    table = dict(zip(keys, texts))
    del ids, texts
    rows = np.random.default_rng(1).integers(0, len(keys), (batches, BATCH)).tolist()
    queries = [[keys[r] for r in batch] for batch in rows]
    del rows
    for batch in queries[:50]:
        if store.get_many(batch) != [table[i] for i in batch]:
            raise AssertionError(f"{kind}: get_many and the dict disagree on {batch[:3]}...")
    rates, parts, load = measure(store, table, queries, repeats)
    native = sys.modules.get("lading.disk.native")
    return {
        "rates": rates,
        "ratios": [s / d for s, d in zip(rates["store"], rates["dict"])],
        "parts_us": parts,
        "load": load,
        "index": store.meta["index"]["kind"],
        "helper": getattr(native, "NATIVE", None) is not None,
        "lading": lading.__file__,
    }


def measure(
    store: Any, table: dict[Any, str], queries: list[list[Any]], repeats: int
) -> tuple[dict[str, list[float]], dict[str, float], list[float]]:
    """docs/s of the dict and of get_many in each repeat, and the median us per batch of the
    dict, get_many and get_many's two parts alone: ids -> rows (the index) and rows -> str
    (the text column; both private, the same on every lading so far)."""
    maps = store._maps()
    index, column, get_many = maps.index, maps.text, store.get_many
    found = [index.rows(batch) for batch in queries]

    def lookups() -> None:  # each batch's answer dropped at once, as a training loop does
        for batch in queries:
            [table[i] for i in batch]

    def fetches() -> None:
        for batch in queries:
            get_many(batch)

    def find() -> None:
        for batch in queries:
            index.rows(batch)

    def decode() -> None:
        for rows in found:
            column.texts(rows)

    steps = {"dict": lookups, "store": fetches, "id -> row": find, "row -> str": decode}
    seconds: dict[str, list[float]] = {name: [] for name in steps}
    load = [os.getloadavg()[0]]
    for repeat in range(repeats + 1):  # the first round warms page cache, CPU caches, opens
        for name in list(steps) if repeat % 2 == 0 else list(steps)[::-1]:
            started = time.perf_counter()
            steps[name]()
            if repeat:
                seconds[name].append(time.perf_counter() - started)
        load.append(os.getloadavg()[0])
    docs = len(queries) * BATCH
    rates = {name: [docs / t for t in seconds[name]] for name in ("dict", "store")}
    parts = {name: 1e6 * statistics.median(t) / len(queries) for name, t in seconds.items()}
    return rates, parts, load


def run_child(kind: str, code: dict[str, Any], work: Path, args: argparse.Namespace) -> Any:
    store = KINDS[kind][1]
    dest = work / code["stores"] / f"{store}.store"  # each lading reads what it built
    dest.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": code["src"], **code["env"]}
    argv = [sys.executable, __file__, "--child", kind, str(dest), str(work / f"{store}.tsv")]
    argv += ["--batches", str(args.batches), "--repeats", str(args.repeats)]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{kind} with {code['label']} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def spread(values: list[float], digits: int = 2) -> str:
    """``median [min-max]``."""
    med, lo, hi = statistics.median(values), min(values), max(values)
    if digits == 0:
        return f"{med:,.0f} [{lo:,.0f}-{hi:,.0f}]"
    return f"{med:.{digits}f} [{lo:.{digits}f}-{hi:.{digits}f}]"


LEGEND = """The codes: `this branch, C helper` is lading with `lading.disk._native` (built by
`pip install` through setup.py where a C compiler is found): one C call finds a batch's rows
(dense table, sorted keys or hash table) and one makes its `str` objects, each walking the
batch in phases with prefetches, so the batch's cache misses overlap. `this branch, numpy
route` is the same checkout with the helper off (`LADING_NATIVE=0`), what runs where it was
not built: numpy calls per batch (~1 us each; a dozen for the hash index) and a Python
iteration per document (slice the map into `bytes`, decode: two copies, two objects).
`baseline` is the lading at `--baseline`. The dict hands out `str` objects it already holds;
at 1M entries each `d[i]` is a chain of dependent cache misses (slot, entry, key, value), one
id after another, which is what the helper's overlapped misses beat."""


def verdicts(results: dict[str, dict[str, Any]], labels: list[str]) -> list[str]:
    """One line per code: how many kinds reach 0.9x a dict, and what its parts cost against
    the dict's whole batch (from the parts table)."""
    out = []
    for label in labels:
        runs = [by_code[label] for by_code in results.values()]
        medians = [statistics.median(r["ratios"]) for r in runs]
        lowest = min(min(r["ratios"]) for r in runs)
        decode = [r["parts_us"]["row -> str"] / r["parts_us"]["dict"] for r in runs]
        find = [r["parts_us"]["id -> row"] / r["parts_us"]["dict"] for r in runs]
        out.append(
            f"- {label}: median >= 0.9 for {sum(m >= 0.9 for m in medians)} of {len(runs)} "
            f"kinds (medians {min(medians):.2f}-{max(medians):.2f}, lowest single repeat "
            f"{lowest:.2f}); alone, row -> str takes {min(decode):.2f}-{max(decode):.2f} and "
            f"id -> row {min(find):.2f}-{max(find):.2f} of the dict's time for the whole batch."
        )
    return out


def render(results: dict[str, dict[str, Any]], codes: list[dict[str, Any]], notes: str) -> str:
    labels = [c["label"] for c in codes]
    lines = [
        notes,
        "",
        LEGEND,
        "",
        "get_many / dict, docs/s over docs/s in the same repeat: median [min-max]",
        "",
        "| ids | example | index | " + " | ".join(labels) + " | target |",
        "|---|---|---|" + "---:|" * len(labels) + "---|",
    ]
    for kind, by_code in results.items():
        first = next(iter(by_code.values()))
        cells = [spread(by_code[label]["ratios"]) for label in labels]
        index = " -> ".join(dict.fromkeys(by_code[label]["index"] for label in labels))
        lines.append(
            f"| {KINDS[kind][0]} | `{first['example']}` | {index} | "
            + " | ".join(cells)
            + " | >= 0.9 |"
        )
    lines += [
        "",
        "docs/s, median [min-max] of the repeats (each code in its own process)",
        "",
        "| ids | " + " | ".join(f"{label}: dict | {label}: get_many" for label in labels) + " |",
        "|---|" + "---:|---:|" * len(labels),
    ]
    for kind, by_code in results.items():
        cells = []
        for label in labels:
            rates = by_code[label]["rates"]
            cells += [spread(rates["dict"], 0), spread(rates["store"], 0)]
        lines.append(f"| {KINDS[kind][0]} | " + " | ".join(cells) + " |")
    lines += ["", *verdicts(results, labels)]
    lines += [
        "",
        "Where the time goes, us per batch of 64 (median of the repeats; the parts timed alone)",
        "",
        "| ids | code | dict | get_many | id -> row | row -> str | the rest |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for kind, by_code in results.items():
        for label in labels:
            p = by_code[label]["parts_us"]
            rest = p["store"] - p["id -> row"] - p["row -> str"]
            cells = [p["dict"], p["store"], p["id -> row"], p["row -> str"], rest]
            lines.append(
                f"| {KINDS[kind][0]} | {label} | " + " | ".join(f"{c:.1f}" for c in cells) + " |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--batches", type=int, default=2000, help="batches of 64 per window")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", type=Path, default=HERE.parent / "bench-out" / "index")
    parser.add_argument("--baseline", help="the src/ folder of another lading (e.g. main's)")
    parser.add_argument("--kinds", default=",".join(KINDS), help="comma-separated subset")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    add_write_flag(parser)
    args = parser.parse_args()
    if args.child:
        kind, store_dir, tsv = args.child
        result = child(kind, store_dir, tsv, args.batches, args.repeats)
        print(json.dumps(result))
        return
    src = str(HERE.parent / "src")
    codes: list[dict[str, Any]] = [
        {"label": "this branch, C helper", "src": src, "env": {}, "stores": "this"},
        {
            "label": "this branch, numpy route",
            "src": src,
            "env": {"LADING_NATIVE": "0"},
            "stores": "this",
        },
    ]
    if args.baseline:
        codes.insert(
            0, {"label": "baseline", "src": args.baseline, "env": {}, "stores": "baseline"}
        )
    work = args.out / str(args.n)
    origin = write_sources(args.n, work)
    started, load = time.perf_counter(), [os.getloadavg()[0]]
    results: dict[str, dict[str, Any]] = {}
    for number, kind in enumerate(args.kinds.split(",")):
        results[kind] = {}
        for code in codes if number % 2 == 0 else codes[::-1]:
            got = run_child(kind, code, work, args)
            got["example"] = spell_ids(KINDS[kind][1], 1)[0]
            results[kind][code["label"]] = got
            load += got["load"]
            print(kind, code["label"], spread(got["ratios"]), got["index"], flush=True)
        for code in codes:  # keep the table's column order
            results[kind][code["label"]] = results[kind].pop(code["label"])
    notes = (
        f"{args.n:,} documents per store: {origin}. Each kind and code in a fresh process "
        f"(Python {platform.python_version()}, numpy {np.__version__}, {os.cpu_count()} CPUs, "
        f"{platform.machine()}); warm page cache. Window: {args.batches:,} batches of {BATCH} "
        f"uniformly random ids drawn once ({args.batches * BATCH:,} lookups); {args.repeats} "
        "repeats, dict and get_many alternating which goes first; dict: `[d[i] for i in ids]` "
        "over a dict built from the store's own texts. Load average "
        f"{min(load):.2f}-{max(load):.2f} during the run (other work shared the machine); "
        f"{time.perf_counter() - started:.0f} s in all."
        + (f" baseline: the lading at `{args.baseline}`." if args.baseline else "")
    )
    body = render(results, codes, notes)
    print(body)
    (work / "results.json").write_text(json.dumps(results, indent=1))
    command = "python benchmarks/bench_index.py" + (
        f" --baseline {args.baseline}" if args.baseline else ""
    )
    write_section(
        HERE / "RESULTS.md", "Id lookups by kind vs a dict", body, command, write=args.write
    )


if __name__ == "__main__":
    main()
