"""benchmarks/bench_peers.py's systems serve the same documents: each built from one TSV through
its own route, every id's text equal to the dict's; a peer that cannot be imported is skipped
with the reason the benchmark prints for its column."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import REPO

pytestmark = pytest.mark.e2e  # builds in subprocesses: seconds each


@pytest.fixture(scope="module")
def bench_peers(tmp_path_factory: pytest.TempPathFactory) -> object:
    import sys

    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import bench_peers
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    return bench_peers


@pytest.mark.parametrize("system", ["lading", "hf", "litdata", "mds"])
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
