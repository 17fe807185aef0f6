"""The CPU twin of gpu_remote.py: the cross-encoder's data path from the local S3 against a
local store, with a stand-in step of known duration instead of the model.

    python benchmarks/remote_step.py [--step-ms 150] [--steps 40] [--rounds 2]
        [--settings w0,w2,w4] [--step-kind sleep|spin]

One corpus as the GPU leg makes it (``lading synth documents``, 10,000 documents, 100 queries:
an epoch is 4 batches of 32 groups x 8 documents, 512 tokens), one store built with a
WordPiece tokenizer into a folder and into a bucket of the local S3 (every GET 30 ± 10 ms).
Each run is a fresh process that reads what ``lading train cross-encoder`` reads (the same
training groups, collator and loader, narrow ids as on CUDA) and, in place of the model,
spends ``--step-ms`` a step: ``sleep`` (a GPU-bound step: the host waits, the GIL is free) or
``spin`` (a launch-bound one: the host's Python thread busy). Runs alternate local / S3 within
each setting, every S3 run on a cold node cache capped at 10% of the store's payload; a
setting ``wN[+i][+fs][+aX][@base]`` is ``--num-workers N``; ``+fs``: the workers started by
``forkserver``, not forked (a forked worker of a process that used obstore reads through fsspec;
a forkserver's can use obstore); ``+i``: batches built when asked
(``read_ahead=0``; else as ``lading train cross-encoder`` builds them: on a thread for the S3
store at 0 workers); the node cache's window ahead at ``X`` of the cap (``AHEAD_SHARE``,
default as in the code); ``@base``: the code under
``--base-src`` (e.g. ``git archive 39d4349 src | tar -x -C /tmp/base``, then
``--base-src /tmp/base/src``) instead of this checkout's, to measure a change before/after in
one run. A run's rate: pairs a second over the steps after
``--warmup``; ``wait``: time in ``next(loader)`` a step; ``cpu``: the main process's own CPU a
step (workers excluded). The figure: S3 / local samples/s of each adjacent pair.

Writes ``bench-out/remote-step/results.json``; prints one line a run and the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, NamedTuple

HERE = Path(__file__).resolve().parent


def prepare(work: Path, documents: int, queries: int | None = None) -> dict[str, str]:
    """The corpus, queries, judgements, run and a WordPiece tokenizer (made once; ``queries``
    None: synth's default, ``documents // 100``, as the GPU leg's data)."""
    from lading.bench.synth import synth
    from lading.stores.tokens import save_tokenizer, train_tokenizer

    docs = work / ("docs" if queries is None else f"docs-q{queries}")
    tokenizer = work / "tokenizer.json"
    if not (docs / "run.trec").is_file():
        synth("documents", documents, docs, queries=queries)
    if not tokenizer.is_file():
        import itertools

        import lading

        texts = [r.text for r in itertools.islice(lading.read_records(docs / "docs.jsonl"), 5000)]
        save_tokenizer(train_tokenizer(texts, "wordpiece", 30_522), tokenizer)
    return {"corpus": str(docs / "docs.jsonl"), "queries": str(docs / "queries.tsv"),
            "qrels": str(docs / "qrels.txt"), "run": str(docs / "run.trec"),
            "tokenizer": str(tokenizer)}  # fmt: skip


def child(args: argparse.Namespace) -> None:
    """One run: the loader of ``lading train cross-encoder`` over ``--store``, a stand-in step."""
    import lading
    from lading.ir.collate import CrossEncoderCollator
    from lading.ir.train import groups_from_files
    from lading.loading.map_workload import loader
    from lading.stores.tokens import load_tokenizer

    files = json.loads(args.files)
    if args.ahead_share is not None:  # the node cache's window ahead, a share of the cap
        from lading.remote.cache import planner as planning

        planning.AHEAD_SHARE = args.ahead_share
    store = lading.open_store(args.store)
    settings = SimpleNamespace(group_size=args.group_size, sampling="run", depth=100,
                               min_relevance=1, seed=1)  # fmt: skip
    groups = groups_from_files(store, Path(files["queries"]), Path(files["qrels"]),
                               Path(files["run"]), settings)  # fmt: skip
    collate = CrossEncoderCollator(store, load_tokenizer(files["tokenizer"]), args.max_length,
                                   64, emit="narrow")  # fmt: skip
    try:  # as `lading train cross-encoder` builds them: on a thread for a remote store
        from lading.ir.train import read_ahead

        ahead: dict[str, Any] = {
            "read_ahead": 0 if args.inline else read_ahead(store, args.num_workers)
        }
    except ImportError:  # the code before read_ahead (an @base setting)
        ahead = {}
    if args.context:
        ahead["multiprocessing_context"] = args.context
    data = loader(groups, args.batch_size, collate, num_workers=args.num_workers, seed=1,
                  **ahead)  # fmt: skip
    step_s = args.step_ms / 1e3
    batches = iter(data)

    def fetch() -> None:
        nonlocal batches
        try:
            next(batches)
        except StopIteration:  # the epoch is over: the next one, as the trainer's loop does
            batches = iter(data)
            next(batches)

    def work() -> None:
        if args.step_kind == "sleep":
            time.sleep(step_s)
        else:
            until = time.perf_counter() + step_s
            while time.perf_counter() < until:
                pass

    steps = timed_steps(fetch, work, args.steps, args.warmup)
    stats = store.cache_stats() if hasattr(store, "cache_stats") else {}
    print(json.dumps({
        **figures(steps, args.batch_size * args.group_size, args.warmup),
        "cache_wait_s": stats.get("wait_s", 0.0), "gets": stats.get("gets", 0),
        "waits_ms": [round(1e3 * w, 1) for w in steps.waits],
    }))  # fmt: skip


class Steps(NamedTuple):
    """What :func:`timed_steps` saw: each step's wait for its batch and the clock at its end,
    the clock and the CPU clock when the first timed step began."""

    waits: list[float]
    marks: list[float]
    began: float
    cpu_s: float


def timed_steps(fetch: Callable[[], None], work: Callable[[], None], steps: int, warmup: int,
                clock: Callable[[], float] = time.perf_counter) -> Steps:  # fmt: skip
    """``steps`` steps of ``fetch`` (the batch) then ``work`` (the stand-in step), the first
    ``warmup`` of them before the clocks start."""
    waits, marks = [], []
    began, cpu0 = clock(), time.process_time()
    for step in range(steps):
        if step == warmup:
            began, cpu0 = clock(), time.process_time()
        started = clock()
        fetch()
        waits.append(clock() - started)
        work()
        marks.append(clock())
    return Steps(waits, marks, began, time.process_time() - cpu0)


def figures(steps: Steps, pairs: int, warmup: int) -> dict[str, float]:
    """A run's rate (pairs a second), median wait, wait share and CPU a step, over the steps
    after ``warmup``: all of them, each with its wait, from when the first one began."""
    waits, marks = steps.waits, steps.marks
    timed = len(marks) - warmup
    if timed < 1:
        raise ValueError(f"no timed step: {len(marks)} steps, {warmup} of them warm-up")
    elapsed = marks[-1] - steps.began
    return {
        "rate": pairs * timed / elapsed,
        "wait_ms": 1e3 * statistics.median(waits[warmup:]),
        "wait_share": sum(waits[warmup:]) / elapsed,
        "cpu_ms": 1e3 * steps.cpu_s / timed,
    }


def run_one(args: argparse.Namespace, files: dict[str, str], store: str, setting: str,
            cache: Path, cap: int) -> dict[str, Any]:  # fmt: skip
    """One run of ``setting`` (``wN[+i][+fs][+aX][@base]``) in a fresh process; its JSON line."""
    env = dict(os.environ)
    env.update({"LADING_CACHE": str(cache), "LADING_REMOTE_CACHE_BYTES": str(cap)})
    name, _, base = setting.partition("@")
    inline = "+i" in name
    fs = "+fs" in name
    workers, _, share = name.replace("+i", "").replace("+fs", "").removeprefix("w").partition("+a")
    if base:
        if not args.base_src:
            raise SystemExit(f"setting {setting!r} needs --base-src (the code before a change)")
        env["PYTHONPATH"] = args.base_src
    command = [sys.executable, __file__, "--child", "--store", store, "--files", json.dumps(files),
               "--num-workers", workers]  # fmt: skip
    if share:
        command += ["--ahead-share", share]
    if inline:
        command += ["--inline"]
    if fs:
        command += ["--context", "forkserver"]
    for name in ("steps", "warmup", "step_ms", "step_kind", "batch_size", "group_size",
                 "max_length"):  # fmt: skip
        command += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--store", help=argparse.SUPPRESS)
    parser.add_argument("--files", help=argparse.SUPPRESS)
    parser.add_argument("--num-workers", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--documents", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=None, help="default: documents // 100")
    parser.add_argument("--steps", type=int, default=40, help="steps a run")
    parser.add_argument("--warmup", type=int, default=8, help="steps not timed")
    parser.add_argument("--step-ms", type=float, default=150.0, help="the stand-in step")
    parser.add_argument("--step-kind", choices=("sleep", "spin"), default="sleep")
    parser.add_argument("--rounds", type=int, default=2, help="local/S3 pairs a setting")
    parser.add_argument("--ahead-share", type=float, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--inline", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--context", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--settings", default="w0,w2,w4", help="wN[+i][+fs][+aX][@base], see above")
    parser.add_argument("--base-src", default=None, help="the code before a change (@base)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--max-length", type=int, default=512)
    parser.add_argument("--cache-fraction", type=float, default=0.1)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    import shutil

    import lading
    from lading.testing import LocalS3

    work = HERE.parent / "bench-out" / "remote-step"
    files = prepare(work, args.documents, args.queries)
    shutil.rmtree(work / "store", ignore_errors=True)
    lading.build_store(files["corpus"], work / "store", tokenizer=files["tokenizer"],
                       progress=False)  # fmt: skip
    payload = sum(p.stat().st_size for p in (work / "store").rglob("*") if p.is_file())
    cap = int(payload * args.cache_fraction)
    runs: list[dict[str, Any]] = []
    started = time.time()
    with LocalS3(latency=0.03, jitter=0.01) as s3:
        s3.make_bucket("bench")
        lading.build_store(files["corpus"], "s3://bench/store", tokenizer=files["tokenizer"],
                           cache=str(work / "up"), progress=False)  # fmt: skip
        for r in range(args.rounds):
            for setting in args.settings.split(","):
                for kind in ("local", "s3"):
                    cache = work / f"cache-{time.time_ns()}"
                    store = str(work / "store") if kind == "local" else "s3://bench/store"
                    load = os.getloadavg()[0]
                    s3.reset()
                    run = run_one(args, files, store, setting, cache, cap)
                    run.update(kind=kind, setting=setting, round=r, load=load,
                               proxy_gets=s3.stats()["gets"])  # fmt: skip
                    shutil.rmtree(cache, ignore_errors=True)
                    runs.append(run)
                    print(json.dumps(run), flush=True)
    ratios: dict[str, list[float]] = {}
    for i in range(0, len(runs) - 1, 2):
        ratios.setdefault(runs[i]["setting"], []).append(runs[i + 1]["rate"] / runs[i]["rate"])
    result = {"args": {k: v for k, v in vars(args).items() if k not in ("child", "store", "files")},
              "payload_bytes": payload, "cap_bytes": cap, "runs": runs, "ratios": ratios,
              "seconds": time.time() - started}  # fmt: skip
    (work / "results.json").write_text(json.dumps(result, indent=1))
    print(render(result))


def render(result: dict[str, Any]) -> str:
    """A markdown table: per setting, each kind's median samples/s, main-process CPU and wait
    a step, and the ratio S3 / local of each pair (median [min-max])."""

    def spread(values: list[float], fmt: str) -> str:
        mid = statistics.median(values)
        return f"{fmt.format(mid)} [{fmt.format(min(values))}-{fmt.format(max(values))}]"

    lines = [
        "| setting | local pairs/s | S3 pairs/s | S3 / local | main CPU ms a step, local / S3 "
        "| wait ms a step (median), local / S3 | load |",
        "|---|---|---|---|---|---|---|",
    ]
    for setting, ratios in result["ratios"].items():
        mine = {k: [r for r in result["runs"] if r["setting"] == setting and r["kind"] == k]
                for k in ("local", "s3")}  # fmt: skip
        rate = {k: spread([r["rate"] for r in v], "{:,.0f}") for k, v in mine.items()}
        cpu = {k: spread([r["cpu_ms"] for r in v], "{:.1f}") for k, v in mine.items()}
        wait = {k: spread([r["wait_ms"] for r in v], "{:.1f}") for k, v in mine.items()}
        load = spread([r["load"] for r in mine["local"] + mine["s3"]], "{:.1f}")
        ratio = spread(ratios, "{:.2f}")
        lines.append(
            f"| {setting} | {rate['local']} | {rate['s3']} | {ratio} | {cpu['local']} / "
            f"{cpu['s3']} | {wait['local']} / {wait['s3']} | {load} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
