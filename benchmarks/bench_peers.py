"""lading beside the data layers users pick today: HF datasets, Mosaic streaming, litdata.

    python benchmarks/bench_peers.py [--passages 20000 | --long 200000] [--repeats 3] [--write]

One synthesized collection (``lading synth passages``, or with ``--long`` the bodies of
``lading synth documents``, ~6.5 KB each), every system in one run: each built from the same
TSV through the tool's own recommended route (systems in peers_systems.py), then measured in
fresh processes, systems interleaved within every repeat (a change of load hits all alike):

- build: wall seconds and peak RSS of the build process, and the bytes on disk; the same with
  token ids (a WordPiece vocabulary trained here, no download) where the tool holds them;
- lookups by id: docs/s over random batches of 64 ids, warm (for ``--seconds`` after a warm-up)
  and cold (fresh batches right after every file of the store left the page cache through
  ``posix_fadvise(POSIX_FADV_DONTNEED)``: no root needed), texts and token ids, through the
  route a user takes (lading and the dict: the id; the peers, which have no lookup by id: an
  id -> row dict built in the process from the dataset's ids, its cost counted in memory);
- scan: docs/s over one sequential pass of every text;
- memory: anonymous (private) memory the process gained by opening the data, building what it
  needs to find ids, and reading 100 batches: what every rank pays again.

``mds`` (Mosaic streaming) and ``litdata`` are the ``peers`` extra; a peer that cannot be
imported here is a skipped column with the reason, never a failure (mosaicml-streaming's
package imports torchvision, which PyPI's wheel breaks beside the CPU torch this project pins).
Results go to bench-out/ (median [min-max] over the repeats, peer / lading ratios); ``--write``
puts them in benchmarks/RESULTS.md (one section per corpus, e.g. "Peers: 200,000 passages").
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import time
from pathlib import Path

import peers_report as report
from common import HERE, add_write_flag, write_section
from lading.bench.synth import synth
from lading.train.procmem import process_memory
from peers_systems import SYSTEMS, Reader, build, drop_cache, resident_fraction, rows, unavailable

BATCH = 64
COLD_BATCHES = 50  # timed cold: fresh random batches, no warm-up (the cache fills as they run)


def versions() -> dict[str, str]:
    """The version of every importable system."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("lading", "datasets", "pyarrow", "mosaicml-streaming", "litdata", "torch"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            continue
    return out


def _batches(ids: list[str], seed: int, count: int) -> list[list[str]]:
    rng = random.Random(seed)
    return [rng.sample(ids, BATCH) for _ in range(count)]


def _rate(reader: Reader, batches: list[list[str]], seconds: float) -> float:
    """Docs/s over ``batches`` repeated for ``seconds`` (one pass at least)."""
    done, started = 0, time.perf_counter()
    while True:
        for batch in batches:
            reader.get(batch)
        done += len(batches) * BATCH
        if time.perf_counter() - started >= seconds:
            return done / (time.perf_counter() - started)


def measure(system: str, tsv: Path, dest: Path, seconds: float) -> dict[str, float]:
    """Lookups/s, scan docs/s and the anonymous memory opening and reading cost, here."""
    ids = [doc_id for doc_id, _ in rows(tsv)]  # the benchmark's, not the system's: not counted
    batches = _batches(ids, 0, 200)
    base = process_memory().anon
    reader = Reader(system, tsv, dest)
    for batch in batches[:100]:
        assert len(reader.get(batch)) == BATCH
    memory = process_memory().anon - base
    lookups = _rate(reader, batches, seconds)
    reader.before_scan()
    started = time.perf_counter()
    scanned = reader.scan()
    scan = scanned / (time.perf_counter() - started)
    assert scanned == len(ids), (system, scanned, len(ids))
    return {"lookups_per_s": lookups, "scan_per_s": scan, "anon_mib": memory / 2**20}


def measure_more(what: str, system: str, tsv: Path, dest: Path, seconds: float) -> dict[str, float]:
    """``tokens``: token-id lookups/s, warm. ``cold`` / ``tokens-cold``: text / token lookups
    over fresh batches right after the files' pages were dropped (by the parent)."""
    tokens = what.startswith("tokens")
    key = ("tok_" if tokens else "") + ("cold_" if what.endswith("cold") else "") + "lookups_per_s"
    ids = [doc_id for doc_id, _ in rows(tsv)]
    if what.endswith("cold"):
        batches = _batches(ids, 1, COLD_BATCHES)
        started = time.perf_counter()
        reader = Reader(system, tsv, dest, tokens=tokens)
        opened = time.perf_counter() - started
        cached = 100 * resident_fraction(dest) if dest.exists() and system != "dict" else 0.0
        started = time.perf_counter()
        for batch in batches:
            assert len(reader.get(batch)) == BATCH
        prefix = key.replace("lookups_per_s", "")
        got = {key: len(batches) * BATCH / (time.perf_counter() - started)}
        return got | {f"{prefix}open_s": opened, f"{prefix}open_cached_pct": cached}
    reader = Reader(system, tsv, dest, tokens=tokens)
    batches = _batches(ids, 0, 200)
    for batch in batches[:100]:
        assert len(reader.get(batch)) == BATCH
    return {key: _rate(reader, batches, seconds)}


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


def _build_child(system: str, tsv: Path, dest: Path, tokenizer: str | None) -> dict[str, float]:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the peak from here: the build's, not the imports'
    before = _status_kib("VmRSS")
    started = time.perf_counter()
    build(system, tsv, dest, tokenizer)
    seconds = time.perf_counter() - started
    peak = (_status_kib("VmHWM") - before) / 1024
    size = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file()) if dest.exists() else 0
    prefix = "tok_" if tokenizer else ""
    return {
        f"{prefix}build_s": seconds,
        f"{prefix}peak_rss_mib": peak,
        f"{prefix}disk_mib": size / 2**20,
    }


def _child(argv: list[str]) -> None:
    what, system, tsv, dest = argv[0], argv[1], Path(argv[2]), Path(argv[3])
    if what in ("build", "build-tokens"):
        got = _build_child(system, tsv, dest, argv[4] if what == "build-tokens" else None)
    elif what == "read":
        got = measure(system, tsv, dest, float(argv[4]))
    else:
        got = measure_more(what, system, tsv, dest, float(argv[4]))
    print(json.dumps(got))


def child(*args: str) -> dict[str, float]:
    """Run one measure in a fresh interpreter (its memory is its own)."""
    done = subprocess.run(
        [sys.executable, __file__, "--child", *args], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"{args[:2]} failed:\n{done.stderr[-3000:]}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


TOKEN_SYSTEMS: tuple[str, ...] = ("lading", "dict", "hf", "litdata")  # mds: not written


def one_system(
    system: str, tsv: Path, out: Path, tokenizer: str | None, seconds: float
) -> dict[str, float]:
    """Every measure of ``system`` in this repeat, each in a fresh process."""
    got: dict[str, float] = {}
    dest = out / system
    if system != "dict":
        got.update(child("build", system, str(tsv), str(dest)))
    got.update(child("read", system, str(tsv), str(dest), str(seconds)))
    drop_cache(dest if system != "dict" else tsv)
    got["cold_resident_pct"] = 100 * resident_fraction(dest if system != "dict" else tsv)
    got.update(child("cold", system, str(tsv), str(dest), str(seconds)))
    got["cold_first_s"] = got["cold_open_s"] + COLD_BATCHES * BATCH / got["cold_lookups_per_s"]
    if tokenizer is None or system not in TOKEN_SYSTEMS:
        return got
    tok_dest = out / f"{system}-tokens"
    if system == "dict":  # no build: it copies lading's token arrays into a dict
        tok_dest = out / "lading-tokens"
    else:
        got.update(child("build-tokens", system, str(tsv), str(tok_dest), tokenizer))
    got.update(child("tokens", system, str(tsv), str(tok_dest), str(seconds)))
    drop_cache(tok_dest)
    got.update(child("tokens-cold", system, str(tsv), str(tok_dest), str(seconds)))
    return got


def corpus(args: argparse.Namespace) -> tuple[Path, str]:
    """The TSV (``id<TAB>text``) and what it is."""
    if not args.long:
        tsv = synth("passages", args.passages, args.out / f"synth-{args.passages}").corpus
        return tsv, f"{args.passages:,} synthesized passages (`lading synth passages`"
    folder = args.out / f"synth-long-{args.long}"
    tsv = folder / "long.tsv"
    if not tsv.is_file():
        docs = synth("documents", args.long, folder, corpus_format="tsv").corpus
        with open(docs, encoding="utf-8") as f, open(tsv, "w", encoding="utf-8") as w:
            for line in f:  # docid, url, title, body -> docid, body
                fields = line.rstrip("\n").split("\t")
                w.write(f"{fields[0]}\t{fields[3]}\n")
        docs.unlink()
    return tsv, f"{args.long:,} synthesized long documents (`lading synth documents`, the body"


def tokenizer_for(tsv: Path, out: Path) -> str:
    """A WordPiece vocabulary of 8,000 trained here on the first 20,000 texts (as lading bench)."""
    from lading.stores.tokens import save_tokenizer, train_tokenizer

    path = out / f"tokenizer-{tsv.parent.name}.json"
    if not path.is_file():
        texts = [text for _, (_, text) in zip(range(20_000), rows(tsv))]
        save_tokenizer(train_tokenizer(texts, "wordpiece", 8000), path)
    return str(path)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=20_000)
    parser.add_argument("--long", type=int, default=0, help="N long documents instead (200000)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=2.0, help="lookup window per measure")
    parser.add_argument("--no-tokens", action="store_true", help="skip the token-id measures")
    parser.add_argument("--out", type=Path, default=HERE.parent / "bench-out" / "peers")
    add_write_flag(parser)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    tsv, what = corpus(args)
    tokenizer = None if args.no_tokens else tokenizer_for(tsv, args.out)
    work = args.out / tsv.parent.name
    skipped = {s: why for s in SYSTEMS if (why := unavailable(s)) is not None}
    systems = [s for s in SYSTEMS if s not in skipped]
    results: dict[str, dict[str, list[float]]] = {s: {} for s in systems}
    load = [os.getloadavg()[0]]
    started = time.perf_counter()
    for repeat in range(args.repeats):
        order = systems[repeat % len(systems) :] + systems[: repeat % len(systems)]
        for system in order:  # interleaved, the first system rotating with the repeats
            got = one_system(system, tsv, work, tokenizer, args.seconds)
            for key, value in got.items():
                results[system].setdefault(key, []).append(value)
            print(f"repeat {repeat + 1} {system}: {got}", flush=True)
            load.append(os.getloadavg()[0])
    head = report.header(
        what, tsv, args, time.perf_counter() - started, load, versions(), platform.python_version()
    )
    body = "\n".join([head, "", report.table(results, skipped, SYSTEMS)])
    print(body)
    (args.out / "results.json").write_text(json.dumps({"results": results, "skipped": skipped}))
    given = " ".join(a for a in sys.argv[1:] if a != "--write")  # every flag of the run
    command = f"python benchmarks/bench_peers.py {given}".rstrip()
    # one section per corpus: a 1M run does not overwrite the 200k one
    kind = f"{args.long:,} long documents" if args.long else f"{args.passages:,} passages"
    title = f"Peers: {kind}"
    write_section(HERE / "RESULTS.md", title, body, command, write=args.write)


if __name__ == "__main__":
    main()
