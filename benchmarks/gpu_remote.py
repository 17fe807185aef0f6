"""The cross-encoder trained from a store in (local) S3 against the same run from a local store.

    python benchmarks/gpu_remote.py DIR OUT [--steps 80] [--rounds 2] [--cache-fraction 0.1]

DIR holds what ``benchmarks/gpu_prep.py DIR`` writes (``docs/``, ``model/``). The script
builds one store from ``docs/docs.jsonl`` with the model's tokenizer, twice: into a local
folder and into a bucket of the local S3 (moto behind the latency proxy: every GET waits
30 ± 10 ms, a real S3 GET's shape). Then it runs ``lading train cross-encoder`` (one GPU,
``--parallel none``) on each in turn, ``rounds`` times, alternating local / S3 so that drift
in the machine falls on both, each run with a cold node cache capped at ``cache-fraction`` of
the store's payload. A run's rate is the median of its log windows' samples/s after the
first window (warm-up: model load, CUDA init, the first GETs). The figure the issue asks for
is the ratio S3 / local of each adjacent pair (>= 0.95: the look-ahead hides the GETs), for
each ``--num-workers`` setting (default: 0 and 4, see ``NUM_WORKERS``).

Writes ``OUT/remote_train.json`` (every run's windows, the ratios, the proxy's GET counts)
and prints one summary line per run. Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import lading

# DataLoader workers, each setting a local/S3 pair a round. On 2026-11-27's H100 the S3 run
# read at 0.67-0.70x the local one with 0 workers; on the CPU twin (benchmarks/remote_step.py,
# RESULTS.md "Remote: Mosaic and litdata ...; the cross-encoder's data path on CPU") the S3
# run's training process spent ~40 ms of CPU a step against ~3 local at 0 workers, and with
# workers the reads leave it; 2 shared cores could not say which wins, 16 idle ones can.
NUM_WORKERS = "0,4"


def _local_s3() -> Any:
    """The local S3 class (moto behind the latency proxy)."""
    from lading.testing import LocalS3

    return LocalS3


def _payload_bytes(store_dir: Path) -> int:
    return sum(p.stat().st_size for p in store_dir.rglob("*") if p.is_file())


def _train(args: argparse.Namespace, prep: Path, store: str, out: Path, env: dict[str, str],
           workers: int) -> Any:  # fmt: skip
    docs = prep / "docs"
    command = [sys.executable, "-m", "lading", "train", "cross-encoder", "--out", str(out)]
    command += ["--store", store, "--queries", str(docs / "queries.tsv")]
    command += ["--qrels", str(docs / "qrels.txt"), "--negatives", str(docs / "run.trec")]
    command += ["--model", str(prep / "model")]
    command += ["--batch-size", str(args.batch_size), "--group-size", str(args.group_size)]
    command += ["--max-length", str(args.max_length), "--precision", args.precision]
    command += ["--steps", str(args.steps), "--log-every", str(args.log_every)]
    command += ["--parallel", "none", "--seed", "1", "--num-workers", str(workers)]
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=args.timeout)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    windows = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    rates = [w["samples_per_s"] for w in windows[1:]] or [w["samples_per_s"] for w in windows]
    return {"windows": windows, "rate": statistics.median(rates), "wall_s": wall}


def _write(out: Path, args: argparse.Namespace, documents: int, payload: int, cap: int,
           runs: list[dict[str, Any]]) -> dict[str, list[float]]:  # fmt: skip
    """Write ``OUT/remote_train.json`` with the runs so far (after every run: a part's time limit
    that cuts the script keeps what ran); the S3 / local ratio of each whole pair, by workers."""
    ratios: dict[str, list[float]] = {}
    for i in range(0, len(runs) - 1, 2):
        ratios.setdefault(str(runs[i]["workers"]), []).append(runs[i + 1]["rate"] / runs[i]["rate"])
    result = {
        "documents": documents,
        "payload_bytes": payload,
        "cache_cap_bytes": cap,
        "latency_s": args.latency,
        "settings": {k: v for k, v in vars(args).items() if k not in ("dir", "out")},
        "runs": runs,
        "ratios_s3_over_local": ratios,
    }
    (out / "remote_train.json").write_text(json.dumps(result, indent=1))
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", help="gpu_prep.py's folder (docs/, model/)")
    parser.add_argument("out", help="folder for remote_train.json")
    parser.add_argument("--steps", type=int, default=80, help="optimizer steps a run")
    parser.add_argument("--log-every", type=int, default=10, help="steps a log window")
    parser.add_argument("--rounds", type=int, default=2, help="local/S3 pairs")
    parser.add_argument("--batch-size", type=int, default=32, help="groups a step")
    parser.add_argument("--group-size", type=int, default=8, help="documents a group")
    parser.add_argument("--max-length", type=int, default=512, help="tokens a pair")
    parser.add_argument("--precision", default="bf16", help="fp32, bf16 or fp16")
    parser.add_argument("--cache-fraction", type=float, default=0.1, help="node cache cap")
    parser.add_argument("--latency", type=float, default=0.03, help="seconds a GET waits")
    parser.add_argument("--timeout", type=float, default=240, help="seconds a run may take")
    parser.add_argument(
        "--num-workers", default=NUM_WORKERS, help="DataLoader workers, a comma list (a pair each)"
    )
    args = parser.parse_args()
    prep, out = Path(args.dir), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = prep / "remote"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    corpus, tokenizer = prep / "docs" / "docs.jsonl", prep / "model" / "tokenizer.json"
    local = lading.build_store(corpus, work / "store", tokenizer=tokenizer)
    payload = _payload_bytes(work / "store")
    cap = max(1, int(payload * args.cache_fraction))
    runs: list[dict[str, Any]] = []
    with _local_s3()(latency=args.latency, jitter=args.latency / 3) as s3:
        s3.make_bucket("bench")
        lading.build_store(corpus, "s3://bench/store", tokenizer=tokenizer, cache=str(work / "c0"))
        for r in range(args.rounds):
            for workers in [int(w) for w in str(args.num_workers).split(",")]:
                for kind in ("local", "s3"):
                    env = dict(os.environ)
                    cache = work / f"cache-{kind}-{r}-w{workers}"
                    env.update({"LADING_CACHE": str(cache), "LADING_REMOTE_CACHE_BYTES": str(cap)})
                    store = str(work / "store") if kind == "local" else "s3://bench/store"
                    s3.reset()
                    run = _train(args, prep, store, work / f"run-{kind}-{r}-w{workers}", env,
                                 workers)  # fmt: skip
                    run.update(kind=kind, round=r, workers=workers, gets=s3.stats()["gets"])
                    runs.append(run)
                    _write(out, args, len(local), payload, cap, runs)  # kept if a limit cuts
                    print(f"{kind} round {r} workers {workers}: {run['rate']:.1f} samples/s "
                          f"(median of windows 2..), {run['gets']} GETs, {run['wall_s']:.1f} s "
                          "wall", flush=True)  # fmt: skip
    ratios = _write(out, args, len(local), payload, cap, runs)
    for setting, values in ratios.items():
        print(f"S3 / local samples/s at {setting} workers, each pair:",
              ", ".join(f"{x:.3f}" for x in values))  # fmt: skip


if __name__ == "__main__":
    main()
