"""Run one benchmark's measuring code under two checkouts, interleaved, and print a table.

    python benchmarks/compare_trees.py lm --before ../wt-before --after . --rounds 6

Each measurement is a fresh process started with ``PYTHONPATH=<tree>/src`` and the tree's own
``benchmarks/`` first on ``sys.path``, so it runs that tree's library *and* that tree's benchmark
functions (``bench_lm.run``, ``bench_parquet.run``, ``bench_ir.pairs_per_second``,
``bench_stores.measure_lookups``, ...). Rounds alternate the trees (before, after, before,
after, ...) so that load on a shared machine falls on both. Every child also reports the CPU
time of the timed work (``time.process_time``), which a busy machine disturbs far less than
wall time. Nothing writes RESULTS.md: no script's ``main`` runs, only its measuring functions.

Benchmarks (first argument):

- ``lm``: ``bench_lm.run`` of ``naive`` and ``lading`` over a corpus built beforehand
  (``--corpus``), plus ``--epochs`` more lading epochs in the lading child for CPU time.
- ``parquet``: ``bench_parquet.run`` of ``straightforward`` and ``lading`` over YOOCHOOSE days
  178-181 read ``--repeat`` times.
- ``ir``: ``bench_ir.pairs_per_second`` of the text and tokens collators and
  ``bench_ir.loader_memory`` (4 workers) over stores built beforehand (``--work``).
- ``stores``: ``lading.build_store`` of the plain and the tokenized store (into a folder per
  tree), then ``bench_stores.measure_lookups`` of ``packed`` and ``packed+tokens``.

The raw rows go to ``--json`` (default ``bench-out/compare-<bench>.json``).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

# Code each child runs after ``sys.path`` holds the tree's benchmarks/ and ``A`` the arguments.
# It must end with ``OUT``: a dict of numbers printed as JSON on the last stdout line.
PRELUDE = """
import json, sys, time
sys.path.insert(0, A["benchmarks"])
import lading
assert lading.__file__.startswith(A["tree_src"]), (lading.__file__, A["tree_src"])
if A["torch_threads"]:
    import torch
    torch.set_num_threads(A["torch_threads"])
"""

CHILD_CODE: dict[str, str] = {
    "lm-naive": """
import bench_lm
cpu = time.process_time()
OUT = bench_lm.run("naive", A["corpus"])
OUT["cpu_s"] = time.process_time() - cpu
""",
    "lm-lading": """
import bench_lm
from lading.lm import LanguageModelLoader, TokenCorpus
from lading.world import World
cpu = time.process_time()
OUT = bench_lm.run("lading", A["corpus"])
OUT["cpu_s"] = time.process_time() - cpu
try:  # the sequence options object (issue 23) ...
    from lading.lm import Streams
    sequence = Streams(bench_lm.BPTT)
except ImportError:  # ... or a tree from before it, where bptt was the third argument
    sequence = bench_lm.BPTT
loader = LanguageModelLoader(TokenCorpus.open(A["corpus"]), bench_lm.BATCH, sequence,
                             world=World())
tokens, cpu, wall = 0, time.process_time(), time.perf_counter()
for epoch in range(A["epochs"]):
    loader.set_epoch(epoch + 1)
    for x, _ in loader:
        tokens += x.numel()
OUT["epochs_tokens_per_cpu_s"] = tokens / (time.process_time() - cpu)
OUT["epochs_tokens_per_s"] = tokens / (time.perf_counter() - wall)
""",
    "parquet-straightforward": """
import bench_parquet
cpu = time.process_time()
OUT = bench_parquet.run("straightforward", A["files"])
OUT["cpu_s"] = time.process_time() - cpu
OUT["rows_per_cpu_s"] = OUT["rows"] / OUT["cpu_s"]
""",
    "parquet-lading": """
import bench_parquet
cpu = time.process_time()
OUT = bench_parquet.run("lading", A["files"])
OUT["cpu_s"] = time.process_time() - cpu
OUT["rows_per_cpu_s"] = OUT["rows"] / OUT["cpu_s"]
""",
    "ir": """
import os
os.environ["TOKENIZERS_PARALLELISM"] = "false"
from pathlib import Path
import bench_ir
from lading.ir import CrossEncoderCollator, TrainingGroups
work, n = Path(A["work"]), A["n"]
tokens = lading.open_store(work / f"passages-{n}-int.tokens512")
plain = lading.open_store(work / f"passages-{n}-int.packed")
tok_path = work / "bert-like-tokenizer.json"
queries, qrels = bench_ir.query_set(plain)
kw = {"group_size": bench_ir.GROUP_SIZE, "sampling": "random"}
fast_groups = TrainingGroups(tokens, queries, qrels, **kw)
slow_groups = TrainingGroups(plain, queries, qrels, **kw)
fast = CrossEncoderCollator(tokens, max_length=bench_ir.MAX_LENGTH)
slow = CrossEncoderCollator(plain, tok_path, max_length=bench_ir.MAX_LENGTH, use_tokens=False)
OUT = {}
for name, collate, groups in (("text", slow, slow_groups), ("tokens", fast, fast_groups)):
    cpu, wall = time.process_time(), time.perf_counter()
    rate = bench_ir.pairs_per_second(collate, groups, A["pair_seconds"])
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    OUT[f"{name}_pairs_per_s"] = rate
    OUT[f"{name}_pairs_per_cpu_s"] = rate * wall / cpu
OUT["ratio"] = OUT["tokens_pairs_per_s"] / OUT["text_pairs_per_s"]
samples = bench_ir.loader_memory(fast_groups, fast, A["seconds"])
probes = [s for s in samples if "anon_mib" in s]
OUT["loader_pairs_per_s"] = samples[-1]["pairs"] / samples[-1]["t"]
OUT["loader_anon_peak_mib"] = max(p["anon_mib"] for p in probes)
OUT["loader_pss_peak_mib"] = max(p["pss_mib"] for p in probes)
steady = probes[len(probes) // 4 :] or probes
OUT["loader_anon_growth_mib"] = steady[-1]["anon_mib"] - steady[0]["anon_mib"]
""",
    "stores-build": """
from pathlib import Path
src, dest = Path(A["src"]), Path(A["dest"])
dest.mkdir(parents=True, exist_ok=True)
OUT = {}
for name, extra in (("packed", {}), ("tokens", {"tokenizer": A["tokenizer"], "max_length": 256})):
    cpu, wall = time.process_time(), time.perf_counter()
    lading.build_store(src, dest / f"{src.stem}.{name}", overwrite=True, progress=False, **extra)
    OUT[f"build_{name}_s"] = time.perf_counter() - wall
    OUT[f"build_{name}_cpu_s"] = time.process_time() - cpu
""",
    "stores-lookups": """
import bench_stores
cpu = time.process_time()
OUT = bench_stores.measure_lookups(A["strategy"], A["src"], A["dest"], A["seconds"])
OUT["cpu_s"] = time.process_time() - cpu
""",
}


def run_child(
    tree: Path, code: str, args: dict[str, Any], torch_threads: int = 0
) -> dict[str, Any]:
    """``code`` in a fresh interpreter on ``tree``'s library and benchmarks; its OUT dict.
    ``torch_threads``: ``torch.set_num_threads`` first (0: torch's default)."""
    src = str((tree / "src").resolve())
    full = {
        **args,
        "torch_threads": torch_threads,
        "tree_src": src,
        "benchmarks": str((tree / "benchmarks").resolve()),
    }
    program = f"A = {json.dumps(full)!r}\nimport json as _j\nA = _j.loads(A)\n"
    program += PRELUDE + CHILD_CODE[code] + "\nprint(json.dumps(OUT))\n"
    env = {**os.environ, "PYTHONPATH": src}
    done = subprocess.run(
        [sys.executable, "-c", program],
        cwd=tree / "benchmarks",
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{code} on {tree} failed:\n{done.stderr[-4000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def loadavg() -> float:
    return os.getloadavg()[0]


def interleave(
    trees: dict[str, Path],
    rounds: int,
    steps: list[tuple[str, Callable[[str], dict[str, Any]]]],
    abba: bool = False,
    torch_threads: int = 0,
) -> list[dict[str, Any]]:
    """``rounds`` x (every step under before, then under after; with ``abba``, odd rounds run
    after first, so neither tree always goes second); one row per round and tree."""
    rows: list[dict[str, Any]] = []
    for r in range(rounds):
        for side in list(trees)[:: -1 if abba and r % 2 else 1]:
            row: dict[str, Any] = {"round": r, "side": side, "load": loadavg()}
            for code, args in steps:
                for key, value in run_child(trees[side], code, args(side), torch_threads).items():
                    row[f"{code}.{key}"] = value
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def summary(values: list[float]) -> tuple[float, float, float]:
    return statistics.median(values), min(values), max(values)


def fmt(x: float) -> str:
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.3g}"


def table(rows: list[dict[str, Any]], measures: list[tuple[str, str]]) -> str:
    """Markdown: median [min-max] per side, the change of medians, and whether ranges overlap."""
    n = len([r for r in rows if r["side"] == "before"])
    lines = [
        f"| measure (median [min-max] of {n}) | before | after | change | ranges |",
        "|---|---:|---:|---:|---|",
    ]
    for label, key in measures:
        got = {
            side: [float(r[key]) for r in rows if r["side"] == side and key in r]
            for side in ("before", "after")
        }
        if not got["before"] or not got["after"]:
            continue
        (mb, lb, hb), (ma, la, ha) = summary(got["before"]), summary(got["after"])
        overlap = "overlap" if la <= hb and lb <= ha else "**disjoint**"
        change = f"{(ma - mb) / mb * 100:+.1f} %" if mb else "n/a"
        lines.append(
            f"| {label} | {fmt(mb)} [{fmt(lb)}-{fmt(hb)}] | {fmt(ma)} [{fmt(la)}-{fmt(ha)}] "
            f"| {change} | {overlap} |"
        )
    loads = [r["load"] for r in rows]
    lines.append(
        f"\nload average (1 min) at the start of each child set: {fmt(min(loads))}-"
        f"{fmt(max(loads))}"
    )
    return "\n".join(lines)


def add_ratio(rows: list[dict[str, Any]], name: str, top: str, bottom: str) -> None:
    for row in rows:
        row[name] = row[top] / row[bottom]


def data_root() -> Path:
    sys.path.insert(0, str(HERE))
    from common import data_dir

    root = data_dir()
    if root is None:
        raise SystemExit("no real data: set LADING_DATA")
    return root


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("bench", choices=["lm", "parquet", "ir", "stores"])
    parser.add_argument("--before", type=Path, required=True)
    parser.add_argument("--after", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--corpus", help="lm: a TokenCorpus folder (bench_lm.build makes one)")
    parser.add_argument("--epochs", type=int, default=5, help="lm: extra epochs for CPU time")
    parser.add_argument("--repeat", type=int, default=4, help="parquet: times the 4 days are read")
    parser.add_argument("--work", type=Path, help="ir / stores: folder with the corpora, stores")
    parser.add_argument("--n", type=int, default=50_000, help="ir / stores: passages")
    parser.add_argument("--seconds", type=float, default=10.0, help="ir loader / stores lookups")
    parser.add_argument("--pair-seconds", type=float, default=5.0, help="ir: per collator")
    parser.add_argument(
        "--abba", action="store_true", help="odd rounds run after first (before: always first)"
    )
    parser.add_argument(
        "--torch-threads", type=int, default=0, help="torch.set_num_threads in every child"
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    started = time.perf_counter()
    steps: list[tuple[str, Callable[[str], dict[str, Any]]]]
    if args.bench == "lm":
        corpus = str(Path(args.corpus).resolve())
        steps = [
            ("lm-naive", lambda side: {"corpus": corpus}),
            ("lm-lading", lambda side: {"corpus": corpus, "epochs": args.epochs}),
        ]
        rows = interleave(trees, args.rounds, steps, args.abba, args.torch_threads)
        add_ratio(rows, "ratio_batches", "lm-lading.tokens_per_s", "lm-naive.tokens_per_s")
        add_ratio(
            rows,
            "ratio_with_setup",
            "lm-lading.tokens_per_s_with_setup",
            "lm-naive.tokens_per_s_with_setup",
        )
        measures = [
            ("lading tokens/s (batches, wall, 1 epoch)", "lm-lading.tokens_per_s"),
            ("lading tokens/s (with setup, wall)", "lm-lading.tokens_per_s_with_setup"),
            (f"lading tokens/s, wall ({args.epochs} more epochs)", "lm-lading.epochs_tokens_per_s"),
            (
                f"**lading tokens/s, CPU time** ({args.epochs} more epochs)",
                "lm-lading.epochs_tokens_per_cpu_s",
            ),
            ("lading anonymous memory added MiB", "lm-lading.anon_mib"),
            ("naive tokens/s (batches, wall)", "lm-naive.tokens_per_s"),
            ("lading / naive tokens/s (batches), same round", "ratio_batches"),
            ("lading / naive tokens/s (with setup), same round", "ratio_with_setup"),
        ]
    elif args.bench == "parquet":
        days = data_root() / "recsys/yoochoose_t4r_preproc_sessions_by_day"
        files = [str(days / str(d) / "train.parquet") for d in (178, 179, 180, 181)]
        files *= args.repeat
        steps = [
            ("parquet-straightforward", lambda side: {"files": files}),
            ("parquet-lading", lambda side: {"files": files}),
        ]
        rows = interleave(trees, args.rounds, steps, args.abba, args.torch_threads)
        add_ratio(rows, "ratio", "parquet-lading.rows_per_s", "parquet-straightforward.rows_per_s")
        add_ratio(
            rows,
            "ratio_cpu",
            "parquet-lading.rows_per_cpu_s",
            "parquet-straightforward.rows_per_cpu_s",
        )
        measures = [
            ("PartitionedParquet rows/s (wall)", "parquet-lading.rows_per_s"),
            ("**PartitionedParquet rows/s, CPU time**", "parquet-lading.rows_per_cpu_s"),
            ("PartitionedParquet anonymous memory added, peak MiB", "parquet-lading.anon_peak_mib"),
            ("straightforward rows/s (wall)", "parquet-straightforward.rows_per_s"),
            ("straightforward rows/s, CPU time", "parquet-straightforward.rows_per_cpu_s"),
            ("PartitionedParquet / straightforward rows/s, same round", "ratio"),
            ("PartitionedParquet / straightforward, CPU time, same round", "ratio_cpu"),
        ]
    elif args.bench == "ir":
        work = str(args.work.resolve())
        ir_args = {"work": work, "n": args.n, "seconds": args.seconds}
        ir_args["pair_seconds"] = args.pair_seconds
        steps = [("ir", lambda side: ir_args)]
        rows = interleave(trees, args.rounds, steps, args.abba, args.torch_threads)
        measures = [
            ("collator pairs/s, text (wall)", "ir.text_pairs_per_s"),
            ("collator pairs/s, text, CPU time", "ir.text_pairs_per_cpu_s"),
            ("collator pairs/s, tokens (wall)", "ir.tokens_pairs_per_s"),
            ("**collator pairs/s, tokens, CPU time**", "ir.tokens_pairs_per_cpu_s"),
            ("ratio tokens / text (same run)", "ir.ratio"),
            ("4-worker loader pairs/s (wall)", "ir.loader_pairs_per_s"),
            ("loader anonymous memory, all processes, peak MiB", "ir.loader_anon_peak_mib"),
            ("loader PSS, all processes, peak MiB", "ir.loader_pss_peak_mib"),
            ("loader anonymous memory growth MiB", "ir.loader_anon_growth_mib"),
        ]
    else:
        work = args.work.resolve()
        src = str(work / f"passages-{args.n}-int.tsv")
        tokenizer = str(work / "bert-like-tokenizer.json")

        def dest(side: str) -> str:
            return str(work / f"built-{side}")

        def lookups(strategy: str, side: str) -> dict[str, Any]:
            return {"src": src, "dest": dest(side), "strategy": strategy, "seconds": args.seconds}

        steps = [
            ("stores-build", lambda side: {"src": src, "dest": dest(side), "tokenizer": tokenizer}),
        ]
        for strategy in ("packed", "packed+tokens"):
            steps.append((f"stores-lookups-{strategy}", functools.partial(lookups, strategy)))
            CHILD_CODE[f"stores-lookups-{strategy}"] = CHILD_CODE["stores-lookups"]
        # measure_lookups opens <dest>/<stem>.packed and .tokens: the build names them so
        rows = interleave(trees, args.rounds, steps, args.abba, args.torch_threads)
        measures = [
            ("build packed store s (wall)", "stores-build.build_packed_s"),
            ("build packed store, CPU s", "stores-build.build_packed_cpu_s"),
            ("build tokenized store s (wall)", "stores-build.build_tokens_s"),
            ("**build tokenized store, CPU s**", "stores-build.build_tokens_cpu_s"),
        ]
        for strategy in ("packed", "packed+tokens"):
            key = f"stores-lookups-{strategy}"
            measures += [
                (f"{strategy} docs/s", f"{key}.docs_per_s"),
                (f"{strategy} docs/s with sampling", f"{key}.docs_per_s_with_sampling"),
                (f"{strategy} RssAnon added MiB", f"{key}.rss_anon_mib"),
            ]
    out = args.json or HERE.parent / "bench-out" / f"compare-{args.bench}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"trees": {k: str(v) for k, v in trees.items()}, "rows": rows}))
    print(table(rows, measures))
    print(f"\n{args.rounds} rounds in {time.perf_counter() - started:.0f} s; rows in {out}")


if __name__ == "__main__":
    main()
