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
  (``--corpus``), plus ``--epochs`` more lading epochs in the lading child for CPU time (their
  mean, and the best epoch's: the one least disturbed by other work on a shared machine);
  ``--lading-only`` leaves the naive child out (twice the rounds in the same time).
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

from compare_children import CHILD_CODE, PRELUDE

HERE = Path(__file__).resolve().parent
Step = tuple[str, Callable[[str], dict[str, Any]]]  # a child's name, its arguments per side
# a bench: its children, its table's (label, key) rows, what to add to each row once measured
Plan = tuple[list[Step], list[tuple[str, str]], Callable[[list[dict[str, Any]]], None]]


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
    """Markdown: median [min-max] per side, the change of medians, whether the ranges overlap,
    and the median change within a round (:func:`paired`)."""
    n = len([r for r in rows if r["side"] == "before"])
    lines = [
        f"| measure (median [min-max] of {n}) | before | after | change | ranges | paired |",
        "|---|---:|---:|---:|---|---:|",
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
            f"| {change} | {overlap} | {paired(rows, key)} |"
        )
    loads = [r["load"] for r in rows]
    lines.append(
        f"\nload average (1 min) at the start of each child set: {fmt(min(loads))}-"
        f"{fmt(max(loads))}"
    )
    return "\n".join(lines)


def paired(rows: list[dict[str, Any]], key: str) -> str:
    """The change of one round's after over the same round's before, median over the rounds:
    what a load that drifts between rounds disturbs less than the medians of each side."""
    sides: dict[int, dict[str, float]] = {}
    for row in rows:
        if key in row:
            sides.setdefault(row["round"], {})[row["side"]] = float(row[key])
    ratios = [r["after"] / r["before"] for r in sides.values() if len(r) == 2 and r["before"]]
    if not ratios:
        return "n/a"
    return f"{(statistics.median(ratios) - 1) * 100:+.1f} %"


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


def lm_plan(args: argparse.Namespace) -> Plan:
    corpus = str(Path(args.corpus or ".").resolve())
    steps: list[Step] = [] if args.lading_only else [("lm-naive", lambda side: {"corpus": corpus})]
    steps.append(("lm-lading", lambda side: {"corpus": corpus, "epochs": args.epochs}))

    def derive(rows: list[dict[str, Any]]) -> None:
        if not args.lading_only:
            add_ratio(rows, "ratio_batches", "lm-lading.tokens_per_s", "lm-naive.tokens_per_s")
            add_ratio(
                rows,
                "ratio_with_setup",
                "lm-lading.tokens_per_s_with_setup",
                "lm-naive.tokens_per_s_with_setup",
            )

    more, lading = f"{args.epochs} more epochs", "lm-lading."
    measures = [
        ("lading tokens/s (batches, wall, 1 epoch)", lading + "tokens_per_s"),
        ("lading tokens/s (with setup, wall)", lading + "tokens_per_s_with_setup"),
        (f"lading tokens/s, wall ({more})", lading + "epochs_tokens_per_s"),
        (f"**lading tokens/s, CPU time** ({more})", lading + "epochs_tokens_per_cpu_s"),
        (f"lading tokens/s, CPU time, best of the {more}", lading + "best_epoch_tokens_per_cpu_s"),
        ("lading anonymous memory added MiB", "lm-lading.anon_mib"),
        ("naive tokens/s (batches, wall)", "lm-naive.tokens_per_s"),
        ("lading / naive tokens/s (batches), same round", "ratio_batches"),
        ("lading / naive tokens/s (with setup), same round", "ratio_with_setup"),
    ]  # fmt: skip
    return steps, measures, derive


def parquet_plan(args: argparse.Namespace) -> Plan:
    def files(side: str) -> dict[str, Any]:
        days = data_root() / "recsys/yoochoose_t4r_preproc_sessions_by_day"
        found = [str(days / str(d) / "train.parquet") for d in (178, 179, 180, 181)]
        return {"files": found * args.repeat}

    def derive(rows: list[dict[str, Any]]) -> None:
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
    return [("parquet-straightforward", files), ("parquet-lading", files)], measures, derive


def ir_plan(args: argparse.Namespace) -> Plan:
    work = str(Path(args.work or ".").resolve())
    ir_args = {"work": work, "n": args.n, "seconds": args.seconds}
    ir_args["pair_seconds"] = args.pair_seconds
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
    return [("ir", lambda side: ir_args)], measures, no_derive


def stores_plan(args: argparse.Namespace) -> Plan:
    work = Path(args.work or ".").resolve()
    src = str(work / f"passages-{args.n}-int.tsv")
    tokenizer = str(work / "bert-like-tokenizer.json")

    def dest(side: str) -> str:
        return str(work / f"built-{side}")

    def lookups(strategy: str, side: str) -> dict[str, Any]:
        return {"src": src, "dest": dest(side), "strategy": strategy, "seconds": args.seconds}

    # measure_lookups opens <dest>/<stem>.packed and .tokens: the build names them so
    steps: list[Step] = [
        ("stores-build", lambda side: {"src": src, "dest": dest(side), "tokenizer": tokenizer}),
    ]
    measures = [
        ("build packed store s (wall)", "stores-build.build_packed_s"),
        ("build packed store, CPU s", "stores-build.build_packed_cpu_s"),
        ("build tokenized store s (wall)", "stores-build.build_tokens_s"),
        ("**build tokenized store, CPU s**", "stores-build.build_tokens_cpu_s"),
    ]
    for strategy in ("packed", "packed+tokens"):
        key = f"stores-lookups-{strategy}"
        steps.append((key, functools.partial(lookups, strategy)))
        CHILD_CODE[key] = CHILD_CODE["stores-lookups"]
        measures += [
            (f"{strategy} docs/s", f"{key}.docs_per_s"),
            (f"{strategy} docs/s with sampling", f"{key}.docs_per_s_with_sampling"),
            (f"{strategy} RssAnon added MiB", f"{key}.rss_anon_mib"),
        ]
    return steps, measures, no_derive


def no_derive(rows: list[dict[str, Any]]) -> None:
    """Nothing to add to the rows."""


PLANS: dict[str, Callable[[argparse.Namespace], Plan]] = {
    "lm": lm_plan,
    "parquet": parquet_plan,
    "ir": ir_plan,
    "stores": stores_plan,
}


def parser() -> argparse.ArgumentParser:
    found = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    add = found.add_argument
    add("bench", choices=sorted(PLANS))
    add("--before", type=Path, required=True)
    add("--after", type=Path, required=True)
    add("--rounds", type=int, default=5)
    add("--corpus", help="lm: a TokenCorpus folder (bench_lm.build makes one)")
    add("--epochs", type=int, default=5, help="lm: extra epochs for CPU time")
    add("--lading-only", action="store_true", help="lm: leave the naive loader's child out")
    add("--repeat", type=int, default=4, help="parquet: times the 4 days are read")
    add("--work", type=Path, help="ir / stores: folder with the corpora, stores")
    add("--n", type=int, default=50_000, help="ir / stores: passages")
    add("--seconds", type=float, default=10.0, help="ir loader / stores lookups")
    add("--pair-seconds", type=float, default=5.0, help="ir: per collator")
    add("--abba", action="store_true", help="odd rounds run after first (before: always first)")
    add("--torch-threads", type=int, default=0, help="torch.set_num_threads in every child")
    add("--json", type=Path, help="where the rows go (default bench-out/compare-<bench>.json)")
    add("--rows", type=Path, help="print the table of an earlier run's --json, measuring nothing")
    return found


def main() -> None:
    args = parser().parse_args()
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    steps, measures, derive = PLANS[args.bench](args)
    if args.rows is not None:
        rows = json.loads(args.rows.read_text())["rows"]
        derive(rows)
        print(table(rows, measures))
        return
    started = time.perf_counter()
    rows = interleave(trees, args.rounds, steps, args.abba, args.torch_threads)
    derive(rows)
    out = args.json or HERE.parent / "bench-out" / f"compare-{args.bench}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"trees": {k: str(v) for k, v in trees.items()}, "rows": rows}))
    print(table(rows, measures))
    print(f"\n{args.rounds} rounds in {time.perf_counter() - started:.0f} s; rows in {out}")


if __name__ == "__main__":
    main()
