"""The head to head of issue 48 item 6: token corpora from one bucket, lading and the peers by
their own routes, over short and long documents, caps of 10 % and 110 %, idle and beside
CPU-bound neighbours.

Each cell of the grid is one run of ``bench_remote_lm.py`` (its own interpreter, its own local
S3 behind the 30 ms proxy, 3 repeats with the systems' order rotated, the peers' shards of
cap / 8) writing ``results.json`` under ``--out``/<cell>; this script runs them in turn and
renders one section from their rows, or renders cells already run (``--from``). Per cell: tokens/s
over the epoch, client CPU (the process's own, every thread) and the server's per million
tokens, GETs, bytes fetched / used, the cache folder on disk at the end, the first batch and the
resume (k batches, a fresh reader with a cold cache, the next two compared); then the ratios
paired within each repeat. A system is ranked above another only where the two spreads of a
figure do not overlap.

    python benchmarks/remote_lm_grid.py --tokens 20000000 --python peers/bin/python --write
    python benchmarks/remote_lm_grid.py --from bench-out/remote-lm-grid --write
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from common import HERE, OUT, add_write_flag, write_section
from remote_lm_report import _paired, spread

SYSTEMS = ("lading@stored", "lading@blocks", "litdata", "mosaic")
NAMES = {
    "lading@stored": "lading, exact shuffle (one range a window)",
    "lading": "lading, default windows (documents permuted)",
    "lading@blocks": "lading, locality shuffle (blocks of a region)",
    "litdata": "litdata `TokensLoader`",
    "mosaic": "Mosaic MDS",
}


def cell_name(doc_tokens: int, share: float, neighbours: int) -> str:
    return f"d{doc_tokens}-s{share}-n{neighbours}"


def run_cell(args: argparse.Namespace, doc: int, share: float, n: int) -> Path:
    out = args.out / cell_name(doc, share, n)
    command = [
        args.python, str(HERE / "bench_remote_lm.py"), "--synthetic", "--tokens", str(args.tokens),
        "--doc-tokens", str(doc), "--share", str(share), "--neighbour", str(n),
        "--systems", args.systems, "--repeats", str(args.repeats), "--no-parquet",
        "--ceiling-seconds", "0", "--out", str(out),
    ]  # fmt: skip
    print(f"== {out.name} (load {os.getloadavg()[0]:.1f})", flush=True)
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return out


def _ranked(rows: list[dict[str, Any]], a: str, b: str, key: str, lower: bool) -> str:
    """``a`` before ``b`` on ``key`` where their spreads do not overlap; else "not decided"."""
    va = [r[key] for r in rows if r["system"] == a and "error" not in r]
    vb = [r[key] for r in rows if r["system"] == b and "error" not in r]
    if not va or not vb:
        return "not measured"
    if (max(va) < min(vb)) if lower else (min(va) > max(vb)):
        return f"{a} ahead"
    if (max(vb) < min(va)) if lower else (min(vb) > max(va)):
        return f"{b} ahead"
    return "not decided (spreads overlap)"


def render_cell(results: dict[str, Any]) -> list[str]:
    rows, corpus, given = results["rows"], results["corpus"], results["args"]
    systems = [s for s in NAMES if s in given["systems"].split(",")]
    neighbours = int(given["neighbour"])
    title = (
        f"#### {int(given['doc_tokens']):,}-token documents, cache {float(given['share']):.0%} "
        f"of the corpus ({corpus['cap'] / 2**20:.1f} MiB), "
        + (f"{neighbours} CPU-bound neighbours" if neighbours else "no neighbour")
    )
    lines = [title, "",
             "| system | tokens/s | client CPU s / M tokens | server CPU s / M tokens | GETs | "
             "fetched / used | cache on disk, MiB | first batch s | resume | load |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|"]  # fmt: skip
    for system in systems:
        mine = [r for r in rows if r["system"] == system and "error" not in r]
        if not mine:
            why = next((r["error"] for r in rows if r["system"] == system), "not run")
            lines.append(f"| {NAMES[system]} | failed: {why} | | | | | | | | |")
            continue

        def of(key: str, fmt: str, scale: float = 1.0, mine: list[Any] = mine) -> str:
            return spread([r[key] / scale for r in mine], fmt)

        tested = {r["resume"] for r in mine if r.get("resume", "not tested") != "not tested"}
        resume = sorted(tested) or ["not tested"]
        lines.append(
            f"| {NAMES[system]} | {of('tokens_s', '{:,.0f}')} | {of('cpu_s_per_mtok', '{:.3f}')} | "
            f"{of('server_s_per_mtok', '{:.3f}')} | {of('gets', '{:,.0f}')} | "
            f"{of('fetched_used', '{:.3f}')} | {of('disk', '{:.2f}', 2**20)} | "
            f"{of('first_batch_s', '{:.2f}')} | {', '.join(resume)} | {of('load', '{:.1f}')} |"
        )
    lines += [
        "",
        "Paired in each repeat (median [min-max]), and the ranking where spreads allow:",
        "",
    ]
    for ours in [s for s in ("lading@blocks", "lading@stored", "lading") if s in systems]:
        for peer in [s for s in ("litdata", "mosaic") if s in systems]:
            tps = spread(_paired(rows, ours, peer, "tokens_s"), "{:.2f}")
            cpu = spread(_paired(rows, ours, peer, "cpu_s_per_mtok"), "{:.2f}")
            faster = _ranked(rows, ours, peer, "tokens_s", False)
            cheaper = _ranked(rows, ours, peer, "cpu_s_per_mtok", True)
            lines.append(
                f"- {ours} / {peer}: tokens/s {tps} ({faster}); "
                f"client CPU a token {cpu} ({cheaper})"
            )
    return lines


def render(cells: list[dict[str, Any]]) -> str:
    first = cells[0]
    corpus = first["corpus"]
    loads = [r["load"] for c in cells for r in c["rows"] if "load" in r]
    head = (
        f"Synthetic corpora of ~{int(corpus['n_tokens']):,} tokens ({corpus['origin']}; the "
        "mean length set per cell), windows of "
        f"{corpus['seq_len']:,} tokens in batches of {corpus['batch']}, one shuffled epoch, in "
        "this process; one local S3 bucket behind a 30 ms ± 10 proxy; the peers write shards of "
        "cap / 8 (their favourable setting at these caps) and read by their own routes; "
        f"{first['args']['repeats']} repeats a cell with the systems' order rotated; a cold "
        "cache each time. Client CPU: the reading process's own (every thread); server CPU: the "
        "local S3's process tree. Cache on disk: the cache folder at the end of the epoch. "
        "Resume: k batches, a fresh reader with a cold cache, the next two batches compared. "
        f"Neighbours: that many processes spinning on the CPU beside every measurement (2 cores). "
        f"Load (1 min) {min(loads):.1f}-{max(loads):.1f}."
    )
    body = [head, ""]
    for results in cells:
        body += [*render_cell(results), ""]
    return "\n".join(body)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=20_000_000)
    parser.add_argument("--doc-tokens", default="680,4000", help="mean document lengths")
    parser.add_argument("--shares", default="0.1,1.1", help="node cache / corpus bytes")
    parser.add_argument("--neighbours", default="0,2", help="CPU-bound processes beside")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--systems", default=",".join(SYSTEMS),
                        help=f"of {', '.join(NAMES)}")  # fmt: skip
    parser.add_argument("--python", default=sys.executable,
                        help="an interpreter with mosaicml-streaming and litdata")  # fmt: skip
    parser.add_argument("--out", type=Path, default=OUT.parent / "remote-lm-grid")
    parser.add_argument("--from", dest="done", type=Path, help="render the cells run there")
    add_write_flag(parser)
    args = parser.parse_args()
    started = time.time()
    if args.done is not None:
        folders = sorted(p.parent for p in args.done.glob("*/results.json"))
    else:
        folders = [
            run_cell(args, int(doc), float(share), int(n))
            for n in args.neighbours.split(",")
            for doc in args.doc_tokens.split(",")
            for share in args.shares.split(",")
        ]
    cells = [json.loads((f / "results.json").read_text()) for f in folders]
    cells.sort(key=lambda c: (int(c["args"]["neighbour"]), int(c["args"]["doc_tokens"]),
                              float(c["args"]["share"])))  # fmt: skip
    body = render(cells)
    if args.done is None:
        body += f"\n{time.time() - started:.0f} s in all."
    command = "python benchmarks/remote_lm_grid.py " + " ".join(sys.argv[1:])
    title = "Remote token corpora, head to head on the peers' terms too (issue 48 item 6)"
    write_section(HERE / "RESULTS.md", title, body, command, write=args.write)


if __name__ == "__main__":
    main()
