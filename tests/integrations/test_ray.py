"""A Ray Data pipeline writes a store through ``LadingDatasink``: the same store by content as a
one-process build of the same rows (local ``ray.init(num_cpus=2)``, real worker processes)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from ray_cluster import ray_cluster

import lading
from conftest import word_tokenizer, write

pytestmark = pytest.mark.slow  # starts a local Ray cluster: ~10-20 s
ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    with ray_cluster():
        yield


def rows(n: int, first: int = 0) -> list[dict[str, str]]:
    words = ["alpha", "beta", "gamma", "delta"]
    out = []
    for i in range(first, first + n):
        row = {"id": f"d{i}", "text": " ".join(words[(i + k) % 4] for k in range(i % 7 + 1))}
        row["title"] = f"title {i}" if i % 3 == 0 else ""
        out.append(row)
    return out


def test_a_ray_pipeline_writes_the_store_a_one_process_build_writes(
    tmp_path: Path, local_ray: None
) -> None:
    from lading.integrations.ray import LadingDatasink

    data = rows(3000)
    src = write(tmp_path / "c.jsonl", "".join(json.dumps(r) + "\n" for r in data))
    tok = word_tokenizer(["alpha", "beta", "gamma", "delta"], tmp_path / "tok.json")
    one = lading.build_store(src, tmp_path / "one", tokenizer=tok, progress=False)
    sink = LadingDatasink(tmp_path / "ray.store", tokenizer=tok)
    ray.data.from_items(data).repartition(4).write_datasink(sink)
    store = lading.open_store(tmp_path / "ray.store")
    assert store.snapshot == sink.snapshot and len(store.meta["shards"]) >= 2
    ids = one.ids()
    assert store.ids() == ids and store.get_many(ids) == one.get_many(ids)
    assert [store.field(i, "title") for i in ids] == [one.field(i, "title") for i in ids]
    assert [t.tolist() for t in store.tokens_many(ids)] == [
        t.tolist() for t in one.tokens_many(ids)
    ]
    assert lading.stores.verify_store(tmp_path / "ray.store") == []


@pytest.mark.parametrize("where", ["global", "dataset"])
@pytest.mark.parametrize("kind", ["store", "tokens"])
def test_a_job_that_may_drop_a_failed_task_commits_nothing(
    tmp_path: Path, local_ray: None, kind: str, where: str
) -> None:
    """Ray's ``DataContext.max_errored_blocks`` > 0 lets a write task that raised be dropped
    and the job finish: both sinks committed 200 of 300 rows, one bad row costing its task's
    99 good ones, ``skipped: 0`` in the manifest (a review's repro). A lading sink commits
    every row once or nothing: such a job commits nothing, naming the setting, whether it
    is set for every dataset or on this one's own context (which a check of the driver's
    ``DataContext.get_current()`` missed)."""
    from lading.integrations.ray import LadingDatasink
    from lading.integrations.ray_tokens import LadingTokenDatasink

    data = rows(300)
    data[150]["text"] = None  # type: ignore[assignment]  # its task raises
    tok = word_tokenizer(["alpha", "beta", "gamma", "delta"], tmp_path / "tok.json")
    dest = tmp_path / "out"
    sink = LadingDatasink(dest) if kind == "store" else LadingTokenDatasink(dest, tok)
    ctx = ray.data.DataContext.get_current()
    before = ctx.max_errored_blocks
    if where == "global":
        ctx.max_errored_blocks = 1
    try:
        ds = ray.data.from_items(data).repartition(3)
        if where == "dataset":
            ds.context.max_errored_blocks = 1
        with pytest.raises(Exception, match="max_errored_blocks = 1"):
            ds.write_datasink(sink)
    finally:
        ctx.max_errored_blocks = before
    assert not (dest / "meta.json").exists()


def test_a_duplicate_across_tasks_commits_nothing(tmp_path: Path, local_ray: None) -> None:
    from lading.errors import StoreFormatError
    from lading.integrations.ray import LadingDatasink

    data = rows(200) + rows(1, first=5)  # d5 again, in the last block
    with pytest.raises(Exception, match="duplicate id 'd5'") as caught:
        ray.data.from_items(data).repartition(3).write_datasink(LadingDatasink(tmp_path / "s"))
    assert "shard" in str(caught.value)
    with pytest.raises(StoreFormatError):
        lading.open_store(tmp_path / "s")
    assert not (tmp_path / "s").exists()  # the job made it: an empty folder was left


def test_a_failed_job_leaves_a_folder_it_found_with_what_it_held(
    tmp_path: Path, local_ray: None
) -> None:
    from lading.integrations.ray import LadingDatasink

    ray.data.from_items(rows(50)).write_datasink(LadingDatasink(tmp_path / "s"))
    before = sorted(p.name for p in (tmp_path / "s").iterdir())
    data = rows(200) + rows(1, first=5)
    with pytest.raises(Exception, match="duplicate id 'd5'"):
        ray.data.from_items(data).repartition(3).write_datasink(LadingDatasink(tmp_path / "s"))
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == before
    assert len(lading.open_store(tmp_path / "s")) == 50


def test_parquet_sessions_written_by_ray_open_with_partitioned_parquet(
    tmp_path: Path, local_ray: None
) -> None:
    """Ray's own ``write_parquet`` (one file per write task, row groups of 50 rows) into a
    folder that ``PartitionedParquet`` reads: every session once, two ranks disjoint; a ragged
    list column padded as documented."""
    from collections import Counter

    from lading.tabular import PartitionedParquet
    from lading.world import World

    sessions = [
        {"session_id": i, "day": 178 + i % 3, "items": list(range(i % 5 + 1))} for i in range(600)
    ]
    folder = tmp_path / "sessions" / "train"
    ray.data.from_items(sessions).repartition(3).write_parquet(str(folder), row_group_size=50)
    assert len(list(folder.glob("*.parquet"))) == 3
    seen: Counter[int] = Counter()
    for rank in range(2):
        loader = PartitionedParquet(
            folder, batch_size=16, list_columns={"items": 4}, world=World(rank, 2), seed=1
        )
        for batch in loader:
            assert batch["items"].shape[1] == 4
            seen.update(int(s) for s in batch["session_id"])
    assert set(seen.values()) == {1} and len(seen) == 600
