"""One remote LM epoch, this checkout's code against another's, alternated: client CPU a
million tokens and tokens/s, paired run by run.

Each run is a fresh interpreter (its own local S3 behind the 30 ms ± 10 proxy, a cold node
cache at ``--share`` of the corpus's token bytes) reading one shuffled epoch of
``Windows(--seq-len, shuffle_documents=False)`` (the exact shuffle; with ``--permuted``, the
default windows over the documents permuted) in batches of ``--batch``
with the loader's defaults; the timed window is the epoch (``--epochs`` of them, and the
share of the second's ranges read from the cache is given), from the loader's first batch
asked to its last; client CPU is the reading process's own (every thread), the server's
excluded. Runs alternate new, base, new, base, ...; the ratios new / base are taken pair by
pair. ``--base-src`` is the code before a change (``git archive REV src | tar -x -C
/tmp/base``, and the C helper copied beside it).

    python benchmarks/remote_lm_ab.py --corpus DIR --base-src /tmp/base/src --pairs 4
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from common import HERE

ONE = """
import json, os, shutil, sys, tempfile, time
sys.path.insert(0, sys.argv[4])
from pathlib import Path
import lading
from lading.lm import LanguageModelLoader, TokenCorpus, Windows
from lading.testing import LocalS3
from remote_lm_corpus import upload_folder
local, share, seq_len, batch = Path(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), 8
epochs, permuted = int(sys.argv[5]), sys.argv[6] == "1"
with LocalS3(latency=0.03, jitter=0.01) as s3, tempfile.TemporaryDirectory() as cache:
    s3.make_bucket("lading-ab")
    upload_folder(local, "s3://lading-ab/c")
    corpus = TokenCorpus.open(local)
    cap = int(corpus.n_tokens * corpus.dtype.itemsize * share)
    remote = TokenCorpus.open("s3://lading-ab/c", cache=cache, cache_bytes=cap)
    mode = Windows(seq_len, shuffle_documents=permuted)
    loader = LanguageModelLoader(remote, batch, mode, seed=1)
    t0, c0 = time.perf_counter(), time.process_time()
    tokens = sum(b[0].numel() for _ in range(epochs) for b in loader)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    stats = remote.cache_stats()
    hits, misses = stats["by_epoch"].get(1, (0, 0))
    print(json.dumps({"lading": os.path.dirname(lading.__file__), "tokens": tokens,
                      "cpu_s_per_mtok": cpu / tokens * 1e6, "tokens_s": tokens / wall,
                      "gets": stats["gets"], "load": os.getloadavg()[0],
                      "epoch2_hits": hits / max(1, hits + misses)}))
    loader.close()
    remote.close()
"""


def run(src: str, args: argparse.Namespace) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": src}
    command = [sys.executable, "-c", ONE, str(args.corpus), str(args.share), str(args.seq_len),
               str(HERE), str(args.epochs), str(int(args.permuted))]  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def spread(xs: list[float], fmt: str) -> str:
    return f"{fmt.format(statistics.median(xs))} [{fmt.format(min(xs))}-{fmt.format(max(xs))}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, required=True, help="a local TokenCorpus folder")
    parser.add_argument("--base-src", required=True, help="the code before a change")
    parser.add_argument("--share", type=float, default=1.1, help="node cache / token bytes")
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=1, help="epochs a run (the timed window)")
    parser.add_argument(
        "--permuted", action="store_true", help="Windows' default order (documents permuted)"
    )
    args = parser.parse_args()
    new_src = str(HERE.parent / "src")
    pairs = []
    for _ in range(args.pairs):
        pairs.append((run(new_src, args), run(args.base_src, args)))
        print(json.dumps(pairs[-1]), flush=True)
    figures = (("cpu_s_per_mtok", "{:.3f}"), ("tokens_s", "{:,.0f}"), ("gets", "{:.0f}"),
               ("epoch2_hits", "{:.3f}"))  # fmt: skip
    for key, fmt in figures:
        new, old = [p[0][key] for p in pairs], [p[1][key] for p in pairs]
        ratio = [a / b for a, b in zip(new, old) if b]
        print(f"{key}: new {spread(new, fmt)}, base {spread(old, fmt)}, "
              f"new / base {spread(ratio, '{:.2f}') if ratio else 'n/a'}")  # fmt: skip
    loads = [p[i]["load"] for p in pairs for i in (0, 1)]
    print(f"load (1 min) {min(loads):.1f}-{max(loads):.1f}; {args.pairs} pairs")


if __name__ == "__main__":
    main()
