"""A tokenized build: lading against HF datasets' ``map(batched=True)``, same tokenizer, same run.

    python benchmarks/bench_tokenize_build.py [--n 200000] [--repeats 3] [--write]

Corpus: ``n`` MS MARCO passages (:func:`common.make_corpora`: real passages of the TREC DL
19/20 pool resampled where ``LADING_DATA`` or ../shared/data holds them, else synthetic ones),
and a BERT-style WordPiece vocabulary of 30,522 trained on the first 20,000 of them. Each
repeat builds the store with token ids (the first 512 of each passage, no special tokens) by
both routes of ``peers_systems.build``, in alternating order, each in a fresh process as a user
runs it, from the TSV to files on disk:

- lading: ``lading.build_store(tsv, dest, tokenizer=..., max_length=512)``;
- HF: the TSV into a ``Dataset``, ``map(batched=True)`` calling the same tokenizer's
  ``encode_batch`` into a uint16 ``input_ids`` column, ``save_to_disk``.

Both use the tokenizers library's own thread pool with its default size (the machine's cores)
and nothing else set. Reported: wall seconds and CPU seconds (user + system of the build's
process and its children) per route, and lading / HF within each repeat (median, min-max):
below 1, lading is faster. The 1-minute load average around each build is recorded: this
machine's cores are shared, so CPU time is the steadier figure.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from common import HERE, add_write_flag, bert_vocabulary, make_corpora, spread, write_section

ROUTES = ("lading", "hf")
CHILD = (
    "import sys; sys.path.insert(0, {bench!r}); from pathlib import Path; "
    "from peers_systems import build; build({route!r}, Path({tsv!r}), Path({dest!r}), {tok!r})"
)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(route: str, tsv: Path, dest: Path, tok: Path) -> dict[str, float]:
    """Wall and CPU seconds of one build of ``tsv`` by ``route`` in a fresh process."""
    code = CHILD.format(bench=str(HERE), route=route, tsv=str(tsv), dest=str(dest), tok=str(tok))
    load, cpu, started = os.getloadavg()[0], _children_cpu(), time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    wall = time.perf_counter() - started
    return {
        "wall": wall,
        "cpu": _children_cpu() - cpu,
        "load": (load + os.getloadavg()[0]) / 2,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="bench-out/tokenize-build")
    add_write_flag(parser)
    args = parser.parse_args()
    work = Path(args.out)
    work.mkdir(parents=True, exist_ok=True)
    src, _, origin = make_corpora(args.n, work)
    tok = work / "wordpiece-30522.json"
    if not tok.exists():
        bert_vocabulary(src).save(str(tok))
    runs: dict[str, list[dict[str, float]]] = {r: [] for r in ROUTES}
    for r in range(args.repeats):
        for route in ROUTES if r % 2 == 0 else ROUTES[::-1]:  # alternate who goes first
            runs[route].append(timed(route, src, work / f"store-{route}", tok))
            got = runs[route][-1]
            print(f"  repeat {r}: {route} wall {got['wall']:.1f} s, cpu {got['cpu']:.1f} s")
    lines = [
        f"Corpus: {args.n:,} passages, {src.stat().st_size / 2**20:,.0f} MiB ({origin}); "
        f"WordPiece 30,522 (trained on the first 20,000), first 512 tokens. Machine: "
        f"{os.cpu_count()} cores, Python {sys.version.split()[0]}. {args.repeats} repeats, the "
        "routes alternating which goes first, each build a fresh process from the TSV to "
        "files on disk; median (min-max). lading / HF is taken within each repeat.",
        "",
        "| route | wall s | CPU s | load |",
        "|---|---:|---:|---:|",
    ]
    for route in ROUTES:
        loads = [x["load"] for x in runs[route]]
        lines.append(
            f"| {route} | {spread([x['wall'] for x in runs[route]], 1)} "
            f"| {spread([x['cpu'] for x in runs[route]], 1)} "
            f"| {min(loads):.1f}-{max(loads):.1f} |"
        )
    lines += ["", "| lading / HF | median (min-max) |", "|---|---:|"]
    for what in ("wall", "cpu"):
        ratios = [a[what] / b[what] for a, b in zip(runs["lading"], runs["hf"])]
        lines.append(f"| {what} | **{spread(ratios)}** |")
    body = "\n".join(lines)
    print(body)
    command = f"python benchmarks/bench_tokenize_build.py --n {args.n} --repeats {args.repeats}"
    title = "Tokenized build: lading and HF datasets, same tokenizer"
    write_section(HERE / "RESULTS.md", title, body, command, write=args.write)


if __name__ == "__main__":
    main()
