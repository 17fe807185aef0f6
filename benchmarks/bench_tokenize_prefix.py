"""A tokenized build of long documents under ``max_length``: a prefix encoded, against the
whole text encoded then cut, same store, same run.

    python benchmarks/bench_tokenize_prefix.py [--repeats 3] [--max-length 512] [--write]

Corpus: the Wikipedia articles of ``enwiki-2015-wikiextractor.jsonl`` under ``LADING_DATA``
(or ../shared/data): 2,006 articles, 30 MB, most far past 512 tokens, as MS MARCO documents
are. Tokenizer: a BERT-style WordPiece of 30,522 trained here on the first 2,000 articles.

Each repeat builds the store with token ids (the first ``max_length`` of each article, no
special tokens) twice, each in a fresh process, in alternating order:

- prefix: ``lading.build_store(..., tokenizer=, max_length=)`` as it is (a long text encoded
  from a prefix cut before a space, :func:`lading.stores.tokens.encode_first`);
- whole: the same call with ``PREFIX_CHARS_A_TOKEN`` set past every text's length, so every
  text is encoded whole and cut, as every build did before.

Reported: wall and CPU seconds (the child's user + system) and its peak RSS, median (min-max),
and prefix / whole within each repeat; the 1-minute load average after each build. The two
stores' token ids are compared in full: the figure stands only where they are equal.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from common import HERE, add_write_flag, data_dir, spread, write_section

ROUTES = ("prefix", "whole")
CHILD = """
import sys, lading
from lading.stores import tokens
if {whole!r}:
    tokens.PREFIX_CHARS_A_TOKEN = 1 << 40  # no text is long enough to be cut: encoded whole
lading.build_store({src!r}, {dest!r}, tokenizer={tok!r}, max_length={m}, overwrite=True,
                   progress=False)
# KiB: this process's peak RSS (VmHWM: ru_maxrss keeps the forking parent's across exec)
print([line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM")][0])
"""


def timed(route: str, src: Path, dest: Path, tok: Path, m: int) -> dict[str, float]:
    """Wall, CPU seconds and peak RSS (MiB) of one build by ``route``, in a fresh process."""
    code = CHILD.format(whole=route == "whole", src=str(src), dest=str(dest), tok=str(tok), m=m)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    peak = int(done.stdout.split()[-1]) / 1024
    return {"wall": wall, "cpu": cpu, "peak": peak, "load": os.getloadavg()[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-length", type=int, default=512)
    parser.add_argument("--out", default="bench-out/tokenize-prefix")
    add_write_flag(parser)
    args = parser.parse_args()
    root = data_dir()
    src = None if root is None else root / "lm" / "enwiki-2015-wikiextractor.jsonl"
    if src is None or not src.exists():
        sys.exit("needs LADING_DATA (or ../shared/data) with lm/enwiki-2015-wikiextractor.jsonl")
    work = Path(args.out)
    work.mkdir(parents=True, exist_ok=True)
    tok = work / "wordpiece-30522.json"
    if not tok.exists():
        from lading.stores.tokens import train_tokenizer

        with src.open() as f:
            texts = [json.loads(line)["text"] for _, line in zip(range(2_000), f)]
        train_tokenizer(texts, "wordpiece", 30_522).save(str(tok))
    runs: dict[str, list[dict[str, float]]] = {r: [] for r in ROUTES}
    for r in range(args.repeats):
        for route in ROUTES if r % 2 == 0 else ROUTES[::-1]:  # alternate who goes first
            got = timed(route, src, work / f"store-{route}", tok, args.max_length)
            runs[route].append(got)
            print(f"  repeat {r}: {route} wall {got['wall']:.1f} s, cpu {got['cpu']:.1f} s")
    import lading

    a, b = (lading.PackedStore(work / f"store-{route}") for route in ROUTES)
    rows = np.arange(len(a), dtype=np.int64)
    same = len(a) == len(b) and all(
        x.tolist() == y.tolist() for x, y in zip(a.tokens_at(rows), b.tokens_at(rows))
    )
    if not same:
        sys.exit("the two stores' token ids differ: no figure")
    tokens = sum(len(x) for x in a.tokens_at(rows))
    lines = [
        f"Corpus: {len(a):,} Wikipedia articles, {src.stat().st_size / 2**20:,.0f} MiB "
        f"({src.name}); WordPiece 30,522 (trained on the first 2,000), the first "
        f"{args.max_length} tokens of each ({tokens:,} in all, the two stores' ids equal). "
        f"Machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}. {args.repeats} "
        "repeats, the routes alternating which goes first, each build a fresh process from "
        "the JSONL to files on disk; median (min-max); prefix / whole within each repeat.",
        "",
        "| route | wall s | CPU s | peak RSS MiB | load |",
        "|---|---:|---:|---:|---:|",
    ]
    for route in ROUTES:
        loads = [x["load"] for x in runs[route]]
        lines.append(
            f"| {route} | {spread([x['wall'] for x in runs[route]], 1)} "
            f"| {spread([x['cpu'] for x in runs[route]], 1)} "
            f"| {spread([x['peak'] for x in runs[route]], 0)} "
            f"| {min(loads):.1f}-{max(loads):.1f} |"
        )
    lines += ["", "| prefix / whole | median (min-max) |", "|---|---:|"]
    for what in ("wall", "cpu", "peak"):
        ratios = [p[what] / w[what] for p, w in zip(runs["prefix"], runs["whole"])]
        lines.append(f"| {what} | **{spread(ratios)}** |")
    body = "\n".join(lines)
    print(body)
    command = (
        f"LADING_DATA=/work/shared/data python benchmarks/bench_tokenize_prefix.py "
        f"--repeats {args.repeats} --max-length {args.max_length}"
    )
    title = "Tokenized build of long documents: a prefix encoded, not the whole text"
    write_section(HERE / "RESULTS.md", title, body, command, write=args.write)


if __name__ == "__main__":
    main()
