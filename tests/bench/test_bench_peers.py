"""benchmarks/bench_peers.py's systems serve the same documents: each built from one TSV through
its own route, every id's text equal to the dict's; a peer that cannot be imported is skipped
with the reason the benchmark prints for its column."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

pytestmark = pytest.mark.e2e  # builds in subprocesses: seconds each


@pytest.fixture(scope="module")
def bench_peers(tmp_path_factory: pytest.TempPathFactory) -> object:
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import bench_peers
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    return bench_peers


@pytest.fixture(scope="module")
def systems(bench_peers: object) -> object:
    return sys.modules["peers_systems"]


PEERS_SLOW = pytest.mark.slow  # a peer's build in its own stack, ~10 s (lading's: by default)


@pytest.mark.parametrize(
    "system", ["lading", *(pytest.param(s, marks=PEERS_SLOW) for s in ("hf", "litdata", "mds"))]
)
def test_each_system_serves_the_dicts_texts(
    bench_peers: object, system: str, tmp_path: Path
) -> None:
    from lading.bench.synth import synth

    peers = bench_peers
    why = peers.unavailable(system)  # type: ignore[attr-defined]
    if why is not None:
        pytest.skip(f"{system} is not importable here: {why}")
    tsv = synth("passages", 300, tmp_path / "synth", queries=5).corpus
    # built as the benchmark builds: in a fresh process (litdata's workers import the builder)
    built = peers.child("build", system, str(tsv), str(tmp_path / system))  # type: ignore[attr-defined]
    assert built["build_s"] > 0 and built["disk_mib"] > 0
    reader = peers.Reader(system, tsv, tmp_path / system)  # type: ignore[attr-defined]
    truth = peers.Reader("dict", tsv, tmp_path / "none")  # type: ignore[attr-defined]
    ids = [line.split("\t", 1)[0] for line in tsv.read_text().splitlines()]
    batch = ids[::7][:64]
    assert reader.get(batch) == truth.get(batch)
    assert reader.scan() == truth.scan() == 300


def test_the_bench_hf_strategy_serves_the_dicts_texts(tmp_path: Path) -> None:
    """``lading bench --strategies hf``'s store: every id's text, a missing id refused."""
    pytest.importorskip("datasets")
    from lading.bench.peers import HFDatasetStore, build_hf
    from lading.bench.synth import synth
    from lading.stores import InMemoryStore

    tsv = synth("passages", 200, tmp_path / "synth", queries=5).corpus
    store = HFDatasetStore(build_hf(tsv, tmp_path / "hf"))
    truth = InMemoryStore.from_source(tsv)
    ids = truth.ids()
    assert len(store) == 200 and store.ids() == ids and ids[3] in store
    assert store.get_many(ids[::9]) == truth.get_many(ids[::9])
    with pytest.raises(KeyError, match="nope"):
        store.get_many(["nope"])


@pytest.mark.parametrize(
    "system", ["lading", *(pytest.param(s, marks=PEERS_SLOW) for s in ("hf", "litdata"))]
)
def test_each_system_serves_the_same_token_ids(
    bench_peers: object, systems: object, system: str, tmp_path: Path
) -> None:
    """Built with the benchmark's tokenizer, every system's token ids of a batch are lading's
    (the dict's are copied from lading's store), capped at the same 512."""
    from lading.bench.synth import synth

    peers = bench_peers
    why = peers.unavailable(system)  # type: ignore[attr-defined]
    if why is not None:
        pytest.skip(f"{system} is not importable here: {why}")
    tsv = synth("passages", 300, tmp_path / "synth", queries=5).corpus
    tok = peers.tokenizer_for(tsv, tmp_path)  # type: ignore[attr-defined]
    for name in {"lading", system}:
        built = peers.child("build-tokens", name, str(tsv), str(tmp_path / name), tok)  # type: ignore[attr-defined]
        assert built["tok_build_s"] > 0 and built["tok_disk_mib"] > 0
    ids = [line.split("\t", 1)[0] for line in tsv.read_text().splitlines()][::7][:64]
    reader = systems.Reader(system, tsv, tmp_path / system, tokens=True)  # type: ignore[attr-defined]
    truth = systems.Reader("dict", tsv, tmp_path / "lading", tokens=True)  # type: ignore[attr-defined]
    got, want = reader.get(ids), truth.get(ids)
    assert [list(map(int, g)) for g in got] == [w.tolist() for w in want]
    assert all(0 < len(w) <= 512 for w in want)


def test_the_cold_drop_empties_the_page_cache(systems: object, tmp_path: Path) -> None:
    """``drop_cache`` evicts a store's files without root: mincore sees none of their pages."""
    data = tmp_path / "store" / "data.bin"
    data.parent.mkdir()
    data.write_bytes(bytes(range(256)) * 4096 * 4)  # 4 MiB, dirty in the page cache
    assert systems.resident_fraction(data.parent) > 0.9  # type: ignore[attr-defined]
    systems.drop_cache(data.parent)  # type: ignore[attr-defined]
    assert systems.resident_fraction(data.parent) < 0.05  # type: ignore[attr-defined]
    data.read_bytes()
    assert systems.resident_fraction(data.parent) > 0.9  # type: ignore[attr-defined]


@pytest.mark.slow  # every peer in fresh processes, each importing its stack: ~3 min
def test_a_tiny_run_reports_every_measure(tmp_path: Path) -> None:
    """The whole benchmark at 300 passages, once: every system's column, every measure's row,
    the ratios, and the results file (not the tracked RESULTS.md: no --write)."""
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "bench_peers.py"), "--passages", "300",
         "--repeats", "1", "--seconds", "0.05", "--out", str(out)],
        capture_output=True, text=True, check=False, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())["results"]
    measures = ["build_s", "disk_mib", "peak_rss_mib", "tok_build_s", "tok_lookups_per_s"]
    measures += ["cold_lookups_per_s", "tok_cold_lookups_per_s", "scan_per_s", "anon_mib"]
    for key in measures:
        assert results["lading"][key][0] > 0, key
    assert results["lading"]["cold_resident_pct"][0] < 50
    assert "| token-id lookups, 64/batch, cold, docs/s |" in done.stdout
    assert "hf / lading" in done.stdout or "hf: skipped" in done.stdout
