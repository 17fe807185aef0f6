"""``lading bench``'s peer strategies (hf, mds, litdata): each built from the bench's collection
TSV by :func:`lading.bench.data.prepare`, opened the way a cell opens it, serves every id's
text as the TSV has it, and runs as a cell of the harness; a peer that cannot be imported here
is skipped with the reason the bench prints for its column."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from lading.bench.cell import Cell, Settings, open_strategy, run_cell
from lading.bench.data import BenchData, prepare
from lading.bench.peers import PEER_STRATEGIES, unavailable
from lading.bench.synth import synth

pytestmark = pytest.mark.e2e  # builds the peers' datasets, and one cell spawns a rank

PASSAGES = 300


def tsv_texts(corpus: Path) -> dict[str, str]:
    """The truth: ``id -> text`` of every line of the collection."""
    lines = corpus.read_text(encoding="utf-8").splitlines()
    return dict(line.split("\t", 1) for line in lines)  # type: ignore[misc]


@pytest.fixture(scope="module")
def bench_data(tmp_path_factory: pytest.TempPathFactory) -> BenchData:
    """A tiny collection with every importable peer prepared as ``lading bench`` does."""
    root = tmp_path_factory.mktemp("peers")
    files = synth("passages", PASSAGES, root / "synth", queries=10)
    peers = [s for s in PEER_STRATEGIES if unavailable(s) is None]
    return prepare(files.corpus, files.queries, files.qrels, None, root / "stores", peers)


def need(strategy: str) -> None:
    why = unavailable(strategy)
    if why is not None:
        pytest.skip(f"{strategy}: {why}")


@pytest.mark.slow  # a peer's own build and stack: ~5-7 s each
@pytest.mark.parametrize("strategy", PEER_STRATEGIES)
def test_a_peer_serves_the_tsvs_texts_by_id(bench_data: BenchData, strategy: str) -> None:
    """Every id's text, in request order, duplicates and int ids included; row codes agree;
    an absent id is refused naming it; a pickled store (a spawn worker's) serves the same."""
    need(strategy)
    truth = tsv_texts(bench_data.corpus)
    store = open_strategy(strategy, bench_data)
    ids = list(truth)
    assert len(store) == PASSAGES and store.ids() == ids and ids[5] in store
    asked = [*ids[::7], ids[3], ids[3], ids[-1]]
    assert store.get_many(asked) == [truth[i] for i in asked]
    numeric = next(i for i in ids if i.isdigit())
    assert store.get_many([int(numeric)]) == [truth[numeric]]
    rows = store.rows(asked)
    assert store.ids_at(rows) == asked and store.texts_at(rows) == store.get_many(asked)
    with pytest.raises(KeyError, match="nope"):
        store.get_many([ids[0], "nope"])
    again = pickle.loads(pickle.dumps(store))
    assert again.get_many(asked[:20]) == [truth[i] for i in asked[:20]]
    assert store.scan() == PASSAGES
    close = getattr(store, "close", None)  # what a bench rank calls before its os._exit
    if close is not None:
        close()


def test_a_finished_peer_build_is_kept(bench_data: BenchData, tmp_path: Path) -> None:
    """``prepare`` again reuses a finished build (the bench's work dir is keyed by its
    collection), and nothing is left beside it (no tmp folder, no cache)."""
    built = [s for s in PEER_STRATEGIES if unavailable(s) is None]
    if not built:
        pytest.skip("no peer is importable here")
    first = {s: bench_data.peer(s).stat().st_mtime_ns for s in built}
    work = bench_data.peer(built[0]).parent
    again = prepare(
        bench_data.corpus, bench_data.queries, bench_data.qrels, None, work, list(built)
    )
    assert {s: again.peer(s).stat().st_mtime_ns for s in built} == first
    assert sorted(p.name for p in work.iterdir() if p.name.split(".")[0] in built) == sorted(built)


@pytest.mark.slow  # a peer's own build and stack: ~5-7 s each
@pytest.mark.parametrize("strategy", PEER_STRATEGIES)
def test_a_peer_runs_as_a_bench_cell(bench_data: BenchData, strategy: str) -> None:
    """One rank through the harness: a measured window, and the id map in the rank's memory."""
    need(strategy)
    settings = Settings(seconds=0.0, steps=2, warmup=1, repeats=1, batch_size=4)
    record = run_cell(Cell(strategy, 1, "loader"), settings, bench_data, budget=None)
    assert record["status"] == "ok", record.get("reason")
    assert record["samples_per_s"] > 0 and record["store_anon"] > 0
    assert record["memory"]["samples"] > 0


def test_a_peer_that_cannot_run_is_a_skipped_column_with_its_reason(
    bench_data: BenchData, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--strategies memory,mds`` where mds cannot be imported: the grid runs the others, and
    the report names mds with the reason (here a stand-in reason, so the test runs anywhere)."""
    import json

    import lading.bench
    from lading.cli import main

    pytest.importorskip("matplotlib")
    monkeypatch.setattr(
        lading.bench, "unavailable", lambda s: "no mds here" if s == "mds" else None
    )
    monkeypatch.setenv("LADING_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "out"
    args = ["bench", "--strategies", "memory,mds", "--world-sizes", "1", "--modes", "loader"]
    args += ["--steps", "2", "--warmup", "1", "--seconds", "0", "--repeats", "1", "--out", str(out)]
    args += ["--corpus", str(bench_data.corpus), "--queries", str(bench_data.queries)]
    assert main([*args, "--qrels", str(bench_data.qrels)]) == 0
    results = json.loads((out / "results.json").read_text())
    assert [c["strategy"] for c in results["cells"]] == ["memory"]
    assert "Skipped: mds (no mds here)" in (out / "report.md").read_text()
