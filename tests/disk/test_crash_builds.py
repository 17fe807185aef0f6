"""SIGKILL in the middle of `lading build`, `lading lm build` and `lading repartition`.

Each destination first holds a complete version 1; builds of the version it lacks are killed
at random moments after their temporary directory appears (in the destination for a store or a
corpus, which commit a snapshot by its manifest; beside it for a parquet folder, published
whole), again and again. After each kill the destination must be absent or a complete version
1 or 2 (it opens, every check ``lading verify`` makes holds, its counts are those of a
version), never something half-written, and the next build must clean up and succeed.
``LADING_KILLS`` sets the kills per tool (default 3; benchmarks/reliability.py uses more); while
none has landed inside the writing, more follow, up to 4x as many.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from conftest import SEED, log_reliability, word_tokenizer, write

pytestmark = pytest.mark.slow  # SIGKILLs real processes at random moments: run by .ci/run

KILLS = int(os.environ.get("LADING_KILLS", "3"))
pytest.importorskip("tokenizers")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def passages(n: int, salt: str) -> str:
    rng = np.random.default_rng(n)
    words = [f"w{i}" for i in range(300)]
    return "".join(f"p{i}\t{salt} {' '.join(rng.choice(words, 40))}\n" for i in range(n))


def store_version(dest: Path) -> int:
    from lading.stores import verify_store
    from lading.stores.packed import PackedStore

    store = PackedStore(dest)
    assert verify_store(dest) == [], f"{dest} opens but verify fails"
    return {30_000: 1, 45_000: 2}[len(store)]


def corpus_version(dest: Path) -> int:
    from lading.lm import TokenCorpus
    from lading.lm.corpus import verify_corpus

    corpus = TokenCorpus.open(dest, on_stale="ignore")
    assert verify_corpus(dest) == []
    return {3_000: 1, 4_500: 2}[len(corpus)]


def temps(dest: Path) -> list[Path]:
    """A build's temporary directories: in ``dest`` (snapshots) or beside it (published)."""
    inside = list(dest.glob(".tmp-*")) if dest.is_dir() else []
    return inside + list(dest.parent.glob(f"{dest.name}.tmp-*"))


def parquet_version(dest: Path) -> int:
    assert (dest / "_lading.json").is_file()
    return {60_000: 1, 90_000: 2}[pq.read_table(dest).num_rows]


def sessions(path: Path, rows: int) -> Path:
    table = pa.table({"session_id": pa.array(np.arange(rows), pa.int64())})
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, row_group_size=1000)
    return path


def start(command: list[str], dest: Path) -> tuple[subprocess.Popen[bytes], float]:
    """Start ``command``; return it once its temporary directory exists, with that moment."""
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if temps(dest):
            break
        time.sleep(0.002)
    return proc, time.monotonic()


def crash_many(
    build: Callable[[int], list[str]],
    dest: Path,
    version: Callable[[Path], int],
    rng: random.Random,
) -> None:
    lading = [sys.executable, "-m", "lading"]
    subprocess.run(lading + build(1), check=True, capture_output=True)
    assert version(dest) == 1
    proc, began = start(lading + build(2), dest)
    while proc.poll() is None and temps(dest):
        time.sleep(0.002)
    writing = time.monotonic() - began  # from the temporary directory to the published one
    proc.wait()
    assert proc.returncode == 0 and version(dest) == 2
    subprocess.run(lading + build(1), check=True, capture_output=True)
    seen, interrupted = [], 0
    replay = f"(replay: LADING_TEST_SEED={SEED})"
    budget = 1.5 * writing
    current = 1
    tries = 0
    # KILLS kills, and more while none has landed inside the writing (up to 4x): a kill after
    # the publish proves nothing, and 3 of 3 missed once in CI on a loaded machine (a
    # repartition writes for ~0.1 s)
    while tries < KILLS or (interrupted == 0 and tries < 4 * KILLS):
        tries += 1
        # build the version the destination does not hold, or the build would be a no-op
        proc, _ = start(lading + build(2 if current != 2 else 1), dest)
        time.sleep(rng.uniform(0, budget))
        proc.kill()
        proc.wait()
        hit = bool(temps(dest))
        interrupted += hit
        budget = budget if hit else 0.6 * budget  # the build outran the kill: aim earlier
        current = version(dest) if dest.exists() else 0  # absent is allowed, half is not
        seen.append(current)
    assert set(seen) <= {0, 1, 2}, f"versions after kills: {seen} {replay}"
    assert interrupted > 0, f"no kill landed while the build was writing {replay}"
    subprocess.run(lading + build(2), check=True, capture_output=True)
    assert version(dest) == 2
    leftovers = [p.name for p in [*dest.parent.iterdir(), *dest.iterdir()]
                 if ".tmp-" in p.name or ".old-" in p.name]  # fmt: skip
    assert leftovers == [], f"temporary directories left behind: {leftovers} {replay}"
    if (dest / "meta.json").is_file():  # a snapshot format: nothing but committed snapshots
        meta = json.loads((dest / "meta.json").read_text())
        kept = {meta["snapshot"], *(h["snapshot"] for h in meta["history"])}
        orphans = [p.name for p in dest.iterdir() if p.is_dir() and p.name not in kept]
        assert orphans == [], f"directories no snapshot names: {orphans} {replay}"
    log_reliability({"test": "crash_build", "tool": build(1)[0], "kills": tries,
                     "interrupted": interrupted, "versions": seen})  # fmt: skip


def test_killed_store_builds(tmp_path: Path, rng: random.Random) -> None:
    sources = {
        1: write(tmp_path / "v1.tsv", passages(30_000, "one")),
        2: write(tmp_path / "v2.tsv", passages(45_000, "two")),
    }
    dest = tmp_path / "store"
    crash_many(lambda v: ["build", str(sources[v]), str(dest)], dest, store_version, rng)


def test_killed_corpus_builds(tmp_path: Path, rng: random.Random) -> None:
    words = [f"w{i}" for i in range(300)]
    tok = word_tokenizer(words, tmp_path / "tok.json")
    draw = np.random.default_rng(0)
    sources = {
        v: write(
            tmp_path / f"v{v}.txt",
            "\n\n".join(" ".join(draw.choice(words, 200)) for _ in range(n)) + "\n",
        )
        for v, n in ((1, 3_000), (2, 4_500))
    }
    dest = tmp_path / "corpus"

    def build(v: int) -> list[str]:
        return ["lm", "build", str(sources[v]), str(dest), "--tokenizer", str(tok), "--quiet"]

    crash_many(build, dest, corpus_version, rng)


def test_killed_repartitions(tmp_path: Path, rng: random.Random) -> None:
    sources = {1: sessions(tmp_path / "v1" / "a.parquet", 60_000)}
    sources[2] = sessions(tmp_path / "v2" / "a.parquet", 90_000)
    dest = tmp_path / "parts"
    crash_many(
        lambda v: ["repartition", str(sources[v]), str(dest), "--row-group-size", "500"],
        dest,
        parquet_version,
        rng,
    )
