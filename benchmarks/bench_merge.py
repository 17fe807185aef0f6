"""Merges that copy no payload: bytes written, seconds and peak RSS of a merge, by documents.

    python benchmarks/bench_merge.py [--docs 1000000 10000000] [--shards 4] [--repeats 3] [--write]

Two kinds, ``--shards`` shards each, ``docs`` small documents:

- token corpora: shard files written directly (random uint16 ids, 8-40 tokens a document, mean
  24; each shard exactly what ``lading lm build --shard`` writes: tokens.bin, tokens.off,
  tokenizer.json, shard.json under one build-<id>/), then ``lading.lm.merge.merge_corpus`` in a
  fresh process;
- stores: ``lading build SRC DEST --shard i/N`` of a TSV of short passages (integer ids, 6-20
  words), then ``lading merge DEST`` in a fresh process.

For each: the bytes the merge wrote (every file of the new snapshot folder, the manifest
included) over the shards' bytes (every file under build-<id>/), the merge's wall seconds and
the merge process's peak RSS (``VmHWM`` of the child; an import-only child's is given as the
floor), median (min-max) of ``--repeats`` merges, each into a fresh copy of the manifest state
(the previous snapshot removed); the seconds are the merge's, after the child's imports
(the import-only child's are given apart). With ``--lookups``, each store is also built by one
process and ``get_many`` of 64 random ids (20,000 batches) compared with the merged store's at
that size, alternating, ``--lookup-repeats`` rounds after one uncounted round each (under
string ids the merged index reads each candidate's key from its shard's ids.keys; see
:mod:`lading.stores.hashids`). Then reads side by side in one process, alternating,
``--repeats`` rounds: a token corpus of ``--read-docs`` documents built by one process and the
same built in ``--shards`` shards and merged, tokens/s of a ``LanguageModelLoader`` over
:data:`EPOCHS` epochs of each of ``Windows(512)`` and ``Packed(512)``, the two corpora's epochs in
turn (:func:`read_round`), by the wall clock and by the reading thread's CPU time; a store of
``--read-docs`` passages built by one process and in shards, ``get_many`` of 64 random ids. The
1-minute load is recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from common import HERE, add_write_flag, make_corpora, write_section

WORDS = [f"w{i}" for i in range(2000)]


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def tokenizer(path: Path) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"<|endoftext|>": 0, "[UNK]": 1, **{w: i + 2 for i, w in enumerate(WORDS)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(path))
    return path


def corpus_shards(dest: Path, docs: int, shards: int, tok: Path) -> None:
    """``shards`` finished shards of a token corpus of ``docs`` documents, written directly."""
    from lading.disk import write_file
    from lading.stores.building.shardset import SHARD_FILE, claim_shard
    from lading.stores.tokens import describe_tokenizer, load_tokenizer

    rng = np.random.default_rng(0)
    raw = tok.read_bytes()
    sha = describe_tokenizer(load_tokenizer(tok))["sha256"]
    src = dest.parent / "source.txt"
    src.write_text("stand-in\n")
    options = {"kind": "tokens", "append_eos": True, "eos_token": None, "split": "blank"}
    options.update(on_error="raise", format="files")
    for i in range(shards):
        n = docs * (i + 1) // shards - docs * i // shards
        _, where, stats = claim_shard(dest, [src], options, (i, shards), None, "token corpus")
        where.mkdir()
        lengths = rng.integers(8, 41, n).astype(np.uint64)
        offsets = np.zeros(n + 1, dtype=np.uint64)
        np.cumsum(lengths, out=offsets[1:])
        tokens = rng.integers(2, len(WORDS) + 2, int(offsets[-1]), dtype=np.uint16)
        files = {
            "tokens.bin": write_file(where / "tokens.bin", tokens),
            "tokens.off": write_file(where / "tokens.off", offsets),
            "tokenizer.json": write_file(where / "tokenizer.json", raw),
        }
        record = {
            "documents": n, "tokens": int(offsets[-1]), "dtype": "<u2",
            "vocab_size": len(WORDS) + 2, "eos_id": 0, "tokenizer": sha, "options": options,
            "input_stats": stats, "fingerprints": [], "source": [], "source_path": None,
            "source_identity": {}, "skipped": 0, "seconds": 0.0, "files": files,
        }  # fmt: skip
        write_file(where / SHARD_FILE, json.dumps(record).encode())
        del tokens, offsets, lengths


STORES = {
    "store": "short passages, integer ids",
    "store-marco": "MS MARCO passages, integer ids",
    "store-marco-str": "MS MARCO passages, msmarco_passage_<i> ids",
    "store-shuffled": "short passages, integer ids 0..n-1 in no order",
    "store-marco-shuffled": "MS MARCO passages, integer ids 0..n-1 in no order",
}


def store_shards(dest: Path, docs: int, shards: int, kind: str = "store") -> Path:
    """``lading build --shard i/N`` of ``docs`` passages of ``kind`` (:data:`STORES`): short
    synthetic ones, or real MS MARCO passages resampled (:func:`common.make_corpora`; synthetic
    passages where the data is absent) under integer or string ids. Returns the source."""
    if kind in ("store", "store-shuffled"):
        src = short_passages(dest.parent / "passages.tsv", docs)
    else:
        int_tsv, str_tsv, _ = make_corpora(docs, dest.parent)
        src = str_tsv if kind.endswith("-str") else int_tsv
    if kind.endswith("-shuffled"):
        src = shuffled_ids(src, dest.parent / f"{src.stem}-shuffled.tsv")
    lading = [sys.executable, "-m", "lading", "build", str(src), str(dest), "--quiet", "--shard"]
    procs = [subprocess.Popen([*lading, f"{i}/{shards}"]) for i in range(shards)]
    assert all(p.wait() == 0 for p in procs)
    return Path(src)


def lookup_ratios(
    src: Path, dest: Path, repeats: int
) -> tuple[list[float], list[float], list[float]]:
    """get_many(64) docs/s of ``dest``'s shards merged, over a one-process build of ``src``,
    in this process, alternating, ``repeats`` rounds; (ratios by the wall clock, the same by
    this thread's CPU time, the one build's docs/s). The CPU time leaves out what other
    processes took of the 2 cores (the wall ratio spread 0.87-1.05 where its median was 1.00)."""
    import lading

    one = lading.build_store(src, dest.parent / "one", progress=False)
    merged = lading.merge_store(dest)
    assert merged.ids()[:1000] == one.ids()[:1000]
    rng = np.random.default_rng(2)
    ids = one.ids()
    batches = [[ids[k] for k in rng.integers(0, len(ids), 64)] for _ in range(20_000)]
    for store in (one, merged):  # a round each first, not counted: the maps' first touches
        for batch in batches:
            store.get_many(batch)
    ratios: list[float] = []
    cpu_ratios: list[float] = []
    base: list[float] = []
    for r in range(repeats):
        # slices of 1,000 batches, the two stores in turn: drift on a shared machine falls on
        # both alike (whole rounds in turn gave spreads of 0.73-1.08 where the medians agreed)
        spent = {id(one): 0.0, id(merged): 0.0}
        ticks = {id(one): 0.0, id(merged): 0.0}
        for lo in range(0, len(batches), 1000):
            for store in (one, merged) if (r + lo // 1000) % 2 == 0 else (merged, one):
                started, cpu = time.perf_counter(), time.thread_time()
                for batch in batches[lo : lo + 1000]:
                    store.get_many(batch)
                spent[id(store)] += time.perf_counter() - started
                ticks[id(store)] += time.thread_time() - cpu
        ratios.append(spent[id(one)] / spent[id(merged)])
        cpu_ratios.append(ticks[id(one)] / ticks[id(merged)])
        base.append(64 * len(batches) / spent[id(one)])
    shutil.rmtree(dest.parent / "one")
    return ratios, cpu_ratios, base


def short_passages(src: Path, docs: int) -> Path:
    """A TSV of ``docs`` passages of 6-20 words of :data:`WORDS`, ids ``0..docs-1``."""
    rng = np.random.default_rng(1)
    with open(src, "w") as f:
        for lo in range(0, docs, 100_000):
            hi = min(docs, lo + 100_000)
            counts = rng.integers(6, 21, hi - lo)
            picks = rng.integers(0, len(WORDS), int(counts.sum()))
            at = 0
            lines = []
            for i, c in zip(range(lo, hi), counts.tolist()):
                lines.append(f"{i}\t{' '.join(WORDS[k] for k in picks[at : at + c])}\n")
                at += c
            f.write("".join(lines))
    return src


def shuffled_ids(src: Path, out: Path) -> Path:
    """``src`` (a TSV whose ids are ``0..n-1``) with its ids permuted (seed 3): every id once,
    in no order, so a store of it keeps the ``dense`` index (4 B a document), which a merge
    writes; the texts stay in their rows."""
    lines = src.read_text().splitlines(keepends=True)
    ids = np.random.default_rng(3).permutation(len(lines))
    with open(out, "w") as f:
        f.writelines(f"{i}\t{line.split(chr(9), 1)[1]}" for i, line in zip(ids.tolist(), lines))
    return out


STORE_MERGE = (
    "from lading.stores.building.parallel import merge_store as m",
    "m(Path(sys.argv[1]))",
)
MERGE = {  # kind -> (the child's imports, the merge it times)
    "corpus": ("from lading.lm.merge import merge_corpus as m", "m(Path(sys.argv[1]))"),
    "store": STORE_MERGE,
    "store-marco": STORE_MERGE,
    "store-marco-str": STORE_MERGE,
    "store-shuffled": STORE_MERGE,
    "store-marco-shuffled": STORE_MERGE,
    "floor": ("import lading.lm.merge, lading.stores.building.parallel", "pass"),
}


class Merged(NamedTuple):
    """One merge in a fresh process: its seconds (the merge alone), the child's start-up before
    it (its imports: numpy, lading; not the interpreter's own start), its peak RSS and the bytes
    it wrote."""

    seconds: float
    startup_s: float
    rss_mib: float
    written: int


def merge_once(kind: str, dest: Path) -> Merged:
    """One merge of ``dest`` in a fresh process; the snapshot it made is removed afterwards (the
    next merge starts from the shards). The clock starts after the child's imports: a start-up
    timed with the merge was scaled with it by "s per 10M" (a 1M corpus row read 6.2 s per 10M
    where the 10M row measured 1.0 s)."""
    imports, call = MERGE[kind]
    # VmHWM, not ru_maxrss: Linux carries a parent's max RSS over fork and exec
    code = (
        f"import sys, time; t0 = time.perf_counter(); {imports}; from pathlib import Path; "
        f"t = time.perf_counter(); {call}; done = time.perf_counter(); "
        "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1]; "
        "print(done - t, t - t0, hwm)"
    )
    env = {**os.environ, "PYTHONPATH": str(HERE.parent / "src")}
    out = subprocess.run(
        [sys.executable, "-c", code, str(dest)], capture_output=True, text=True, env=env
    )
    if out.returncode:
        raise RuntimeError(out.stderr)
    seconds, startup, rss = out.stdout.split()
    written = 0
    if kind != "floor":
        meta = json.loads((dest / "meta.json").read_text())
        snap = dest / meta["snapshot"]
        written = du(snap) + (dest / "meta.json").stat().st_size
        shutil.rmtree(snap)
        (dest / "meta.json").unlink()
    return Merged(float(seconds), float(startup), int(rss) / 1024, written)


def spread(values: list[float], fmt: str = "{:.2f}") -> str:
    mid, lo, hi = (fmt.format(f(values)) for f in (statistics.median, min, max))
    return f"{mid} ({lo}-{hi})"


def merge_rows(args: argparse.Namespace, work: Path) -> list[str]:
    rows = []
    tok = tokenizer(work / "t.json")
    for docs in args.docs:
        for kind in ("corpus", *args.stores):
            dest = work / f"{kind}-{docs}"
            dest.mkdir()
            started = time.perf_counter()
            src = None
            if kind == "corpus":
                corpus_shards(dest, docs, args.shards, tok)
            else:
                src = store_shards(dest, docs, args.shards, kind)
            built = time.perf_counter() - started
            shard_bytes = du(next(dest.glob("build-*")))
            load = os.getloadavg()[0]
            runs = [merge_once(kind, dest) for _ in range(args.repeats)]
            seconds, rss = [r.seconds for r in runs], [r.rss_mib for r in runs]
            written = [r.written for r in runs]
            per10 = 1e7 / docs
            lookups = "-"
            if src is not None and args.lookups:
                ratios, cpu_ratios, base = lookup_ratios(src, dest, args.lookup_repeats)
                lookups = (
                    f"{spread(ratios)} (thread CPU {spread(cpu_ratios)}) of "
                    f"{statistics.median(base):,.0f}"
                )
            rows.append(
                f"| {kind} | {docs:,} | {args.shards} | {shard_bytes / 2**20:,.0f} | "
                f"{written[0] / 2**20:,.1f} | **{100 * written[0] / shard_bytes:.2f} %** | "
                f"{spread(seconds)} | {statistics.median(seconds) * per10:.1f} | "
                f"{spread(rss, '{:.0f}')} | {lookups} | {load:.1f}-{os.getloadavg()[0]:.1f} |"
            )
            print(rows[-1], f"(shards made in {built:.0f} s)", flush=True)
            shutil.rmtree(dest)
    floor = [merge_once("floor", work) for _ in range(args.repeats)]
    rows.append(
        "\nImport-only child: the RSS floor of every row, "
        f"{spread([r.rss_mib for r in floor], '{:.0f}')} MiB; its imports, "
        f"{spread([r.startup_s for r in floor])} s, are outside every row's merge seconds."
    )
    return rows


EPOCHS = 8  # epochs of each corpus a read round times


class ReadRound(NamedTuple):
    """One round of reads of the two corpora: merged / one-process tokens/s by the wall clock
    and by this thread's CPU time (the loader reads in this thread: num_workers=0, no
    read-ahead), and the one-process build's tokens/s."""

    ratio: float
    cpu_ratio: float
    one: float


def read_round(one: Any, merged: Any, sequence: Any, r: int, epochs: int = EPOCHS) -> ReadRound:
    """Round ``r``: a loader of each corpus (made before the clocks start), then ``epochs``
    epochs of each, the two corpora's epochs in turn, which goes first alternating with the
    epoch and the round. Epoch by epoch, drift on a shared machine falls on both alike (whole
    measurements of 4 epochs in turn, ~0.2 s each, spread 0.75-1.44 at a load of 2.4 where
    the medians agreed); epoch 0 includes a packing's pack(), for both alike."""
    from lading.lm import LanguageModelLoader
    from lading.world import World

    loaders = [LanguageModelLoader(c, 8, sequence, seed=0, world=World()) for c in (one, merged)]
    wall, cpu, tokens = [0.0, 0.0], [0.0, 0.0], [0, 0]
    for epoch in range(epochs):
        for i in (0, 1) if (r + epoch) % 2 == 0 else (1, 0):
            started, ticks = time.perf_counter(), time.thread_time()
            loaders[i].set_epoch(epoch)
            for batch in loaders[i]:
                tokens[i] += int(np.asarray(batch[0]).size)
            wall[i] += time.perf_counter() - started
            cpu[i] += time.thread_time() - ticks
    rate = [t / w for t, w in zip(tokens, wall)]
    per_cpu = [t / c for t, c in zip(tokens, cpu)]
    return ReadRound(rate[1] / rate[0], per_cpu[1] / per_cpu[0], rate[0])


def lookups_side_by_side(
    one: Any, merged: Any, r: int, rounds: int = 3000, slice_: int = 250
) -> tuple[float, float, float]:
    """get_many(64) of the same random ids on both stores, in slices of ``slice_`` batches
    taken in turn (the first store alternating with ``r``): (merged / one by the wall clock,
    the same by this thread's CPU time, the one build's documents a second). Whole rounds of
    ~50 ms in turn read 0.88 (0.87-0.89) right after a burst of 200 build processes, where
    the same rounds idle read 0.99: slices put drift on both stores alike."""
    rng = np.random.default_rng(2 + r)
    ids = one.ids()
    batches = [[ids[k] for k in rng.integers(0, len(ids), 64)] for _ in range(rounds)]
    spent = {id(one): 0.0, id(merged): 0.0}
    ticks = {id(one): 0.0, id(merged): 0.0}
    for lo in range(0, rounds, slice_):
        for store in (one, merged) if (r + lo // slice_) % 2 == 0 else (merged, one):
            started, cpu = time.perf_counter(), time.thread_time()
            for batch in batches[lo : lo + slice_]:
                store.get_many(batch)
            spent[id(store)] += time.perf_counter() - started
            ticks[id(store)] += time.thread_time() - cpu
    wall = spent[id(one)] / spent[id(merged)]
    return wall, ticks[id(one)] / ticks[id(merged)], 64 * rounds / spent[id(one)]


def read_rows(args: argparse.Namespace, work: Path) -> list[str]:
    import lading
    from lading.lm import Packed, TokenCorpus, Windows

    rng = np.random.default_rng(3)
    work.mkdir(parents=True, exist_ok=True)
    src = work / "read.jsonl"
    with open(src, "w") as f:
        for i in range(args.read_docs):
            text = " ".join(rng.choice(WORDS, int(rng.integers(20, 400))))
            f.write(json.dumps({"id": i, "text": text}) + "\n")
    tok = tokenizer(work / "t.json")
    one = TokenCorpus.build(src, work / "one", tok, progress=False)
    for i in range(args.shards):
        TokenCorpus.build_shard(src, work / "sharded", (i, args.shards), tok, progress=False)
    merged = TokenCorpus.merge(work / "sharded")
    assert np.array_equal(np.asarray(merged.offsets), np.asarray(one.offsets))
    store_one = lading.build_store(src, work / "s-one", progress=False)
    for i in range(args.shards):
        lading.build_shard(src, work / "s-sharded", (i, args.shards))
    store_merged = lading.merge_store(work / "s-sharded")
    cases = {"windows(512), tokens/s": Windows(512), "packed(512), tokens/s": Packed(512)}
    rows = []
    load = os.getloadavg()[0]
    for name, sequence in cases.items():
        read_round(one, merged, sequence, 0, epochs=1)  # not counted: first touches, imports
        rounds = [read_round(one, merged, sequence, r) for r in range(args.repeats)]
        rate = spread([g.one for g in rounds], "{:,.0f}")
        wall, cpu = spread([g.ratio for g in rounds]), spread([g.cpu_ratio for g in rounds])
        rows.append(f"| {name} | {rate} | **{wall}** | {cpu} |")
    lookups_side_by_side(store_one, store_merged, 0, rounds=500)  # first touches: not counted
    got = [lookups_side_by_side(store_one, store_merged, r) for r in range(args.repeats)]
    ratios, cpu_ratios, base = ([g[i] for g in got] for i in range(3))
    got_base, got_ratio = spread(base, "{:,.0f}"), spread(ratios)
    rows.append(
        f"| store get_many(64), docs/s | {got_base} | **{got_ratio}** | {spread(cpu_ratios)} |"
    )
    rows.append(f"\nLoad (1 min) {load:.1f}-{os.getloadavg()[0]:.1f}.")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--read-docs", type=int, default=20_000)
    parser.add_argument("--skip-merge", action="store_true")
    parser.add_argument(
        "--lookups",
        action="store_true",
        help="also build each store in one process and compare get_many(64) at that size",
    )
    parser.add_argument("--lookup-repeats", type=int, default=6)
    parser.add_argument(
        "--stores", nargs="+", choices=list(STORES), default=["store"],
        help="which stores to merge: " + "; ".join(f"{k}: {v}" for k, v in STORES.items()),
    )  # fmt: skip
    add_write_flag(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-merge-") as tmp:
        work = Path(tmp)
        rows = [] if args.skip_merge else merge_rows(args, work)
        reads = read_rows(args, work / "reads")
    body = (
        f"{args.shards} shards; machine: {os.cpu_count()} cores (shared), Python "
        f"{sys.version.split()[0]}; {args.repeats} merges each, median (min-max). `written` is "
        "every byte of the merge's snapshot and meta.json (token corpora: the manifest only, "
        "the shards' tokens.bin and tokens.off are read in place; stores: the id index and the "
        "manifest, every shard's columns and offsets are read in place) over every byte of the "
        "shards. Stores (no tokens): "
        + "; ".join(f"`{k}` {v}" for k, v in STORES.items() if k in args.stores)
        + ".\n\n"
        "| kind | documents | shards | shards MiB | written MiB | written / shards | merge s "
        "| s per 10M | peak RSS MiB | get_many(64) merged / one build, of docs/s | load |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
        + "\n".join(rows)
        + f"\n\nReads, {args.read_docs:,} documents (20-400 words), one-process build against "
        f"{args.shards} shards merged, in one process, {args.repeats} rounds of {EPOCHS} epochs "
        "of each corpus, their epochs in turn (after one uncounted round of one epoch); the "
        "ratio by the wall clock, and by the reading thread's CPU time:\n\n"
        "| read | one-process build | merged / one-process | merged / one-process, thread CPU |\n"
        "|---|---:|---:|---:|\n" + "\n".join(reads)
    )
    command = "python benchmarks/bench_merge.py " + " ".join(sys.argv[1:])
    title = "Merges that copy no payload (issue 49)"
    write_section(HERE / "RESULTS.md", title, body, command, write=args.write)


if __name__ == "__main__":
    main()
