"""Cold ``lading get s3://...`` runs in a loop, counting exits that are not 0 (issue 39, item 9).

    python benchmarks/remote_exit_loop.py [--runs 48] [--at-once 4]

Builds a 20,000-document store (a title field, texts up to 3 KB) into the local S3 (30 ms a
request), then runs ``python -m lading get URL <20 ids>`` ``--runs`` times, ``--at-once`` at a
time, each with a fresh ``LADING_CACHE`` (a cold node: the index is staged), and prints the
exit codes seen and the first failures' stderr. An abort at exit shows as rc 134 (SIGABRT) or
135, "Fatal Python error: Aborted".
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import lading
from lading.testing import LocalS3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=48)
    parser.add_argument("--at-once", type=int, default=4)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="lading-exit-"))
    lines = (
        json.dumps({"id": f"d{i}", "title": f"t{i}", "text": f"doc {i} " + "y" * (i % 3000)})
        for i in range(20000)
    )
    (folder / "docs.jsonl").write_text("\n".join(lines) + "\n")
    with LocalS3() as s3:
        s3.make_bucket("exit-loop")
        url = "s3://exit-loop/docs"
        lading.build_store(folder / "docs.jsonl", url, cache=str(folder / "b"), progress=False)
        codes: collections.Counter[int] = collections.Counter()
        bad: list[tuple[int, str]] = []
        started = time.time()
        for first in range(0, args.runs, args.at_once):
            procs = []
            for run in range(first, min(args.runs, first + args.at_once)):
                env = dict(os.environ, LADING_CACHE=str(folder / f"cache-{run}"))
                ids = [f"d{(run * 37 + k * 101) % 20000}" for k in range(20)]
                command = [sys.executable, "-m", "lading", "get", url, *ids]
                procs.append(
                    subprocess.Popen(
                        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
                    )
                )
            for proc in procs:
                out, err = proc.communicate()
                codes[proc.returncode] += 1
                if proc.returncode != 0 or out.count("\n") != 20:
                    bad.append((proc.returncode, err[-800:]))
        print(f"{lading.__file__}: {args.runs} runs, exit codes {dict(codes)}, "
              f"{time.time() - started:.0f} s, load {os.getloadavg()[0]:.1f}")  # fmt: skip
        for code, err in bad[:3]:
            print(f"rc {code}: {err}")


if __name__ == "__main__":
    main()
