"""What a source fingerprint costs: the one lading takes on every open, against hashing all.

    python benchmarks/bench_fingerprint.py [--gib 2] [--repeats 3] [--write]

A ``--gib`` GiB file of passage-like lines is written to a temporary folder (deleted after),
then, each measured ``--repeats`` times, median and min–max:
- lading's fingerprint (``lading.sources.fingerprint``: stat + SHA-256 of the first and last
  64 KiB), which every open of a store and every reuse decision reads;
- a whole-file hash at each of CRC32 (zlib), BLAKE2b and SHA-256, read in 16 MiB blocks from a
  warm page cache (the fastest it can be; a cold 21 GB source adds the disk's read time).
The throughputs are extrapolated to MS MARCO v1 documents (21 GB). ``--write`` puts the table in
the "Source fingerprint" section of benchmarks/RELIABILITY.md.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path

from common import HERE, write_section
from lading.sources import fingerprint

MSMARCO_DOCS = 21.2e9  # bytes of msmarco-docs.tsv


def write_file(path: Path, gib: float) -> None:
    line = b"\t".join([b"1234567", b"a passage of text " * 20]) + b"\n"
    block = line * ((16 << 20) // len(line))
    with open(path, "wb") as f:
        for _ in range(int(gib * 1024 / 16)):
            f.write(block)


def whole(path: Path, update: Callable[[bytes], None]) -> None:
    with open(path, "rb") as f:
        while block := f.read(16 << 20):
            update(block)


def timed(fn: Callable[[], object], repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        out.append(time.perf_counter() - started)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gib", type=float, default=2.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--write", action="store_true", help="update benchmarks/RELIABILITY.md")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "source.tsv"
        write_file(path, args.gib)
        size = path.stat().st_size
        whole(path, lambda b: None)  # warm the page cache
        crc = [0]

        def crc32() -> None:
            crc[0] = 0
            whole(path, lambda b: crc.__setitem__(0, zlib.crc32(b, crc[0])))

        def digest(name: str) -> Callable[[], None]:
            def run() -> None:
                h = hashlib.new(name)
                whole(path, h.update)

            return run

        cells = {
            "lading fingerprint (stat + 2 x 64 KiB SHA-256)": timed(
                lambda: fingerprint(path), max(args.repeats, 20)
            ),
            "whole file, CRC32": timed(crc32, args.repeats),
            "whole file, BLAKE2b": timed(digest("blake2b"), args.repeats),
            "whole file, SHA-256": timed(digest("sha256"), args.repeats),
        }
    lines = [
        f"A {size / 2**30:.1f} GiB file from a warm page cache; median [min–max] of "
        f"{args.repeats} runs (20 for the fingerprint); 21 GB = MS MARCO v1 documents.",
        "",
        "| what is read | time | throughput | at 21 GB |",
        "|---|---:|---:|---:|",
    ]
    for name, times in cells.items():
        mid = statistics.median(times)
        if name.startswith("lading"):
            lines.append(
                f"| {name} | {mid * 1e3:.2f} ms [{min(times) * 1e3:.2f}–{max(times) * 1e3:.2f}]"
                " | — | the same (does not grow with the file) |"
            )
            continue
        rate = size / mid
        lines.append(
            f"| {name} | {mid:.2f} s [{min(times):.2f}–{max(times):.2f}] | "
            f"{rate / 1e9:.2f} GB/s | {MSMARCO_DOCS / rate:.0f} s per process |"
        )
    report = "\n".join(lines)
    print(report)
    where = write_section(
        HERE / "RELIABILITY.md",
        "Source fingerprint",
        DECISION + "\n\n" + report,
        "python benchmarks/bench_fingerprint.py --write",
        write=args.write,
    )
    print(f"written to {where}")


DECISION = """What is hashed, and when. A store (packed or offsets) and a token corpus record their
source's fingerprint at build: its size, its modification time (`mtime_ns`) and the SHA-256 of
its first and last 64 KiB (a folder source: every file's size and mtime; a lading store as
source: its files' CRC32s). Every open compares all of them (`store.stale`, a
`StaleStoreWarning`, `lading inspect`); `build_store` and `TokenCorpus.build` reuse only on an
exact match, else rebuild; an `OffsetStore` refuses to read a changed source. The mtime is what
catches an edit in the middle that keeps the size (the independent test's 8 bytes of line
10,000: `tests/sources/test_fingerprints.py`). The price is make's: a `touch`, or a copy that
does not keep the mtime, of an unchanged source also rebuilds. Hashing the whole source instead
would be exact, but it would read the whole corpus on every open, in every rank and worker: at the
rates below 26 s (CRC32) to 110 s (BLAKE2b) per process for MS MARCO documents from a warm
cache, more from disk, against a tenth of a millisecond. A
copy of the store to another machine (source path absent there) is not stale. Loader states
carry a digest of the data they index (`TrainingGroups.data_fingerprint()`: the store's file
CRC32s, queries, judged and candidate rows; parquet: every file's name, size and footer), so a
state of other data of the same length is refused; a plain map-style dataset is known by its
length only, unless it defines `data_fingerprint()`."""


if __name__ == "__main__":
    main()
