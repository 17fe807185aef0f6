"""A sharded tokenizing build and its merge, lading against datatrove, side by side (issue 49
item 6).

    python benchmarks/bench_tokenize_datatrove.py [--copies 1] [--files 8] [--repeats 3]
        [--datatrove-python PATH] [--write]

Texts: English Wikipedia (``lm/enwiki-2015-wikiextractor.jsonl`` under ../shared/data or
``$LADING_DATA``; 2,006 articles) repeated ``--copies`` times and cut into ``--files`` JSONL
files of whole lines; a byte-level BPE of 8,000 entries trained here on the first 300
articles. Both systems tokenize the same files with the same tokenizer file, no EOS, one task
(shard) a file, ``--workers`` processes at a time (spawned; at 1, the tasks one after another
in the leg's own interpreter, as datatrove's executor runs them), then merge the outputs:

- lading: ``TokenCorpus.build_shard(src, dest, (i, n), tokenizer)`` for every ``i`` in a
  process pool, then ``TokenCorpus.merge(dest)``;
- datatrove: its ``LocalPipelineExecutor`` over ``JsonlReader`` + ``DocumentTokenizer``
  (``shuffle_documents=False``: the stored order, as lading's), ``tasks`` = files, then
  ``DocumentTokenizerMerger(shuffle=False)`` into one file. Its pool is started with
  ``start_method="spawn"`` as lading's is: under its default, ``forkserver``, the workers are
  the fork server's children, and their CPU reaches no ``getrusage`` of ours.

Each system runs in its own interpreter (datatrove in ``--datatrove-python``: it need not share
lading's environment), started fresh each leg. Timed windows, from inside that interpreter
after its imports: the build (the pool or executor's whole run, its workers' start and imports
included where there are workers) and the merge; CPU is user + system of the interpreter and
every process it waited for (``getrusage``), per token of the corpus. The merged tokens of
the two are compared: they must be the same array, bit for bit. Legs rotate each repeat;
ratios are lading / datatrove within one repeat.

datatrove is not one of lading's dependencies; install it beside (``python -m venv dt &&
dt/bin/pip install datatrove orjson``) and pass ``--datatrove-python dt/bin/python``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import numpy as np

from common import HERE, add_write_flag, data_dir, write_section

WIKI = "lm/enwiki-2015-wikiextractor.jsonl"

TIMED = """
import json, resource, sys, time

def cpu():
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime

def timed(fn):
    wall, used = time.perf_counter(), cpu()
    fn()
    return time.perf_counter() - wall, cpu() - used

def timed_imports(fn):  # timed(fn), and the modules fn imported on the way
    before = set(sys.modules)
    wall, used = timed(fn)
    return wall, used, sorted(set(sys.modules) - before)
"""

LADING = (
    TIMED
    + """
from concurrent.futures import ProcessPoolExecutor
import multiprocessing

from lading.lm import TokenCorpus
import lading.lm.merge  # the merge's code, imported before its window as datatrove's merger is

def shard(args):
    src, dest, i, n, tok = args
    TokenCorpus.build_shard(src, dest, (i, n), tok, append_eos=False, progress=False)

if __name__ == "__main__":
    src, dest, tok, tasks, workers = sys.argv[1:6]
    n = int(tasks)
    def build():
        if int(workers) == 1:  # in this process, as datatrove's executor runs one worker
            for i in range(n):
                shard((src, dest, i, n, tok))
            return
        spawn = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(int(workers), mp_context=spawn) as pool:
            list(pool.map(shard, [(src, dest, i, n, tok) for i in range(n)]))
    build_wall, build_cpu = timed(build)
    merge_wall, merge_cpu, imported = timed_imports(lambda: TokenCorpus.merge(dest))
    print(json.dumps(dict(build_wall=build_wall, build_cpu=build_cpu, merge_wall=merge_wall,
                          merge_cpu=merge_cpu, merge_imported=imported)))
"""
)

DATATROVE = (
    TIMED
    + """
from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.readers import JsonlReader
from datatrove.pipeline.tokens import DocumentTokenizer, DocumentTokenizerMerger

if __name__ == "__main__":
    src, dest, tok, tasks, workers = sys.argv[1:6]
    def build():
        steps = [JsonlReader(src, glob_pattern="*.jsonl"),
                 DocumentTokenizer(dest + "/tokenized", tok, eos_token=None,
                                   shuffle_documents=False)]
        LocalPipelineExecutor(steps, tasks=int(tasks), workers=int(workers),
                              logging_dir=dest + "/logs-build", start_method="spawn").run()
    def merge():
        steps = [DocumentTokenizerMerger(dest + "/tokenized", dest + "/merged",
                                         save_filename="merged", shuffle=False, progress=False)]
        LocalPipelineExecutor(steps, tasks=1, workers=1, logging_dir=dest + "/logs-merge").run()
    build_wall, build_cpu = timed(build)
    merge_wall, merge_cpu, imported = timed_imports(merge)
    print(json.dumps(dict(build_wall=build_wall, build_cpu=build_cpu, merge_wall=merge_wall,
                          merge_cpu=merge_cpu, merge_imported=imported)))
"""
)


def texts_folder(work: Path, copies: int, files: int) -> tuple[Path, Path, int]:
    """The JSONL files (whole lines of the Wikipedia file, ``copies`` times over, ids kept
    distinct), the tokenizer, and the number of documents."""
    from lading.stores.tokens import save_tokenizer, train_tokenizer

    root = data_dir()
    if root is None or not (root / WIKI).is_file():
        raise SystemExit(
            f"{WIKI} is not under ../shared/data: set LADING_DATA to the folder that holds it"
        )
    lines = (root / WIKI).read_text(encoding="utf-8").splitlines()
    records = []
    for c in range(copies):
        for line in lines:
            record = json.loads(line)
            records.append(json.dumps({"id": f"{c}-{record['id']}", "text": record["text"]}))
    src = work / "src"
    src.mkdir()
    for f in range(files):
        part = records[f * len(records) // files : (f + 1) * len(records) // files]
        (src / f"part-{f:03d}.jsonl").write_text("\n".join(part) + "\n", encoding="utf-8")
    tok = work / "bpe8000.json"
    save_tokenizer(train_tokenizer((json.loads(x)["text"] for x in lines[:300]), "bpe", 8000), tok)
    return src, tok, len(records)


def leg(
    python: str,
    code: Path,
    src: Path,
    dest: Path,
    tok: Path,
    tasks: int,
    workers: int,
    env: dict[str, str],
) -> dict[str, Any]:
    """One system's build and merge in a fresh interpreter: its timed windows, and the whole
    process's wall and CPU (startup and imports included)."""
    load = os.getloadavg()[0]
    argv = [python, str(code), str(src), str(dest), str(tok), str(tasks), str(workers)]
    before = os.times()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=code.parent)
    after = os.times()
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    out["process_wall"] = after.elapsed - before.elapsed
    out["process_cpu"] = (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )
    out["load"] = load
    return out


def merged_tokens(system: str, dest: Path) -> np.ndarray:
    if system == "lading":
        from lading.lm import TokenCorpus

        return np.asarray(TokenCorpus.open(dest).tokens)
    (ds,) = sorted((dest / "merged").glob("*_merged.ds"))
    return np.fromfile(ds, dtype="<u2")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--copies", type=int, default=1, help="the Wikipedia file, this many times")
    parser.add_argument("--files", type=int, default=8, help="input files = tasks = shards")
    parser.add_argument("--workers", default="1,2", help="processes at a time, each a leg")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--datatrove-python",
        default=os.environ.get("DATATROVE_PYTHON", sys.executable),
        help="an interpreter that imports datatrove",
    )
    add_write_flag(parser)
    args = parser.parse_args()
    probe = subprocess.run(
        [args.datatrove_python, "-c", "import datatrove, orjson"], capture_output=True, text=True
    )
    if probe.returncode != 0:
        raise SystemExit(
            f"{args.datatrove_python} cannot import datatrove (and orjson): install them beside "
            "lading (python -m venv dt && dt/bin/pip install datatrove orjson) and pass "
            "--datatrove-python dt/bin/python"
        )
    version = subprocess.run(
        [
            args.datatrove_python,
            "-c",
            "import importlib.metadata as m; "
            "print(m.version('datatrove'), m.version('tokenizers'))",
        ],
        capture_output=True,
        text=True,
    ).stdout.split()
    import tokenizers

    workers = [int(w) for w in args.workers.split(",")]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-dt-") as tmp:
        work = Path(tmp)
        src, tok, docs = texts_folder(work, args.copies, args.files)
        code = {"lading": work / "run_lading.py", "datatrove": work / "run_datatrove.py"}
        code["lading"].write_text(textwrap.dedent(LADING))
        code["datatrove"].write_text(textwrap.dedent(DATATROVE))
        python = {"lading": sys.executable, "datatrove": args.datatrove_python}
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env_lading = dict(env, PYTHONPATH=str(Path(__file__).resolve().parent.parent / "src"))
        legs = [(s, w) for w in workers for s in ("lading", "datatrove")]
        n_tokens = 0
        for r in range(args.repeats):
            turn = r % len(legs)
            for system, w in legs[turn:] + legs[:turn]:
                dest = work / f"out-{system}-{w}-{r}"
                row = leg(
                    python[system],
                    code[system],
                    src,
                    dest,
                    tok,
                    args.files,
                    w,
                    env_lading if system == "lading" else env,
                )
                tokens = merged_tokens(system, dest)
                if not n_tokens:
                    reference, n_tokens = tokens, len(tokens)
                if not np.array_equal(tokens, reference):
                    raise SystemExit(f"{system} ({w} workers) merged other tokens than leg 1")
                row.update(system=system, workers=w, repeat=r)
                rows.append(row)
                imported = ", ".join(row["merge_imported"][:4]) or "nothing"
                print(
                    f"repeat {r} {system:9s} x{w}: build {row['build_wall']:.2f} s wall "
                    f"{1e9 * row['build_cpu'] / n_tokens:.0f} ns CPU/token, merge "
                    f"{row['merge_wall']:.3f} s (imported {imported}), "
                    f"load {row['load']:.1f}",
                    flush=True,
                )
                import shutil

                shutil.rmtree(dest)
    meta = dict(
        docs=docs,
        tokens=n_tokens,
        files=args.files,
        copies=args.copies,
        datatrove=version,
        tokenizers=tokenizers.__version__,
    )
    body = render(rows, meta, workers)
    print(body)
    command = "python benchmarks/bench_tokenize_datatrove.py " + " ".join(sys.argv[1:])
    title = "Tokenizing in shards: lading and datatrove, side by side (issue 49)"
    write_section(HERE / "RESULTS.md", title, body, command, write=args.write)


def _spread(values: list[float], fmt: str) -> str:
    return (
        f"{fmt.format(statistics.median(values))} "
        f"({fmt.format(min(values))}-{fmt.format(max(values))})"
    )


def render(rows: list[dict[str, Any]], meta: dict[str, Any], workers: list[int]) -> str:
    tokens = meta["tokens"]
    loads = [r["load"] for r in rows]
    lines = [
        f"{meta['docs']:,} Wikipedia articles ({WIKI}, {meta['copies']} copy/copies), "
        f"{tokens:,} tokens, in {meta['files']} JSONL files = tasks = shards; a byte-level BPE "
        f"of 8,000 entries (tokenizers {meta['tokenizers']} in both; datatrove "
        f"{meta['datatrove'][0] if meta['datatrove'] else '?'}); {os.cpu_count()} cores "
        f"(shared), load (1 min) {min(loads):.1f}-{max(loads):.1f}; "
        f"{len({r['repeat'] for r in rows})} repeats, legs rotated; median (min-max). The two "
        "merged corpora are the same tokens, bit for bit (checked every leg).",
        "",
        "| system | workers | build wall s | build CPU ns/token | merge wall s | merge CPU s | "
        "whole process CPU ns/token (startup included) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for w in workers:
        for system in ("lading", "datatrove"):
            mine = [r for r in rows if r["system"] == system and r["workers"] == w]
            lines.append(
                f"| {system} | {w} | {_spread([r['build_wall'] for r in mine], '{:.2f}')} | "
                f"{_spread([1e9 * r['build_cpu'] / tokens for r in mine], '{:.0f}')} | "
                f"{_spread([r['merge_wall'] for r in mine], '{:.3f}')} | "
                f"{_spread([r['merge_cpu'] for r in mine], '{:.3f}')} | "
                f"{_spread([1e9 * r['process_cpu'] / tokens for r in mine], '{:.0f}')} |"
            )
    lines += ["", "Paired in each repeat, lading / datatrove:", ""]
    for w in workers:
        pairs = [
            (a, b)
            for a in rows
            for b in rows
            if a["system"] == "lading"
            and b["system"] == "datatrove"
            and a["workers"] == b["workers"] == w
            and a["repeat"] == b["repeat"]
        ]
        cpu = [
            (a["build_cpu"] + a["merge_cpu"]) / (b["build_cpu"] + b["merge_cpu"]) for a, b in pairs
        ]
        merge = [a["merge_wall"] / b["merge_wall"] for a, b in pairs]
        build = [a["build_wall"] / b["build_wall"] for a, b in pairs]
        lines.append(
            f"- {w} worker(s): CPU a token (build + merge) **{_spread(cpu, '{:.2f}')}**, "
            f"merge wall **{_spread(merge, '{:.3f}')}**, build wall {_spread(build, '{:.2f}')}"
        )
    if len(workers) > 1:
        lines += ["", f"Scaling, build wall at {workers[0]} / at {workers[-1]} workers:", ""]
        for system in ("lading", "datatrove"):
            ratio = [
                a["build_wall"] / b["build_wall"]
                for a in rows
                for b in rows
                if a["system"] == b["system"] == system
                and a["repeat"] == b["repeat"]
                and a["workers"] == workers[0]
                and b["workers"] == workers[-1]
            ]
            lines.append(f"- {system}: {_spread(ratio, '{:.2f}')}")
    imported = {
        system: max(len(r.get("merge_imported", [])) for r in rows if r["system"] == system)
        for system in ("lading", "datatrove")
    }
    lines += [
        "",
        "Modules imported inside the merge's timed window (the most of any leg): "
        + ", ".join(f"{system} {n}" for system, n in imported.items())
        + " (each leg imports its merge code before the window).",
    ]
    best = min(1e9 * r["build_cpu"] / tokens for r in rows if r["system"] == "lading")
    lines += [
        "",
        f"Estimated, not measured: at lading's best CPU a token here ({best:.0f} ns), a "
        f"64-core node tokenizing with 64 workers would make about {64e9 / best / 1e6:.0f}M "
        "tokens a second if the build stays CPU-bound (the texts read and the shards written "
        "at that rate: ~4 bytes of text and 2 of tokens a token), and the merge, serial, "
        "takes what the table's merge takes per document.",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
