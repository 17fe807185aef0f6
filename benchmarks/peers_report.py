"""bench_peers.py's table: median [min-max] over the repeats, and every peer's ratio to lading."""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path

BATCH = 64

# key, row name
FIGURES: tuple[tuple[str, str], ...] = (
    ("build_s", "build from the TSV, s"),
    ("peak_rss_mib", "build peak RSS above the interpreter's, MiB"),
    ("disk_mib", "on disk, MiB"),
    ("lookups_per_s", f"lookups by id, {BATCH}/batch, warm, docs/s"),
    ("cold_lookups_per_s", f"lookups by id, {BATCH}/batch, cold, docs/s"),
    ("cold_resident_pct", "store pages in the page cache after the drop, %"),
    ("cold_open_s", "cold open (map, id -> row map), s"),
    ("cold_open_cached_pct", "store pages in the page cache after the cold open, %"),
    ("cold_first_s", "cold: open + the first 50 batches, s"),
    ("scan_per_s", "sequential scan, warm, docs/s"),
    ("anon_mib", "private memory per process (open + id map + reads), MiB"),
    ("tok_build_s", "build with token ids, s"),
    ("tok_peak_rss_mib", "build with token ids: peak RSS, MiB"),
    ("tok_disk_mib", "with token ids: on disk, MiB"),
    ("tok_lookups_per_s", f"token-id lookups, {BATCH}/batch, warm, docs/s"),
    ("tok_cold_lookups_per_s", f"token-id lookups, {BATCH}/batch, cold, docs/s"),
    ("tok_cold_open_cached_pct", "token store pages in the page cache after the cold open, %"),
)


def cell(values: list[float]) -> str:
    if not values:
        return "-"
    med = statistics.median(values)
    digits = 0 if med >= 100 else 2
    spread = f" [{min(values):,.{digits}f}-{max(values):,.{digits}f}]" if len(values) > 1 else ""
    return f"{med:,.{digits}f}{spread}"


def table(
    results: dict[str, dict[str, list[float]]], skipped: dict[str, str], order: tuple[str, ...]
) -> str:
    systems = [s for s in order if s in results]
    others = [s for s in systems if s != "lading"]
    head = (
        "| measure | " + " | ".join(systems) + " | " + " | ".join(f"{s} / lading" for s in others)
    )
    lines = [head + " |", "|---" * (1 + len(systems) + len(others)) + "|"]
    lading = results.get("lading", {})
    for key, name in FIGURES:
        if not any(results[s].get(key) for s in systems):
            continue
        cells = [cell(results[s].get(key, [])) for s in systems]
        ratios = []
        for s in others:
            mine, base = results[s].get(key, []), lading.get(key, [])
            ok = mine and base and statistics.median(base) > 0
            ratios.append(f"{statistics.median(mine) / statistics.median(base):.2f}" if ok else "-")
        lines.append(f"| {name} | " + " | ".join(cells + ratios) + " |")
    lines += [f"\n{s}: skipped ({why})" for s, why in skipped.items()]
    return "\n".join(lines)


def header(
    what: str,
    tsv: Path,
    args: argparse.Namespace,
    seconds: float,
    load: list[float],
    versions: dict[str, str],
    python: str,
) -> str:
    """How the figures were made: corpus, repeats, windows, load, machine and versions."""
    return (
        f"{what}, {tsv.stat().st_size / 2**20:.1f} MiB of TSV); {args.repeats} repeats, systems "
        f"interleaved, every figure from a fresh process; median [min-max]. Warm lookups: "
        f"timed for {args.seconds:g} s after 100 warm-up batches. Cold lookups: 50 fresh random "
        f"batches timed from the first, right after every file of the store was evicted from "
        f"the page cache (`fsync` + `posix_fadvise(POSIX_FADV_DONTNEED)`, no root needed; the "
        f"dict's are its TSV's, read before the timing). "
        + (
            "Token ids: not measured (--no-tokens). "
            if args.no_tokens
            else "Token ids: a WordPiece vocabulary of 8,000 trained here, the first 512 ids of "
            "each document; lading hands out read-only views of its map, HF python lists (its "
            "default format; numpy was 2.7x slower), litdata arrays, the dict arrays copied "
            "from lading's store. "
        )
        + f"Build peak RSS: of the "
        f"building process only (litdata's worker not counted). {seconds:.0f} s in all; load "
        f"average {min(load):.2f}-{max(load):.2f} during the run (other work shared the "
        f"machine), {os.cpu_count()} CPUs, Python {python}. Versions: "
        + ", ".join(f"{k} {v}" for k, v in versions.items())
        + "."
    )
