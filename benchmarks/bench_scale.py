"""MS MARCO sizes on one machine: synth, build, tokenize, the dict baseline, cold/warm lookups.

Runs one corpus (``--kind`` and ``--n``) one part at a time (``--parts``), keeping what it made
under ``--work`` so a later call reuses it, and merging every figure into
``bench-out/results/scale_results.json`` (seeded from the tracked
``benchmarks/scale_results.json``; git ignores bench-out, so a run leaves the clone clean);
``--report`` prints the tables from it, and ``--write`` copies it over the tracked file and
rewrites the "Scale" section of RESULTS.md. Parts:

- ``synth``: ``lading synth`` wall time and peak RSS (skipped when the corpus exists).
- ``read``: reading the corpus once, cold: ``cat > /dev/null`` and a Python binary line loop;
  and ``cp`` of it to the work disk with ``sync``: the time to write as many bytes durably.
- ``disk``: writing 2 GiB with ``dd`` (fsync included): what a build's writes can go at.
- ``build``: ``lading build`` cold: wall time, MB/s, peak RSS, bytes written.
- ``ids``: a build of ``--n`` rows with the same ids and one-word texts: the peak RSS that the
  id count alone causes (the index is built from the ids), when the full text is too big to
  make here.
- ``tokenize``: tokenized builds of a ``--sample-mb`` sample: the tokenizers library's threads
  (RAYON_NUM_THREADS 1 and 2) and processes (a pool of 1 and 2, one thread each).
- ``dict``: the in-memory dict baseline's bytes per corpus byte, measured on the sample; the
  whole corpus at 1 and 4 ranks judged against the memory budget (MemAvailable, as
  ``lading bench`` does) and recorded as OOM without being run when over it.
- ``stores``: builds the offsets index and the ir_datasets docstore of the corpus.
- ``lookup``: docs/s at 64-id batches for packed, offsets, irds, cold (posix_fadvise DONTNEED
  on every file of the store, and the corpus for offsets) and warm (files read once first).
- ``ranks``: anonymous memory of each of 4 processes looking up in the same store.

Peak RSS of a command is ``ru_maxrss`` of that one child (``os.wait4``).

    python benchmarks/bench_scale.py --kind passages --n 8800000 --work /tmp/scale --parts all
    python benchmarks/bench_scale.py --report
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
TRACKED = HERE / "scale_results.json"  # the figures behind RESULTS.md's "Scale" (--write)
RESULTS = HERE.parent / "bench-out" / "results" / "scale_results.json"  # where runs add
PARTS = ("synth", "read", "disk", "build", "ids", "tokenize", "dict", "stores", "lookup", "ranks")
PY = sys.executable
LADING = str(Path(sys.executable).parent / "lading")
BATCH = 64
TITLE = "Scale: MS MARCO sizes on one 24 GiB machine"
_TABLES = "<!-- tables -->"  # where scale_notes.md takes the measured tables
MIB = 2**20


# --------------------------------------------------------------------------- helpers


def measured(cmd: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``cmd``; its wall time and peak RSS (ru_maxrss of that child alone)."""
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, env={**os.environ, **(env or {})}, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed with status {status}")
    return {
        "seconds": round(wall, 2),
        "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
        "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 2),
    }


def evict(paths: list[Path]) -> None:
    """Drop ``paths`` (files, or every file under a folder) from the page cache."""
    for path in paths:
        files = [p for p in path.rglob("*") if p.is_file()] if path.is_dir() else [path]
        for f in files:
            fd = os.open(f, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def warm(paths: list[Path]) -> None:
    """Read ``paths`` once so their pages are cached."""
    for path in paths:
        files = [p for p in path.rglob("*") if p.is_file()] if path.is_dir() else [path]
        for f in files:
            with open(f, "rb") as fh:
                while fh.read(1 << 24):
                    pass


def size_of(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def load_results() -> dict[str, Any]:
    path = RESULTS if RESULTS.exists() else TRACKED
    return json.loads(path.read_text()) if path.exists() else {}


def save(key: str, part: str, value: Any) -> None:
    results = load_results()
    results.setdefault(key, {})[part] = value
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    print(f"{key} {part}: {json.dumps(value)}", flush=True)


def machine() -> dict[str, Any]:
    import psutil

    return {
        "cores": os.cpu_count(),
        "ram_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "load_avg_1m": round(os.getloadavg()[0], 1),
    }


class Corpus:
    """The files of one corpus under the work folder."""

    def __init__(self, kind: str, n: int, work: Path) -> None:
        self.kind, self.n = kind, n
        self.key = f"{kind}-{n}"
        self.dir = work / self.key
        name = "collection.tsv" if kind == "passages" else "docs.tsv"
        self.tsv = self.dir / "synth" / name
        self.store = self.dir / "packed"
        self.offsets = self.dir / "offsets"
        self.sample = self.dir / "sample.tsv"
        self.columns = "id,text" if kind == "passages" else "id,url,title,text"

    def doc_id(self, i: np.ndarray) -> list[str]:
        if self.kind == "passages":
            return [str(x) for x in i.tolist()]
        return [f"msmarco_doc_{x % 60:02d}_{(x // 60) * 9173 + 17}" for x in i.tolist()]


# --------------------------------------------------------------------------- parts


_TILE = """
import sys
sys.path.insert(0, {here!r})
import numpy as np
from bench_scale import Corpus
from pathlib import Path
c = Corpus({kind!r}, {n}, Path({work!r}))
small, n = Path(sys.argv[1]), {n}
with open(c.tsv, "wb") as out:
    i = 0
    while i < n:
        with open(small, "rb") as f:
            for line in f:
                if i == n:
                    break
                out.write(c.doc_id(np.array([i]))[0].encode() + line[line.index(b"\\t"):])
                i += 1
"""


def part_tile(c: Corpus, work: Path, small_n: int) -> None:
    """The corpus as a smaller synth's lines repeated, each with the id of its new row."""
    small = Corpus(c.kind, small_n, work)
    c.tsv.parent.mkdir(parents=True, exist_ok=True)
    script = _TILE.format(here=str(HERE), kind=c.kind, n=c.n, work=str(work))
    out = measured([PY, "-c", script, str(small.tsv)])
    save(c.key, "synth", {**out, "bytes": c.tsv.stat().st_size, "tiled_from": small.key})


def part_synth(c: Corpus, work: Path, tile_from: int | None) -> None:
    if c.tsv.exists():
        print(f"{c.tsv} exists: synth skipped")
        return
    if tile_from:
        part_tile(c, work, tile_from)
        return
    fmt = [] if c.kind == "passages" else ["--format", "tsv"]
    out = measured([LADING, "synth", c.kind, str(c.n), str(c.tsv.parent), *fmt])
    save(c.key, "synth", {**out, "bytes": c.tsv.stat().st_size, "machine": machine()})


def part_read(c: Corpus) -> None:
    size = c.tsv.stat().st_size
    evict([c.tsv])
    cat = measured(["sh", "-c", f"cat '{c.tsv}' > /dev/null"])
    evict([c.tsv])
    loop = f"n = 0\nfor line in open({str(c.tsv)!r}, 'rb'):\n    n += 1\n"
    py = measured([PY, "-c", loop])
    evict([c.tsv])
    copy = c.dir / "copy.tsv"  # a durable copy on the store's disk: the build's writes alone
    cp = measured(["sh", "-c", f"cp '{c.tsv}' '{copy}' && sync -f '{copy}'"])
    copy.unlink()
    for r in (cat, py, cp):
        r["mb_per_s"] = round(size / 1e6 / r["seconds"], 1)
    save(c.key, "read", {"cat": cat, "python_lines": py, "cp": cp, "bytes": size, "cold": True})


def part_disk(c: Corpus) -> None:
    """Sequential write speed of the work disk: 2 GiB with dd, fsync included."""
    target = c.dir / "dd.bin"
    cmd = ["dd", "if=/dev/zero", f"of={target}", "bs=16M", "count=128", "conv=fsync"]
    out = measured(cmd)
    target.unlink()
    out["mb_per_s"] = round(2**31 / 1e6 / out["seconds"], 1)
    save(c.key, "disk", {**out, "machine": machine()})


def part_build(c: Corpus) -> None:
    if c.store.exists():
        shutil.rmtree(c.store)
    evict([c.tsv])
    cmd = [LADING, "build", str(c.tsv), str(c.store), "--quiet", "--columns", c.columns]
    out = measured(cmd)
    size = c.tsv.stat().st_size
    out |= {
        "mb_per_s": round(size / 1e6 / out["seconds"], 1),
        "bytes_in": size,
        "bytes_written": size_of(c.store),
        "machine": machine(),
        "cold": True,
    }
    save(c.key, "build", out)


def part_ids(c: Corpus) -> None:
    tiny = c.dir / "ids.tsv"
    with open(tiny, "w") as f:
        for lo in range(0, c.n, 100_000):
            ids = c.doc_id(np.arange(lo, min(c.n, lo + 100_000)))
            if c.kind == "passages":
                f.write("".join(f"{i}\tword\n" for i in ids))
            else:
                f.write("".join(f"{i}\thttp://example.org/\ttitle\tword\n" for i in ids))
    dest = c.dir / "ids-store"
    shutil.rmtree(dest, ignore_errors=True)
    out = measured([LADING, "build", str(tiny), str(dest), "--quiet", "--columns", c.columns])
    out |= {"rows": c.n, "bytes_in": tiny.stat().st_size, "machine": machine()}
    shutil.rmtree(dest)
    tiny.unlink()
    save(c.key, "ids", out)


def make_sample(c: Corpus, mb: int) -> Path:
    if not c.sample.exists():
        with open(c.tsv, "rb") as src, open(c.sample, "wb") as dst:
            dst.write(src.read(mb * MIB))
            dst.write(src.readline())  # finish the last line
    return c.sample


_PROC_ENCODE = """
import sys, time, multiprocessing as mp
from lading.stores.tokens import load_tokenizer
def init(path):
    global tok
    tok = load_tokenizer(path)
def encode(texts):
    return sum(len(e.ids) for e in tok.encode_batch(texts, add_special_tokens=False))
if __name__ == "__main__":
    path, sample, workers, text_col = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    texts = [l.rstrip(b"\\n").split(b"\\t")[text_col].decode() for l in open(sample, "rb")]
    batches = [texts[i : i + 1024] for i in range(0, len(texts), 1024)]
    with mp.get_context("fork").Pool(workers, init, (path,)) as pool:
        started = time.perf_counter()
        tokens = sum(pool.imap_unordered(encode, batches))
        seconds = time.perf_counter() - started
    import resource
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(seconds, tokens, usage.ru_utime + usage.ru_stime)
"""


def part_tokenize(c: Corpus, sample_mb: int) -> None:
    from lading.stores.tokens import train_tokenizer

    sample = make_sample(c, sample_mb)
    size = sample.stat().st_size
    tok_path = c.dir / "tokenizer.json"
    text_col = 1 if c.kind == "passages" else 3
    if not tok_path.exists():
        texts = []
        with open(sample, "rb") as f:
            for _, line in zip(range(20_000), f):
                texts.append(line.rstrip(b"\n").split(b"\t")[text_col].decode())
        tok_path.write_text(train_tokenizer(texts, "wordpiece", 30_522).to_str())
    out: dict[str, Any] = {"sample_bytes": size, "machine": machine()}
    for threads in (1, 2):
        dest = c.dir / f"tok-build-{threads}"
        shutil.rmtree(dest, ignore_errors=True)
        cores = ",".join(str(i) for i in range(threads))  # 1 or 2 cores, not just threads
        cmd = ["taskset", "-c", cores, LADING, "build", str(sample), str(dest), "--quiet"]
        cmd += ["--columns", c.columns, "--tokenizer", str(tok_path)]
        r = measured(cmd, env={"RAYON_NUM_THREADS": str(threads)})
        r["mb_per_s"] = round(size / 1e6 / r["seconds"], 2)
        out[f"build_threads_{threads}"] = r
        shutil.rmtree(dest, ignore_errors=True)
    for workers in (1, 2):
        cmd = [PY, "-c", _PROC_ENCODE, str(tok_path), str(sample), str(workers), str(text_col)]
        done = subprocess.run(
            cmd, env={**os.environ, "RAYON_NUM_THREADS": "1"}, capture_output=True, text=True
        )
        seconds, tokens, cpu = done.stdout.split()
        out[f"encode_processes_{workers}"] = {
            "seconds": round(float(seconds), 2),
            "cpu_seconds": round(float(cpu), 2),
            "tokens": int(tokens),
            "mb_per_s": round(size / 1e6 / float(seconds), 2),
        }
    save(c.key, "tokenize", out)


_DICT_SAMPLE = """
import sys, json
from lading.train.procmem import process_memory
before = process_memory().anon
docs = {}
for line in open(sys.argv[1], "rb"):
    parts = line.rstrip(b"\\n").decode().split("\\t")
    docs[parts[0]] = parts[-1] if len(parts) == 2 else "\\t".join(parts[1:])
print(json.dumps({"anon": process_memory().anon - before, "docs": len(docs)}))
"""


def part_dict(c: Corpus, sample_mb: int) -> None:
    import psutil

    sample = make_sample(c, sample_mb)
    done = subprocess.run([PY, "-c", _DICT_SAMPLE, str(sample)], capture_output=True, text=True)
    got = json.loads(done.stdout)
    per_byte = got["anon"] / sample.stat().st_size
    budget = int(psutil.virtual_memory().available)
    corpus = c.tsv.stat().st_size
    out: dict[str, Any] = {
        "sample_docs": got["docs"],
        "anon_per_corpus_byte": round(per_byte, 2),
        "budget_mib": budget // MIB,
    }
    for ranks in (1, 4):
        predicted = per_byte * corpus * ranks
        status = "oom" if predicted > budget else "fits"
        out[f"ranks_{ranks}"] = {
            "status": status,
            "reason": (
                f"predicted {predicted / MIB:,.0f} MiB of anonymous memory "
                f"({per_byte * corpus / MIB:,.0f} MiB per rank) > budget {budget / MIB:,.0f} MiB"
                if status == "oom"
                else f"predicted {predicted / MIB:,.0f} MiB <= budget"
            ),
        }
    save(c.key, "dict", out)


def irds_id(c: Corpus) -> str:
    return f"lading-local/{c.tsv}"


def part_stores(c: Corpus) -> None:
    out: dict[str, Any] = {}
    shutil.rmtree(c.offsets, ignore_errors=True)
    code = (
        "import sys; from lading import OffsetStore, ParseOptions; "
        "OffsetStore.build(sys.argv[1], sys.argv[2], "
        "parse=ParseOptions(columns=sys.argv[3].split(',')))"
    )
    out["offsets"] = measured([PY, "-c", code, str(c.tsv), str(c.offsets), c.columns])
    out["offsets"]["bytes_written"] = size_of(c.offsets)
    shutil.rmtree(irds_files(c)[0], ignore_errors=True)
    # ir_datasets reads a local TSV as GenericDoc (passages) or MsMarcoDocument (4 columns)
    code = (
        "import sys; from lading.stores.irds import IrDatasetsStore; "
        "s = IrDatasetsStore(sys.argv[1]); print(s.get_many([sys.argv[2]]))"
    )
    out["irds"] = measured([PY, "-c", code, irds_id(c), c.doc_id(np.array([0]))[0]])
    save(c.key, "stores", out)


_LOOKUP = """
import json, os, sys, time
import numpy as np
sys.path.insert(0, {here!r})
from bench_scale import Corpus, evict, warm, irds_files
from pathlib import Path
c = Corpus({kind!r}, {n}, Path({work!r}))
name, seconds = sys.argv[1], float(sys.argv[2])
if name == "packed":
    from lading.stores.packed import PackedStore
    store, files = PackedStore(c.store), [c.store]
elif name == "offsets":
    from lading.stores.offsets import OffsetStore
    store, files = OffsetStore(c.offsets), [c.offsets, c.tsv]
else:
    from lading.stores.irds import IrDatasetsStore
    store, files = IrDatasetsStore("lading-local/" + str(c.tsv)), irds_files(c)
rng = np.random.default_rng(0)
out = {{}}
for state in ("cold", "warm"):
    if state == "cold":
        evict(files)
    else:
        warm(files)
    docs, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        ids = c.doc_id(rng.integers(0, c.n, {batch}))
        docs += len(store.get_many(ids))
    out[state] = round(docs / (time.perf_counter() - started))
print(json.dumps(out))
"""


def irds_files(c: Corpus) -> list[Path]:
    """ir_datasets keeps a local TSV's docstore beside it, in ``<file>.pklz4/``."""
    return [Path(f"{c.tsv}.pklz4")]


def lookup_script(c: Corpus, work: Path) -> str:
    return _LOOKUP.format(here=str(HERE), kind=c.kind, n=c.n, work=str(work), batch=BATCH)


def part_lookup(c: Corpus, work: Path, seconds: float) -> None:
    out: dict[str, Any] = {"batch": BATCH, "seconds_each": seconds, "machine": machine()}
    names = ["packed", "offsets", "irds"]
    for name in names:
        done = subprocess.run(
            [PY, "-c", lookup_script(c, work), name, str(seconds)], capture_output=True, text=True
        )
        if done.returncode:
            out[name] = {"error": done.stderr.strip().splitlines()[-1]}
        else:
            out[name] = json.loads(done.stdout.splitlines()[-1])
        print(name, out[name], flush=True)
    save(c.key, "lookup", out)


_RANK = """
import sys, time
sys.path.insert(0, {here!r})
import numpy as np
from bench_scale import Corpus
from pathlib import Path
from lading.train.procmem import process_memory
c = Corpus({kind!r}, {n}, Path({work!r}))
name, rank = sys.argv[1], int(sys.argv[2])
if name == "packed":
    from lading.stores.packed import PackedStore
    store = PackedStore(c.store)
elif name == "offsets":
    from lading.stores.offsets import OffsetStore
    store = OffsetStore(c.offsets)
else:
    from lading.stores.irds import IrDatasetsStore
    store = IrDatasetsStore("lading-local/" + str(c.tsv))
rng = np.random.default_rng(rank)
for _ in range(200):
    store.get_many(c.doc_id(rng.integers(0, c.n, 64)))
m = process_memory()
print(m.anon, m.pss)
"""


def part_ranks(c: Corpus, work: Path) -> None:
    out: dict[str, Any] = {}
    script = _RANK.format(here=str(HERE), kind=c.kind, n=c.n, work=str(work))
    names = ["packed", "offsets", "irds"]
    for name in names:
        procs = [
            subprocess.Popen([PY, "-c", script, name, str(r)], stdout=subprocess.PIPE, text=True)
            for r in range(4)
        ]
        got = [p.communicate()[0].split() for p in procs]
        anon = [int(g[0]) / MIB for g in got if g]
        out[name] = {"anon_mib_per_rank": [round(a, 1) for a in anon]}
        print(name, out[name], flush=True)
    save(c.key, "ranks", out)


# --------------------------------------------------------------------------- report


def _f(value: Any, spec: str = ",.0f") -> str:
    return format(value, spec) if isinstance(value, int | float) else "not measured"


def report() -> str:
    """The tables of the Scale section, from ``scale_results.json``."""
    results = load_results()
    keys = sorted(results, key=lambda k: (k.split("-")[0] != "passages", k))
    out = [
        "| corpus | text GB | synth s | cat s | Python line loop s | durable cp s "
        "| lading build s | build MB/s | build / line loop | build / cp "
        "| build CPU s / loop CPU s | build peak RSS MiB | store GB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for key in keys:
        r = results[key]
        synth, read, build = r.get("synth", {}), r.get("read", {}), r.get("build", {})
        if not build:
            continue
        loop = read.get("python_lines", {})
        ratio = build["seconds"] / loop["seconds"] if build and loop else None
        cpu = build["cpu_seconds"] / loop["cpu_seconds"] if build and loop else None
        cp = read.get("cp", {}).get("seconds")
        over_cp = build["seconds"] / cp if cp else None
        tiled = f" (tiled from {synth['tiled_from']})" if "tiled_from" in synth else ""
        out.append(
            f"| {key}{tiled} | {_f(synth.get('bytes', build.get('bytes_in')) / 1e9, '.2f')} "
            f"| {_f(synth.get('seconds'), '.0f')} "
            f"| {_f(read.get('cat', {}).get('seconds'), '.1f')} "
            f"| {_f(loop.get('seconds'), '.1f')} | {_f(cp, '.1f')} "
            f"| {_f(build.get('seconds'), '.1f')} "
            f"| {_f(build.get('mb_per_s'), '.0f')} | {_f(ratio, '.2f')} | {_f(over_cp, '.2f')} "
            f"| {_f(cpu, '.1f')} "
            f"| {_f(build.get('peak_rss_mib'))} "
            f"| {_f(build.get('bytes_written', 0) / 1e9 or None, '.2f')} |"
        )
    ids = [(k, r["ids"]) for k, r in results.items() if "ids" in r]
    if ids:
        out += [
            "",
            "| ids only (one-word texts) | rows | build s | peak RSS MiB |",
            "|---|---:|---:|---:|",
        ]
        out += [
            f"| {k} | {v['rows']:,} | {v['seconds']:.0f} | {v['peak_rss_mib']:,.0f} |"
            for k, v in ids
        ]
    out += [
        "",
        "| corpus | store | docs/s cold | docs/s warm | RssAnon per rank at 4 ranks, MiB |",
        "|---|---|---:|---:|---:|",
    ]
    for key in keys:
        lookup, ranks = results[key].get("lookup", {}), results[key].get("ranks", {})
        for name in ("packed", "offsets", "irds"):
            got, anon = lookup.get(name, {}), ranks.get(name, {}).get("anon_mib_per_rank")
            if got or anon:
                out.append(
                    f"| {key} | {name} | {_f(got.get('cold'))} | {_f(got.get('warm'))} "
                    f"| {', '.join(f'{a:.1f}' for a in anon) if anon else 'not measured'} |"
                )
    out += [
        "",
        "| corpus | dict baseline: RssAnon per corpus byte | per rank MiB | budget MiB "
        "| 1 rank | 4 ranks |",
        "|---|---:|---:|---:|---|---|",
    ]
    for key in keys:
        d = results[key].get("dict")
        if not d:
            continue
        text = results[key].get("synth", {}).get("bytes") or results[key]["build"]["bytes_in"]
        per_rank = d["anon_per_corpus_byte"] * text / MIB
        out.append(
            f"| {key} | {d['anon_per_corpus_byte']:.2f} | {per_rank:,.0f} | {d['budget_mib']:,} "
            f"| {d['ranks_1']['status'].upper()} | {d['ranks_4']['status'].upper()} |"
        )
    for key in keys:
        t = results[key].get("tokenize")
        if not t:
            continue
        mb = t["sample_bytes"] / 1e6
        out += [
            "",
            f"Tokenized builds of a {mb:.0f} MB sample of {key} (WordPiece, 30,522 entries):",
            "",
            "| how | cores | wall s | MB/s (wall) | CPU s | MB per CPU-second | 2 cores / 1 |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for how, label in (
            ("build_threads", "lading build (taskset, tokenizers threads)"),
            ("encode_processes", "encode_batch in a process pool"),
        ):
            one = t.get(f"{how}_1", {}).get("seconds")
            for w in (1, 2):
                r = t.get(f"{how}_{w}", {})
                cpu = r.get("cpu_seconds")
                gain = one / r["seconds"] if w == 2 and one and r.get("seconds") else None
                out.append(
                    f"| {label} | {w} | {_f(r.get('seconds'), '.1f')} "
                    f"| {_f(r.get('mb_per_s'), '.2f')} "
                    f"| {_f(cpu, '.1f')} | {_f(mb / cpu if cpu else None, '.2f')} "
                    f"| {_f(gain, '.2f') if w == 2 else ''} |"
                )
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--kind", choices=["passages", "documents"], default="passages")
    p.add_argument("--n", type=int, default=8_800_000)
    p.add_argument("--work", type=Path, default=Path("/tmp/lading-scale"))
    p.add_argument("--parts", default="all", help=f"comma-separated among {','.join(PARTS)}")
    p.add_argument("--sample-mb", type=int, default=32)
    p.add_argument("--lookup-seconds", type=float, default=10.0)
    p.add_argument(
        "--tile-from",
        type=int,
        help="synth: repeat the texts of the corpus of this many rows (made before) to --n rows",
    )
    p.add_argument("--report", action="store_true", help="print the tables from the results")
    p.add_argument(
        "--write", action="store_true", help="write the tables and notes into RESULTS.md"
    )
    p.add_argument("--clean", action="store_true", help="delete this corpus's work folder after")
    args = p.parse_args()
    if args.report or args.write:
        print(report())
        if args.write:
            if RESULTS.exists():  # this machine's runs become the tracked figures
                TRACKED.write_text(RESULTS.read_text())
            sys.path.insert(0, str(HERE))
            from common import write_section

            notes = (HERE / "scale_notes.md").read_text().strip()
            write_section(
                HERE / "RESULTS.md",
                TITLE,
                f"{notes.split(_TABLES)[0].strip()}\n\n{report()}\n\n"
                f"{notes.split(_TABLES)[1].strip()}",
                "python benchmarks/bench_scale.py --kind passages --n 8800000 --parts all; "
                "python benchmarks/bench_scale.py --kind documents --n 320000 --parts all; "
                "python benchmarks/bench_scale.py --kind documents --n 3200000 --parts all; "
                "python benchmarks/bench_scale.py --kind passages --n 200000 "
                "--parts synth,tokenize; "
                "python benchmarks/bench_scale.py --kind documents --n 6000 "
                "--parts synth,tokenize; "
                "python benchmarks/bench_scale.py --write",
                write=True,
            )
        return
    c = Corpus(args.kind, args.n, args.work)
    c.dir.mkdir(parents=True, exist_ok=True)
    parts = PARTS if args.parts == "all" else tuple(args.parts.split(","))
    for part in parts:
        print(f"== {c.key}: {part}", flush=True)
        if part == "synth":
            part_synth(c, args.work, args.tile_from)
        elif part == "read":
            part_read(c)
        elif part == "disk":
            part_disk(c)
        elif part == "build":
            part_build(c)
        elif part == "ids":
            part_ids(c)
        elif part == "tokenize":
            part_tokenize(c, args.sample_mb)
        elif part == "dict":
            part_dict(c, args.sample_mb)
        elif part == "stores":
            part_stores(c)
        elif part == "lookup":
            part_lookup(c, args.work, args.lookup_seconds)
        elif part == "ranks":
            part_ranks(c, args.work)
        else:
            raise SystemExit(f"unknown part {part!r}; choose from {', '.join(PARTS)}")
    if args.clean:
        shutil.rmtree(c.dir)


if __name__ == "__main__":
    main()
