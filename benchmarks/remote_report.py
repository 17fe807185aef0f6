"""The "Remote" section of benchmarks/RESULTS.md from bench_remote.py's results."""

from __future__ import annotations

import os
import platform
import statistics
from typing import Any


def _spread(values: list[float], fmt: str = "{:,.0f}") -> str:
    """median [min-max]."""
    low, mid, high = (fmt.format(v) for v in (min(values), statistics.median(values), max(values)))
    return f"{mid} [{low}-{high}]"


def render(results: dict[str, Any], args: Any) -> str:
    lines = [
        f"Local S3: moto behind lading's latency proxy, every request answered after 30 ms ± 10 "
        f"(lading.testing.localserver), on this machine: {platform.machine()}, "
        f"{os.cpu_count()} cores shared with the client and other work; Python "
        f"{platform.python_version()}. Cold node cache for every measurement (a fresh "
        f"directory). {results['seconds']:.0f} s in all.",
        "",
    ]
    for c in results["corpora"]:
        lines.append(
            f"- {c['kind']}: {c['count']:,} documents, {c['text_bytes'] / 2**20:,.1f} MiB of "
            f'text, built and uploaded by `lading.build_store(..., "{c["url"]}")` in '
            f"{c['upload_s']:.0f} s"
        )
    head = ("| corpus | ranks | docs/s per node | GETs per batch | docs per GET | "
            "GETs per 1k docs (node) | bytes fetched / used | load |")  # fmt: skip
    lines += ["", "### Throughput per node (cold cache, no step: the loader alone)", "",
              f"Window {args.seconds:g} s after 4 warm-up batches per rank; {args.repeats} "
              "repeats, interleaved; median [min-max]; load = 1-minute load average at the "
              "cell's start. Batches: 8 groups x 8 documents (1 relevant + 7 uniform random "
              "negatives).", "", head, "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for kind in dict.fromkeys(r["kind"] for r in results["cells"]):
        for ranks in sorted({r["ranks"] for r in results["cells"] if r["kind"] == kind}):
            rows = [r for r in results["cells"] if r["kind"] == kind and r["ranks"] == ranks]
            per_batch = [r["gets"] / max(1, r["batches"]) for r in rows]
            per_get = [r["docs"] / max(1, r["gets"]) for r in rows]
            per_k = [1000 * r["gets"] / max(1, r["docs"]) for r in rows]
            ratio = [r["bytes_fetched"] / max(1, r["bytes_used"]) for r in rows]
            lines.append(
                f"| {kind} | {ranks} | {_spread([r['docs_s'] for r in rows])} | "
                f"{_spread(per_batch, '{:.1f}')} | {_spread(per_get, '{:.2f}')} | "
                f"{_spread(per_k, '{:.0f}')} | {_spread(ratio, '{:.2f}')} | "
                f"{_spread([r['load'] for r in rows], '{:.1f}')} |"
            )
    lines += ["", "Every document of a random batch lies far from the others (1M passages, 200k "
              "documents): GETs per batch stay near its 64 documents, and no coalescing can do "
              "better; neighbours merge where the order has them (the gap table below). GETs per "
              "1k documents stay flat as ranks grow. Bytes fetched / used counts the look-ahead's "
              "GETs for batches after the window too (up to 16 batches). The docs/s here are "
              "bound by this machine's CPU (2 cores at the loads shown, shared by the ranks, the "
              "proxy and other work), not by the store: see \"Remote: the GET ceiling here\" "
              "for what the fetcher alone reaches on it.", "",
              f"### Wait per batch with a {250} ms step (1 rank)", "",
              f"Window {2 * args.seconds:g} s; the step is a sleep; wait = time in "
              "`next(loader)`.", "",
              "| corpus | look-ahead | wait per batch, median ms | p95 ms | median / step "
              "| batches |",
              "|---|---|---|---|---|---|"]  # fmt: skip
    for w in results["waits"]:
        lines.append(
            f"| {w['kind']} | {'on' if w['ahead'] else 'off'} | {w['wait_ms_median']:.1f} | "
            f"{w['wait_ms_p95']:.1f} | {w['wait_ms_median'] / 250:.1%} | {w['batches']} |"
        )
    lines += ["", "### The planner's gap", "",
              "The loader's first 20 windows of 8 batches, coalesced by `lading.stores.remote."
              "ranges.coalesce` (waste budget 25%): GETs per batch and bytes fetched / used.", "",
              "| corpus | " + " | ".join(f"gap {g // 1024} KiB" for g, _, _ in
                                          next(iter(results["gaps"].values()))) + " |",
              "|---|" + "---|" * len(next(iter(results["gaps"].values())))]  # fmt: skip
    for kind, rows in results["gaps"].items():
        lines.append(
            f"| {kind} | " + " | ".join(f"{g:.1f} GETs, {r:.2f}x" for _, g, r in rows) + " |"
        )
    lines += ["", "### Epoch-2 hit rate, next use and FIFO at the same cap", "",
              "A 2-epoch run over the small passage corpus (proxy latency 0 here: hit counts do "
              "not depend on it). Uniform: random negatives; skewed: negatives from a run whose "
              "candidates follow a Zipf law (s = 1.1), at a cap below their working set (at 25% "
              "nothing was ever evicted: both policies 84.9%). Hit = an access that caused no "
              "GET.", "",
              "| trace | policy | epoch-2 hit rate | cap / corpus | accesses |",
              "|---|---|---|---|---|"]  # fmt: skip
    for h in results["hits"]:
        lines.append(
            f"| {h['trace']} | {h['policy']} | {h['hit_rate']:.1%} | {h['cap_share']:.0%} | "
            f"{h['accesses']:,} |"
        )
    lines += _peers(results)
    for e in results.get("errors", []):
        lines.append(f"- failed cell ({e.get('kind', '')}, {e['ranks']} ranks): {e['error']}")
    return "\n".join(lines)


def _peers(results: dict[str, Any]) -> list[str]:
    if not results["peers"]:
        return ["", "Peers: not run (no peers venv)."]
    lines = ["", "### Peers on the same bucket, each by its own route", "",
             "Random 64-document batches by id for the window, an empty local cache at the "
             "start; GETs and bytes as the proxy counted them.", "",
             "| corpus | system | route | docs/s | GETs per doc | bytes fetched / used | note |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    for kind, found in results["peers"].items():
        if "error" in found:
            lines.append(f"| {kind} | - | - | - | - | - | failed: {found['error'][-200:]!r} |")
            continue
        for row in found["rows"]:
            lines.append(
                f"| {kind} | {row['system']} | {row['route']} | {row.get('docs_s', 0):,.0f} | "
                f"{row.get('gets_per_doc', 0):.2f} | {row.get('bytes_ratio', 0):.1f} | "
                f"{row.get('note', '')} |"
            )
    return lines
