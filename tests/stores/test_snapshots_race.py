"""Readers racing a rebuilder, in real processes: every open sees one snapshot or a clear error.

One process rebuilds a store again and again, alternately from two sources of 3,000 documents
(ids ``a<i>`` with texts ``A text <i>``; ids ``b<i>`` with texts ``B text <i>``); two reader
processes open it in a loop and check that every id and text they read belong to one source.
On the store format of version 1 (a folder swapped whole while readers opened its files one by
one) 90 s of this gave 39 opens with A's ids and B's texts, and 50 ``StoreFormatError: ... do
not match their checksum`` on an intact store; this test's 12 s gave 41 and 153 (with 63 other
errors). ``LADING_RACE_S`` sets the time (default 12 s).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import log_reliability

pytestmark = pytest.mark.slow  # three processes for ~12 s

DOCS = 3000
RACE_S = float(os.environ.get("LADING_RACE_S", "12"))


def _source(path: Path, letter: str) -> Path:
    lines = "".join(f"{letter.lower()}{i}\t{letter} text {i}\n" for i in range(DOCS))
    path.write_text(lines, encoding="utf-8")
    return path


def _rebuild(dest: str, sources: list[str], stop: Any, count: Any) -> None:
    # no grace: each commit removes the snapshot it replaced at once, the hardest case for a
    # reader (it may lose the files its manifest names and must read the new manifest)
    os.environ["LADING_SNAPSHOT_GRACE_S"] = "0"
    import lading

    n = 0
    while not stop.is_set():
        lading.build_store(sources[n % 2], dest, progress=False)
        n += 1
        count.value = n


def _read(dest: str, stop: Any, out: Any) -> None:
    import warnings

    import lading
    from lading.errors import StoreFormatError

    tally = {"ok": 0, "mixed": 0, "damaged": 0, "other": 0}
    examples: list[str] = []
    warnings.simplefilter("ignore")
    while not stop.is_set():
        try:
            store = lading.open_store(dest)
            ids = store.ids()
            letter = ids[0][0]
            probe = [ids[0], ids[-1], ids[len(ids) // 2]]
            texts = store.get_many(probe)
            consistent = len(ids) == DOCS and all(i[0] == letter for i in ids[:: DOCS // 30])
            consistent = consistent and all(t[0] == letter.upper() for t in texts)
            consistent = consistent and texts[0] == f"{letter.upper()} text 0"
            if consistent:
                tally["ok"] += 1
            else:
                tally["mixed"] += 1
                examples.append(f"{probe} -> {texts}")
        except StoreFormatError as e:
            message = str(e)
            damaged = "damaged" in message or "checksum" in message or "expected" in message
            tally["damaged" if damaged else "other"] += 1
            examples.append(message[:200])
        except (KeyError, OSError, ValueError, IndexError) as e:
            tally["other"] += 1
            examples.append(f"{type(e).__name__}: {str(e)[:200]}")
    out.put((tally, examples[:5]))


def test_readers_racing_a_rebuilder_see_one_snapshot(tmp_path: Path) -> None:
    import lading

    sources = [str(_source(tmp_path / "a.tsv", "A")), str(_source(tmp_path / "b.tsv", "B"))]
    dest = str(tmp_path / "live.store")
    lading.build_store(sources[0], dest, progress=False)
    ctx = mp.get_context("spawn")
    stop, count, out = ctx.Event(), ctx.Value("i", 0), ctx.Queue()
    rebuilder = ctx.Process(target=_rebuild, args=(dest, sources, stop, count))
    readers = [ctx.Process(target=_read, args=(dest, stop, out)) for _ in range(2)]
    for p in [rebuilder, *readers]:
        p.start()
    time.sleep(RACE_S)
    stop.set()
    results = [out.get(timeout=120) for _ in readers]
    for p in [rebuilder, *readers]:
        p.join(timeout=120)
    total = {k: sum(r[0][k] for r in results) for k in results[0][0]}
    examples = [e for r in results for e in r[1]]
    log_reliability({"test": "snapshot_race", "seconds": RACE_S, "rebuilds": count.value, **total})
    print(f"{count.value} rebuilds; opens: {total}; examples: {examples}")
    assert count.value >= 3, f"the rebuilder made only {count.value} rebuilds"
    assert total["ok"] > 0
    assert total["mixed"] == 0, f"{total['mixed']} opens mixed two sources: {examples}"
    assert total["damaged"] == 0, f"{total['damaged']} intact stores called damaged: {examples}"
    assert total["other"] == 0, f"errors: {examples}"
