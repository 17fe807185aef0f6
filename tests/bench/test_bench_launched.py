"""lading bench launched by torchrun: the cells run across the launched processes.

The record-building and the world-size check are pure and tested here directly; the two-node
run (slow set) starts two torchrun "nodes" on this machine, each with its own cache.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

from conftest import TESTS
from lading.bench.cell import Cell
from lading.bench.launched import Coordinators, launched_record, merge_memory
from lading.bench.monitor import FIELDS
from lading.bench.stats import cell_load, merge_repeats, rankings
from lading.world import World


def report(rank: int, node: str, *, result: bool = True, peak: int = 100) -> dict[str, object]:
    memory = {
        "samples": 5,
        "processes": 1,
        **{f"{k}_{f}": peak for k in ("peak", "steady") for f in FIELDS},
        "per_process": [{"pid": rank, "role": "rank"}],
    }
    return {
        "rank": rank,
        "host": f"host{node}",
        "node": node,
        "result": {
            "rows": 100.0,
            "seconds": 2.0,
            "wait_s": 0.5,
            "synthetic_s": 1.0,
            "h2d_bytes_per_step": 10.0,
            "strategy_anon": 7.0,
            "store_anon": 3.0,
        }
        if result
        else None,
        "error": None if result else "Traceback: boom",
        "memory": memory,
        "over_budget": False,
        "exitcode": 0,
        "timed_out": False,
    }


def test_record_sums_ranks_and_gives_memory_per_node() -> None:
    cell = Cell("memory", 3, "train")
    reports = [report(0, "0", peak=100), report(1, "0", peak=50), report(2, "1", peak=30)]
    record = launched_record(cell, reports)  # type: ignore[arg-type]
    assert record["status"] == "ok" and record["nodes"] == 2
    assert record["samples_per_s"] == pytest.approx(150.0)  # 3 ranks x 100 rows / 2 s
    assert record["wait_share"] == pytest.approx(0.25)
    assert record["efficiency"] == pytest.approx(0.5)
    assert record["strategy_anon"] == 21.0 and len(record["ranks"]) == 3
    assert record["memory"]["peak_anon"] == 180
    assert record["memory"]["nodes"] == {"0": {"peak_anon": 150}, "1": {"peak_anon": 30}}


def test_one_failed_rank_makes_the_cell_an_error_naming_it() -> None:
    reports = [report(0, "0"), report(1, "1", result=False)]
    record = launched_record(Cell("packed", 2, "loader"), reports)  # type: ignore[arg-type]
    assert record["status"] == "error"
    assert record["reason"].startswith("rank 1 on host1: Traceback: boom")


def test_unmeasured_memory_is_said_not_invented() -> None:
    assert merge_memory([{"samples": 0}, {"samples": 0}], ["0", "1"]) == {"samples": 0}


def test_other_world_sizes_are_refused_with_the_way_out() -> None:
    coordinators = Coordinators(World(rank=0, world_size=4, local_world_size=2))
    coordinators.check_world_sizes([4])  # the launched size: fine
    with pytest.raises(ValueError, match=r"world size 4; --world-sizes asked for \[1, 2\]"):
        coordinators.check_world_sizes([1, 2, 4])


@pytest.mark.slow
def test_bench_across_two_nodes(tmp_path: Path) -> None:
    """Every cell at world size 2 over two nodes; each node made its data once, in its cache."""
    pytest.importorskip("matplotlib")
    sys.path.insert(0, str(TESTS / "train"))  # its folder: importable when run alone too
    from test_multinode import launch_two_nodes

    out = tmp_path / "shared" / "bench"
    bench = [
        sys.executable, "-m", "lading", "bench", "--passages", "2000",
        "--strategies", "memory,packed", "--steps", "3", "--warmup", "1", "--out", str(out),
        "--seconds", "0", "--repeats", "1",
    ]  # fmt: skip
    script = f"LADING_CACHE=$NODE_DIR/cache exec {shlex.join(bench)}"
    done = launch_two_nodes(
        ["--no-python", "bash", "-c", script], tmp_path, nproc=1, env={"LADING_SHARED_FS": "0"}
    )
    results = json.loads((out / "results.json").read_text())
    cells = results["cells"]
    assert [c["strategy"] for c in cells] == ["memory", "packed"]
    for cell in cells:
        assert cell["status"] == "ok", cell.get("reason")
        assert cell["world_size"] == 2 and cell["nodes"] == 2 and len(cell["ranks"]) == 2
        assert cell["samples_per_s"] > 0 and cell["memory"]["samples"] > 0
        assert set(cell["memory"]["nodes"]) == {"0", "1"}
    assert results["corpus"]["launch"]["world_size"] == 2
    report_md = (out / "report.md").read_text()
    assert "Launched by torchrun: 2 processes, 1 per node" in report_md
    # the dict costs every rank; the packed store's pages are shared, not copied per rank
    memory, packed = cells
    assert memory["store_anon"] > 4 * max(packed["store_anon"], 1)
    for node in (0, 1):  # once per node: each node's own cache holds the built store
        stores = tmp_path / f"node{node}" / "cache" / "bench" / "synth-passages-2000" / "stores"
        assert (stores / "packed" / "meta.json").is_file()
    assert "lading bench" in done[0].stdout + done[0].stderr  # the report, on rank 0 only
    assert "| memory" not in done[1].stdout


def test_a_collection_published_meanwhile_is_kept_not_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two nodes' builders over one shared cache: while this one synthesizes, the other
    publishes the collection. Its folder, which a reader may already hold, must stay."""
    import lading.bench.data as bench_data
    from lading.bench.synth import synth as real_synth

    monkeypatch.setenv("LADING_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "cache" / "bench" / "synth-passages-300"

    def racing_synth(kind: str, n: int, dest: Path) -> object:
        real_synth(kind, n, folder)  # the other node, first
        (folder / "in-use").write_text("a reader holds this folder")
        return real_synth(kind, n, dest)

    monkeypatch.setattr(bench_data, "synth", racing_synth)
    corpus, queries, qrels, run = bench_data.default_collection(300)
    assert (folder / "in-use").is_file()  # the first publication stands
    assert corpus.parent == folder and all(p.is_file() for p in (corpus, queries, qrels, run))
    assert [p.name for p in folder.parent.iterdir()] == [folder.name]  # no .tmp-* left over


def test_a_launched_bench_refuses_the_ram_disk_before_joining(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lading.bench import GridOptions, Settings, run_bench

    for name, value in {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    options = GridOptions(["packed"], [2], ["loader"], ramdisk=True)
    with pytest.raises(ValueError, match=r"--ramdisk .* across nodes it is not supported"):
        run_bench(options, Settings(), tmp_path / "out")


def test_a_launched_cell_records_the_load_it_started_at() -> None:
    # the rankings widen their band (or decide nothing) from each repeat's load1: a launched
    # record without it was ranked as if every node were idle
    reports = [
        {**report(0, "0"), "load1": 3.0, "cpus": 8},
        {**report(1, "1"), "load1": 7.0, "cpus": 8},
    ]
    record = launched_record(Cell("packed", 2, "loader"), reports)  # type: ignore[arg-type]
    assert (record["load1"], record["cpus"]) == (7.0, 8)
    merged = merge_repeats([record, {**record, "load1": 40.0}, record])
    assert cell_load(merged) == 40.0
    # on 2 CPUs a load of 40 is busy: the pair is not decided, whatever the medians
    other = merge_repeats([{**record, "strategy": "memory", "samples_per_s": 1.0}] * 3)
    (ranking,) = [r for r in rankings([merged, other], cpus=2) if r.scope.startswith("loader")]
    assert not ranking.decided and "busy" in ranking.why
