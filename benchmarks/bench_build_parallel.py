"""Building a store in parallel: 1 worker against 2 (``--shard i/2``, then a merge), side by side.

    python benchmarks/bench_build_parallel.py [--n 1000000] [--repeats 3] [--no-tokens] [--write]
    python benchmarks/bench_build_parallel.py --n 200000 --id-kinds [--write]

Corpus: ``n`` MS MARCO-shaped passages (:func:`common.make_corpora`: real passages of the TREC
DL 19/20 pool resampled, or synthetic ones), integer ids. Two workloads: the plain store and
the store with token ids (a 30,522-entry WordPiece vocabulary, as BERT's). Each repeat times,
in alternating order, one worker (``lading build SRC DEST``) and two (``lading build SRC DEST
--shard 0/2`` and ``--shard 1/2`` started together, then ``lading merge DEST``), every step a
fresh process as a user runs it, wall time from the first start to the last exit. The two
stores are then compared (ids, texts, token ids: they must be the same), and ``get_many`` of
64 random ids is timed on both in one process, alternating (the cost of a second shard on the
lookup path; and tokens_many where the store has tokens). ``--id-kinds`` times only the
lookups, for ids dense, sparse, strings and ``D<number>``. The 1-minute load average is
recorded around each run: this machine's 2 cores are shared, and a busy neighbour takes time
from the 2-worker run first.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lading
from common import HERE, add_write_flag, bert_vocabulary, make_corpora, write_section

LADING = [sys.executable, "-m", "lading"]


def run(commands: list[list[str]]) -> None:
    """Start ``commands`` together and wait for all; fail on any non-zero exit."""
    procs = [subprocess.Popen(c, stdout=subprocess.DEVNULL) for c in commands]
    for proc, command in zip(procs, commands):
        if proc.wait() != 0:
            raise RuntimeError(f"{' '.join(command)} exited {proc.returncode}")


def timed_build(src: Path, dest: Path, workers: int, extra: list[str]) -> dict[str, float]:
    """Wall seconds of a build of ``dest`` by ``workers`` processes (and a merge for 2)."""
    shutil.rmtree(dest, ignore_errors=True)
    load = os.getloadavg()[0]
    cpu = _children_cpu()
    started = time.perf_counter()
    if workers == 1:
        run([[*LADING, "build", str(src), str(dest), "--quiet", *extra]])
    else:
        shards = [f"{i}/{workers}" for i in range(workers)]
        run(
            [
                [*LADING, "build", str(src), str(dest), "--quiet", "--shard", s, *extra]
                for s in shards
            ]
        )
        run([[*LADING, "merge", str(dest)]])
    seconds = time.perf_counter() - started
    cores = (_children_cpu() - cpu) / seconds  # CPU seconds of the build's processes per second
    return {"seconds": seconds, "load": (load + os.getloadavg()[0]) / 2, "cores": cores}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def digest(store: lading.PackedStore) -> str:
    """A hash of every id, text and token id in row order: equal stores, equal digests."""
    h = hashlib.sha256()
    for lo in range(0, len(store), 50_000):
        hi = min(lo + 50_000, len(store))
        h.update("\n".join(store.ids_at(range(lo, hi))).encode())  # type: ignore[arg-type]
        h.update("\n".join(store.texts_range(lo, hi)).encode())
    if store.has_tokens:
        tokens, offsets = store.token_arrays()
        h.update(tokens.tobytes())
        h.update(offsets.tobytes())
    return h.hexdigest()


def lookups(
    one: lading.PackedStore, two: lading.PackedStore, seconds: float, call: str = "get_many"
) -> dict[str, float]:
    """docs/s of ``call`` (``get_many`` or ``tokens_many``, 64 random ids) on each store,
    windows of 200 batches alternating which store goes first; process CPU time (less noisy
    than wall time on a shared machine)."""
    rng = random.Random(0)
    ids = one.ids()
    batches = [rng.sample(ids, 64) for _ in range(2000)]
    spent = {"one": 0.0, "two": 0.0}
    done = 0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        order = (("one", one), ("two", two)) if done % 2 == 0 else (("two", two), ("one", one))
        for name, store in order:
            read = getattr(store, call)
            started = time.process_time()
            for batch in batches[:200]:
                read(batch)
            spent[name] += time.process_time() - started
        done += 1
        batches = batches[200:] + batches[:200]
    return {name: done * 200 * 64 / s for name, s in spent.items()}


# how row i's id is spelled (issue 40: a merged store looks up as one build, by any id kind)
ID_KINDS: dict[str, Callable[[int], str]] = {
    "dense int": str,
    "sparse int (7i+3)": lambda i: str(7 * i + 3),  # still the dense table: 8 slots an id
    "very sparse int (1,000,003i+7)": lambda i: str(1_000_003 * i + 7),  # sorted-int index
    "str (msmarco_passage_i)": lambda i: f"msmarco_passage_{i}",
    "MS MARCO docs (D<i>)": lambda i: f"D{i}",
}


def id_kinds(src: Path, work: Path, tok: Path | None, seconds: float) -> str:
    """Lookups 2/1 for each id kind: ``src``'s texts under ids of that kind, built once by one
    process and once by 2 shards + merge (CLI, as a user runs it), then get_many (and
    tokens_many with ``tok``) timed on both in this process, alternating."""
    texts = [line.split("\t", 1)[1] for line in src.read_text(encoding="utf-8").splitlines()]
    extra = ["--tokenizer", str(tok)] if tok is not None else []
    lines = [
        "| ids | index | get_many 1 docs/s | get_many 2/1 | tokens_many 2/1 | load |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for name, spell in ID_KINDS.items():
        kind_src = work / "kind.tsv"
        kind_src.write_text("".join(f"{spell(i)}\t{t}\n" for i, t in enumerate(texts)))
        timed_build(kind_src, work / "k1", 1, extra)
        timed_build(kind_src, work / "k2", 2, extra)
        one, two = lading.PackedStore(work / "k1"), lading.PackedStore(work / "k2")
        assert digest(one) == digest(two) and len(two.meta["shards"]) == 2
        load = os.getloadavg()[0]
        text = lookups(one, two, seconds)
        tokens = lookups(one, two, seconds, "tokens_many") if one.has_tokens else None
        load = (load + os.getloadavg()[0]) / 2
        shown = f"{tokens['two'] / tokens['one']:.2f}" if tokens else "-"
        lines.append(
            f"| {name} | {one.meta['index']['kind']} | {text['one'] / 1e6:.2f}M "
            f"| **{text['two'] / text['one']:.2f}** | **{shown}** | {load:.1f} |"
        )
        print(lines[-1], flush=True)
    return "\n".join(lines)


def measure(src: Path, work: Path, repeats: int, extra: list[str]) -> dict[str, Any]:
    runs: dict[int, list[dict[str, float]]] = {1: [], 2: []}
    for r in range(repeats):
        for workers in (1, 2) if r % 2 == 0 else (2, 1):  # alternate who goes first
            runs[workers].append(timed_build(src, work / f"w{workers}", workers, extra))
            print(f"  repeat {r}: {workers} worker(s) {runs[workers][-1]['seconds']:.1f} s")
    one, two = lading.PackedStore(work / "w1"), lading.PackedStore(work / "w2")
    same = digest(one) == digest(two) and len(two.meta["shards"]) == 2
    found = {"runs": runs, "same": same, "lookups": lookups(one, two, 6.0)}
    if one.has_tokens:
        found["token_lookups"] = lookups(one, two, 6.0, "tokens_many")
    return found


def row(name: str, result: dict[str, Any]) -> str:
    t1 = [x["seconds"] for x in result["runs"][1]]
    t2 = [x["seconds"] for x in result["runs"][2]]
    loads = [x["load"] for w in (1, 2) for x in result["runs"][w]]
    ratios = [a / b for a, b in zip(t1, t2)]
    look = result["lookups"]
    tok = result.get("token_lookups")
    looked = f"{look['two'] / look['one']:.2f}"
    if tok:
        looked += f" / {tok['two'] / tok['one']:.2f}"
    cores = [statistics.median(x["cores"] for x in result["runs"][w]) for w in (1, 2)]
    return (
        f"| {name} | {statistics.median(t1):.1f} ({min(t1):.1f}-{max(t1):.1f}) "
        f"| {statistics.median(t2):.1f} ({min(t2):.1f}-{max(t2):.1f}) "
        f"| **{statistics.median(ratios):.2f}** ({min(ratios):.2f}-{max(ratios):.2f}) "
        f"| {cores[0]:.2f} / {cores[1]:.2f} "
        f"| {'yes' if result['same'] else 'NO'} | {looked} "
        f"| {min(loads):.1f}-{max(loads):.1f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="bench-out/build-parallel")
    parser.add_argument("--no-tokens", action="store_true", help="the plain store only")
    parser.add_argument(
        "--id-kinds",
        action="store_true",
        help="only the lookups of a 2-shard store against one build, for each kind of id",
    )
    add_write_flag(parser)
    args = parser.parse_args()
    work = Path(args.out)
    work.mkdir(parents=True, exist_ok=True)
    src, _, origin = make_corpora(args.n, work)
    tok = work / "wordpiece-30522.json"
    if not args.no_tokens and not tok.exists():
        bert_vocabulary(src).save(str(tok))
    if args.id_kinds:
        kinds = id_kinds(src, work, None if args.no_tokens else tok, 3.0)
        body = (
            f"Corpus: {args.n:,} passages ({origin}), the same texts under four kinds of id, "
            "each built by one process and by 2 shards + merge (tokens: WordPiece 30,522). "
            "get_many / tokens_many of 64 random ids on both stores in one process, windows of "
            "200 batches alternating, 3 s of each per call; docs/s from process CPU time; "
            "load: the 1-minute load average around the lookups.\n\n" + kinds
        )
        print(body)
        command = f"python benchmarks/bench_build_parallel.py --n {args.n} --id-kinds"
        title = "Lookups of a store built in shards, by kind of id"
        write_section(HERE / "RESULTS.md", title, body, command, write=args.write)
        return
    results = {f"plain, {args.n:,}": measure(src, work, args.repeats, [])}
    if not args.no_tokens:
        results[f"tokens (WordPiece 30,522), {args.n:,}"] = measure(
            src, work, args.repeats, ["--tokenizer", str(tok)]
        )
    lines = [
        f"Corpus: {args.n:,} passages, {src.stat().st_size / 2**20:,.0f} MiB ({origin}); "
        f"integer ids. Machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}. "
        f"{args.repeats} repeats, 1 and 2 workers alternating; seconds are wall time from the "
        "first process's start to the last one's exit (2 workers: both shards, then the "
        "merge), median (min-max). `same` compares every id, text and token id of the two "
        "stores; `lookups 2/1` is get_many(64 random ids) on the 2-shard store over the "
        "1-shard one, in one process (docs/s from process CPU time; with tokens: get_many / "
        "tokens_many); `cores used` is the CPU seconds (user + system) of the "
        "build's processes per wall second, 1 worker / 2 workers (medians): what one worker "
        "already takes of the 2 cores bounds the speed-up.",
        "",
        "| store | 1 worker s | 2 workers s | speed-up | cores used | same | lookups 2/1 | load |",
        "|---|---:|---:|---:|---:|:---:|---:|---:|",
        *(row(name, r) for name, r in results.items()),
    ]
    body = "\n".join(lines)
    print(body)
    command = f"python benchmarks/bench_build_parallel.py --n {args.n} --repeats {args.repeats}"
    write_section(HERE / "RESULTS.md", "Building in parallel", body, command, write=args.write)


if __name__ == "__main__":
    main()
