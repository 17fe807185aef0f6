"""What owned LM batches cost: this tree's loader against a baseline revision, side by side.

    python benchmarks/bench_lm_owned.py [--baseline REV] [--copies 3] [--repeats 5] [--write]

Before, :class:`~lading.lm.LanguageModelLoader` yielded views of one reused buffer, which the
next batch overwrote (``list(loader)`` kept other batches' tokens). Now a whole-epoch stream is
read into a fresh chunk per refill (batches are views of it, never written again) and other
batches are arrays of their own. ``--baseline`` (default: the last revision with the reused
buffer) is checked out into a temporary git worktree; each repeat runs one epoch of each tree in
a fresh process (``PYTHONPATH`` to that tree's ``src``), alternating, so drift hits both alike.
Same corpus (the Wikipedia sample of ../shared/data read ``--copies`` times, BPE 8,000), batch
64 x bptt 70, streams and windows modes. Timed window: one whole epoch, nothing consuming the
batches (the loader alone: the worst case). Median and min–max over the repeats.
``--write`` puts the table in benchmarks/RESULTS.md.
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

if __name__ == "__main__" and "--child" not in sys.argv:  # (a child of the baseline's tree
    from bench_lm import BATCH, BPTT, build  # imports nothing of this one: its lading may
    from common import add_write_flag, write_section  # lack what these modules import)
else:
    BATCH, BPTT = 64, 70  # bench_lm's
HERE = Path(__file__).resolve().parent

BASELINE = "3e3486f"  # the last revision whose LM loader reused one buffer for every batch


def child(corpus_path: str, mode: str) -> None:
    """One epoch in this process; prints tokens/s."""
    from lading.lm import LanguageModelLoader, TokenCorpus
    from lading.world import World

    old: dict[str, Any]
    sequence: Any  # this child runs this tree's lading and the baseline's
    try:  # the sequence options objects (issue 23) ...
        from lading.lm import Streams, Windows

        sequence, old = (Streams(BPTT) if mode == "streams" else Windows(BPTT)), {}
    except ImportError:  # ... or a tree from before them: bptt third, mode= a keyword
        sequence, old = BPTT, {"mode": mode}
    corpus = TokenCorpus.open(corpus_path)
    loader = LanguageModelLoader(corpus, BATCH, sequence, world=World(), seed=1, **old)
    started, tokens = time.perf_counter(), 0
    for batch in loader:
        assert isinstance(batch, tuple)  # (x, y): streams and windows without boundaries
        tokens += batch[0].numel()
    print(json.dumps(tokens / (time.perf_counter() - started)))


def run(src: Path, corpus: str, mode: str) -> float:
    env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{HERE}"}
    done = subprocess.run(
        [sys.executable, __file__, "--child", mode, "--corpus", corpus],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return float(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--baseline", default=BASELINE)
    parser.add_argument("--copies", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default="bench-out/lm")
    parser.add_argument("--child")
    parser.add_argument("--corpus")
    if "--child" in sys.argv:  # one epoch of a tree's loader (this one's or the baseline's)
        args, _ = parser.parse_known_args()
        child(args.corpus, args.child)
        return
    add_write_flag(parser)
    args = parser.parse_args()
    corpus = str(build(args.copies, Path(args.out)).path)
    repo = HERE.parent
    with tempfile.TemporaryDirectory() as tmp:
        old_tree = Path(tmp) / "baseline"
        subprocess.run(
            ["git", "-C", str(repo), "worktree", "add", "--detach", str(old_tree), args.baseline],
            check=True,
            capture_output=True,
        )
        try:
            lines = table(old_tree / "src", repo / "src", corpus, args)
        finally:
            subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(old_tree)])
    report = "\n".join(lines)
    print(report)
    write_section(
        HERE / "RESULTS.md",
        "Language model: owned batches",
        report,
        "python benchmarks/bench_lm_owned.py --write",
        write=args.write,
    )


def baseline_corpus(old: Path, corpus: str) -> str:
    """``corpus`` built again by the baseline tree's lading (from the same texts and BPE
    beside it, ``bench_lm.build``'s): a baseline reads only its own format's corpora."""
    here = Path(corpus)
    dest = here.with_name(here.name + "-baseline")
    code = "import sys; from lading.lm import TokenCorpus; TokenCorpus.build(*sys.argv[1:])"
    source = here.with_name(here.name.replace("corpus-", "wiki-"))
    argv = [sys.executable, "-c", code, str(source), str(dest), str(here.parent / "bpe8000.json")]
    env = {**os.environ, "PYTHONPATH": str(old)}
    subprocess.run(argv, env=env, check=True, capture_output=True)
    return str(dest)


def table(old: Path, new: Path, corpus: str, args: argparse.Namespace) -> list[str]:
    lines = [
        f"Corpus: the Wikipedia sample read {args.copies} times. Batch {BATCH} x bptt {BPTT}; "
        f"timed window: one whole epoch, loader alone, one fresh process per epoch; "
        f"{args.repeats} repeats alternating baseline ({args.baseline}: one reused buffer) and "
        "this tree (owned batches); median [min–max] tokens/s.",
        "",
        "| mode | baseline: reused buffer | owned batches | owned / baseline (medians) |",
        "|---|---:|---:|---:|",
    ]
    theirs = baseline_corpus(old, corpus)  # the same tokens, in the baseline's format
    for mode in ("streams", "windows"):
        runs: dict[str, list[float]] = {"old": [], "new": []}
        for _ in range(args.repeats):
            runs["old"].append(run(old, theirs, mode))
            runs["new"].append(run(new, corpus, mode))
        o, n = runs["old"], runs["new"]
        lines.append(
            f"| {mode} | {statistics.median(o):,.0f} [{min(o):,.0f}–{max(o):,.0f}] | "
            f"{statistics.median(n):,.0f} [{min(n):,.0f}–{max(n):,.0f}] | "
            f"{statistics.median(n) / statistics.median(o):.3f} |"
        )
    return lines


if __name__ == "__main__":
    main()
