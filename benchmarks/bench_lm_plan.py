"""Time to a remote token corpus's first batch: the plan of the epoch made before it.

    python benchmarks/bench_lm_plan.py [--tokens 8000000,32000000] [--repeats 3]
        [--modes windows,stored] [--vs OTHER_SRC] [--write]

An LM loader over a remote corpus hands the node cache the order of the rest of the epoch and
the next before its first batch (``RemoteReads.plan``): every batch's token ranges, as the
eviction order. That work grows with the corpus, so the first batch of each epoch waits for
it. This script times it: synthetic corpora of ``--tokens`` tokens (documents of ~680 tokens,
``remote_lm_corpus.py``) on the local S3 (30 ms a GET); a child process opens the remote
corpus on a cold node cache, makes ``LanguageModelLoader(corpus, 8, Windows(2048))``
(``read_ahead=0``, so the plan runs on the timed thread) and times ``next(iter(loader))``:
wall and CPU (``time.process_time``, every thread), and the same of the local copy (no plan).
``windows`` is the default shuffle (documents permuted: a range a document a window meets),
``stored`` ``shuffle_documents=False`` (a range a window), ``blocks`` the locality shuffle
(``block_tokens`` 12 windows, buffers of 4 blocks: the plan orders every buffer).

With ``--vs OTHER_SRC`` (another checkout's ``src``, e.g. a worktree of the commit before) the
two trees' children run in turn, the order rotated each repeat, and the ratios are paired.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import HERE, add_write_flag, write_section
from remote_lm_corpus import _synthetic_source, upload_folder

CHILD = """
import json, sys, time, warnings
warnings.simplefilter("ignore")
from lading.lm import LanguageModelLoader, TokenCorpus, Windows
url, local, cache, mode = sys.argv[1:5]
if mode == "blocks":  # the locality shuffle, blocks of 12 windows (a small cache's region)
    shape = Windows(2048, shuffle_documents=False, block_tokens=12 * 2049)
else:
    shape = Windows(2048, shuffle_documents=(mode != "stored"))

def first(corpus, **kw):
    loader = LanguageModelLoader(corpus, 8, shape, seed=1, **kw)
    wall, cpu = time.perf_counter(), time.process_time()
    next(iter(loader))
    out = time.perf_counter() - wall, time.process_time() - cpu, len(loader)
    loader.close()
    return out

remote = TokenCorpus.open(url, cache=cache, cache_bytes="64M")
wall, cpu, batches = first(remote, read_ahead=0)
lwall, lcpu, _ = first(TokenCorpus.open(local))
print(json.dumps(dict(wall=wall, cpu=cpu, batches=batches, local_wall=lwall, local_cpu=lcpu)))
"""


def child(src: Path, url: str, local: Path, cache: Path, mode: str) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(src))
    args = [sys.executable, "-c", CHILD, url, str(local), str(cache), mode]
    out = subprocess.run(args, env=env, capture_output=True, text=True, check=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def spread(values: list[float], fmt: str) -> str:
    low, mid, high = (fmt.format(f(values)) for f in (min, statistics.median, max))
    return f"{mid} [{low}-{high}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", default="8000000,32000000")
    parser.add_argument("--modes", default="windows,stored")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--vs", type=Path, default=None, help="another checkout's src")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "lading-lm-plan")
    add_write_flag(parser)
    args = parser.parse_args()
    from lading.lm import TokenCorpus
    from lading.testing import LocalS3

    trees = {"this": HERE.parent / "src"}
    if args.vs is not None:
        trees["vs"] = args.vs.resolve()
    args.work.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    with LocalS3() as s3:
        s3.make_bucket("plan")
        for tokens in [int(t) for t in args.tokens.split(",")]:
            src, tok, _ = _synthetic_source(args.work, tokens)
            local = args.work / f"corpus-{tokens}"
            if not (local / "meta.json").is_file():
                TokenCorpus.build(src, local, tok, progress=False)
            url = f"s3://plan/c{tokens}"
            upload_folder(local, url)
            for mode in args.modes.split(","):
                for r in range(args.repeats):
                    names = list(trees)
                    names = names[r % len(names) :] + names[: r % len(names)]
                    for name in names:
                        cache = args.work / f"cache-{time.time_ns()}"
                        got = child(trees[name], url, local, cache, mode)
                        got.update(
                            tree=name, tokens=tokens, mode=mode, repeat=r, load=os.getloadavg()[0]
                        )
                        rows.append(got)
                        print(json.dumps(got), flush=True)
    seconds = time.perf_counter() - started
    body = report(rows, trees, args.repeats, seconds)
    print(body)
    write_section(
        HERE / "RESULTS.md",
        "Remote token corpora: time to the first batch (the plan)",
        body,
        " ".join(["python benchmarks/bench_lm_plan.py", *sys.argv[1:]]),
        write=args.write,
    )


def report(rows: list[dict[str, Any]], trees: dict[str, Path], repeats: int, seconds: float) -> str:
    lines = [
        f"Synthetic corpora (documents of ~680 tokens), windows of 2,048 + 1 tokens, batches of "
        f"8, the local S3 at 30 ms a GET, a cold node cache of 64 MB; {repeats} repeats"
        + (", the trees in turn (rotated)" if len(trees) > 1 else "")
        + f"; median [min-max]; {seconds:.0f} s in all. Trees: "
        + ", ".join(f"`{k}` = {v}" for k, v in trees.items())
        + ".",
        "",
        "| tree | mode | tokens | batches an epoch | first batch wall s | CPU s | CPU us a batch "
        "| local first batch wall s | load |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    keys = sorted({(r["tokens"], r["mode"]) for r in rows})
    for tokens, mode in keys:
        for tree in trees:
            mine = [r for r in rows if (r["tokens"], r["mode"], r["tree"]) == (tokens, mode, tree)]
            if not mine:
                continue
            per = [1e6 * r["cpu"] / r["batches"] for r in mine]
            lines.append(
                f"| {tree} | {mode} | {tokens:,} | {mine[0]['batches']:,} | "
                f"{spread([r['wall'] for r in mine], '{:.2f}')} | "
                f"{spread([r['cpu'] for r in mine], '{:.2f}')} | {spread(per, '{:.0f}')} | "
                f"{spread([r['local_wall'] for r in mine], '{:.3f}')} | "
                f"{spread([r['load'] for r in mine], '{:.1f}')} |"
            )
    if "vs" in trees:
        lines.append("")
        for tokens, mode in keys:
            pairs = [
                (a, b)
                for a in rows
                for b in rows
                if a["tree"] == "this"
                and b["tree"] == "vs"
                and (a["tokens"], a["mode"], a["repeat"]) == (tokens, mode, b["repeat"])
                and (b["tokens"], b["mode"]) == (tokens, mode)
            ]
            cpu = [a["cpu"] / b["cpu"] for a, b in pairs]
            wall = [a["wall"] / b["wall"] for a, b in pairs]
            lines.append(
                f"- {mode}, {tokens:,} tokens: this / vs, paired: CPU to the first batch "
                f"**{spread(cpu, '{:.2f}')}**, wall {spread(wall, '{:.2f}')}"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
