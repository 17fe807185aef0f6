"""Reading JSONL through ``SourceReader`` against a bare ``json.loads`` loop, old code beside new.

    python benchmarks/bench_source_reader.py [--docs 40000] [--repeats 5] [--old /work/main/src]

Texts: ``--docs`` real MS MARCO passages when the data is here (:func:`common.make_corpora`),
else synthetic ones, written as JSONL ``{"id": <int>, "text": ...}``. Each round runs, in fresh
subprocesses alternating which goes first, the reader of ``--old`` (a ``src`` folder, put on
``PYTHONPATH``) and of this checkout: each child times ``for r in SourceReader(path, "jsonl",
"raise", ParseOptions())``, ``for line in f: json.loads(line)["text"]`` and the sharded token
build's reading (``lading.lm.shards.shard_texts`` over the pieces of 4 shards) (CPU time,
``time.process_time``, best of 2), alternating those too. Printed: microseconds a document, median
[min-max] over the rounds, the reader over the bare loop, and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from common import make_corpora

HERE = Path(__file__).resolve().parent
NEW_SRC = HERE.parent / "src"

CHILD = """
import json, sys, time
from lading.sources import ParseOptions, SourceReader
path, reps = sys.argv[1], int(sys.argv[2])
def reader():
    n = 0
    for r in SourceReader(path, "jsonl", "raise", ParseOptions()):
        n += len(r.text)
    return n
def bare():
    n = 0
    with open(path, "rb") as f:
        for line in f:
            n += len(json.loads(line)["text"])
    return n
def shards():  # the sharded token build's reading: shard_texts over 4 shards' pieces
    from pathlib import Path
    from lading.lm.shards import inputs_of, is_jsonl, shard_texts
    from lading.stores.building.inputs import plan_shard
    inputs = inputs_of(Path(path))
    n = 0
    for i in range(4):
        planned = plan_shard(inputs.files, 4, None, i, is_jsonl)
        for text in shard_texts(inputs, planned, "blank", "raise"):
            n += len(text)
    return n
runs = {"reader": reader, "bare": bare, "shards": shards}
best = {name: [] for name in runs}
for i in range(reps):
    for name in list(runs) if i % 2 == 0 else list(runs)[::-1]:
        t = time.process_time()
        runs[name]()
        best[name].append(time.process_time() - t)
print(json.dumps({k: min(v) for k, v in best.items()}))
"""


def run(src: Path, path: Path) -> Any:
    env = {**os.environ, "PYTHONPATH": str(src)}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), "2"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out)


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=40_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--old", type=Path, default=Path("/work/main/src"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-source-reader-") as tmp:
        work = Path(tmp)
        tsv, _, origin = make_corpora(args.docs, work)
        path = work / "docs.jsonl"
        with open(tsv) as fin, open(path, "w") as fout:
            for i, line in enumerate(fin):
                text = line.rstrip("\n").split("\t", 1)[1]
                fout.write(json.dumps({"id": i, "text": text}) + "\n")
        sides = {"old": args.old, "new": NEW_SRC}
        us: dict[str, list[float]] = {"old": [], "new": [], "bare": []}
        ratio: dict[str, list[float]] = {"old": [], "new": []}
        shard_us: dict[str, list[float]] = {"old": [], "new": []}
        loads = []
        for r in range(args.repeats):
            loads.append(os.getloadavg()[0])
            for side in ("old", "new") if r % 2 == 0 else ("new", "old"):
                got = run(sides[side], path)
                us[side].append(got["reader"] / args.docs * 1e6)
                us["bare"].append(got["bare"] / args.docs * 1e6)
                ratio[side].append(got["reader"] / got["bare"])
                shard_us[side].append(got["shards"] / args.docs * 1e6)
    print(f"{args.docs:,} documents ({origin}), {args.repeats} rounds, load {spread(loads)}")
    print(f"old = {args.old}, new = {NEW_SRC}; CPU us a document, median [min-max]")
    print(f"  bare json.loads loop : {spread(us['bare'])}")
    for side in ("old", "new"):
        print(f"  reader {side:3}          : {spread(us[side])}  x bare {spread(ratio[side])}")
    gain = [o / n for o, n in zip(us["old"], us["new"])]
    print(f"  old / new            : {spread(gain)}")
    for side in ("old", "new"):
        print(f"  shard_texts x4 {side:3}  : {spread(shard_us[side])}")
    gain = [o / n for o, n in zip(shard_us["old"], shard_us["new"])]
    print(f"  old / new            : {spread(gain)}")


if __name__ == "__main__":
    main()
