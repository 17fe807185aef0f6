"""PartitionedParquet and repartition: equal, disjoint, complete shares; padding; resume."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from contracts import assert_elastic, forked
from distributed import free_port
from lading.tabular import PartitionedParquet, repartition
from lading.tabular.pad import pad_lists
from lading.world import World
from sessions_files import write_sessions

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def rank_batches(paths: Any, world_size: int, workers: int, **kwargs: Any) -> list[list[dict]]:  # type: ignore[type-arg]
    out = []
    for rank in range(world_size):
        ds = PartitionedParquet(
            paths, batch_size=5, list_columns={"items": 6}, world=World(rank, world_size),
            num_workers=workers, multiprocessing_context="fork", **kwargs,
        )  # fmt: skip
        out.append(list(ds))
    return out


@pytest.mark.parametrize("row_groups", [1, 3, 7])
@pytest.mark.parametrize("workers", [0, forked(1), forked(2)])
@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 5])
def test_exact_partition(tmp_path: Path, row_groups: int, workers: int, world_size: int) -> None:
    rows = 53
    path = write_sessions(tmp_path / "s.parquet", rows, row_groups)
    per_rank = rank_batches(path, world_size, workers, equalize="truncate")
    assert len({len(b) for b in per_rank}) == 1, [len(b) for b in per_rank]
    assert all(len(b) > 0 for b in per_rank)  # no rank is ever empty
    seen = Counter(int(s) for batches in per_rank for b in batches for s in b["session_id"])
    readers = world_size  # one share a rank, whatever its workers
    assert all(c == 1 for c in seen.values())  # disjoint
    assert len(seen) == rows - rows % readers  # complete up to the documented truncation


def test_pad_mode_repeats_at_most_readers_minus_one(tmp_path: Path) -> None:
    path = write_sessions(tmp_path / "s.parquet", 53, 3)
    per_rank = rank_batches(path, 4, 0, equalize="pad")
    seen = Counter(int(s) for batches in per_rank for b in batches for s in b["session_id"])
    assert set(seen) == set(range(53)) and sum(seen.values()) == 56  # ceil(53 / 4) * 4


def test_list_columns_padded_and_truncated_exactly(tmp_path: Path) -> None:
    path = write_sessions(tmp_path / "s.parquet", 40, 2)
    source = pq.read_table(path).to_pydict()
    for pad in ("right", "left"):
        ds = PartitionedParquet(
            path, batch_size=7, list_columns={"items": 6}, pad=pad, world=World(), pad_value=-1
        )
        for batch in ds:
            assert batch["score"].dtype == torch.float32  # scalar columns keep their dtype
            assert batch["session_id"].dtype == torch.int64
            for sid, row, length in zip(
                batch["session_id"].tolist(),
                batch["items"].tolist(),
                batch["items_lengths"].tolist(),
            ):
                items = source["items"][sid][-6:]  # truncation keeps the most recent items
                assert length == len(items)
                expected = (
                    items + [-1] * (6 - len(items))
                    if pad == "right"
                    else ([-1] * (6 - len(items)) + items)
                )
                assert row == expected


def test_epochs_reshuffle_identically_on_every_rank(tmp_path: Path) -> None:
    path = write_sessions(tmp_path / "s.parquet", 60, 3)

    def order(rank: int, epoch: int) -> list[int]:
        ds = PartitionedParquet(
            path, batch_size=4, list_columns={"items": 3}, world=World(rank, 2), seed=3
        )
        ds.set_epoch(epoch)
        return [int(s) for b in ds for s in b["session_id"]]

    assert order(0, 1) == order(0, 1)  # deterministic in (seed, epoch)
    assert order(0, 0) != order(0, 1)  # and different across epochs
    assert set(order(0, 1)).isdisjoint(order(1, 1))


@pytest.mark.parametrize("workers", [0, forked(2)])
def test_resume_mid_epoch(tmp_path: Path, workers: int) -> None:
    path = write_sessions(tmp_path / "s.parquet", 90, 4)

    def make() -> Any:
        loader = PartitionedParquet(
            path, batch_size=4, list_columns={"items": 3}, world=World(1, 2), seed=5,
            buffer_rows=16, num_workers=workers, multiprocessing_context="fork",
        )  # fmt: skip
        loader.set_epoch(2)
        return loader

    ids = lambda batch: batch["session_id"].tolist()  # noqa: E731
    full = [ids(b) for b in make()]
    first = make()
    head = []
    for b in first:
        head.append(ids(b))
        if len(head) == 3:
            break
    resumed = make()
    resumed.load_state_dict(first.state_dict())
    assert head + [ids(b) for b in resumed] == full


def session_batches(loader: Any) -> list[list[int]]:
    return [b["session_id"].tolist() for b in loader]


@pytest.mark.parametrize("workers", [forked(1), forked(2), forked(3)])
def test_batches_do_not_depend_on_num_workers(tmp_path: Path, workers: int) -> None:
    """The same batches at any worker count, as the map and LM loaders give ([256, 256, 88]
    at 0 workers was [256, 256, 44, 44] at 2: steps and losses changed with a performance
    knob), so a state saved with one count resumes bitwise with another."""
    path = write_sessions(tmp_path / "s.parquet", 203, 5)

    def make(num_workers: int) -> Any:
        made = PartitionedParquet(
            path, batch_size=7, list_columns={"items": 3}, world=World(1, 2), seed=5,
            buffer_rows=30, num_workers=num_workers, multiprocessing_context="fork",
        )  # fmt: skip
        made.set_epoch(1)
        return made

    want = session_batches(make(0))
    assert session_batches(make(workers)) == want
    head = make(workers)
    for taken, _ in enumerate(head, 1):
        if taken == 4:
            break
    assert head.state_dict()["layout"] == make(0).state_dict()["layout"]
    resumed = make(0)
    resumed.load_state_dict(head.state_dict())
    assert session_batches(resumed) == want[4:]


@pytest.mark.parametrize("workers", [forked(2), forked(3)])
def test_each_chunk_is_decoded_by_one_worker(
    tmp_path: Path, workers: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chunk's batches go to one worker: every chunk is read from the files once an epoch
    (were its batches handed to the workers in turn, each worker would decode each chunk)."""
    import os

    from lading.tabular.read import RowReader

    path = write_sessions(tmp_path / "s.parquet", 240, 6)
    log = tmp_path / "reads.log"
    read = RowReader.read

    def logged(self: Any, share: Any, step: int | None = None) -> Any:
        with open(log, "a") as out:  # one short line per read, appended from each worker
            out.write(
                f"{os.getpid()} {[(f.piece.row_group, f.start, f.stop) for f in share.fragments]}\n"
            )
        return read(self, share, step)

    monkeypatch.setattr(RowReader, "read", logged)
    loader = PartitionedParquet(
        path, batch_size=5, list_columns={"items": 3}, world=World(0, 1), seed=2,
        buffer_rows=20, num_workers=workers, multiprocessing_context="fork",
    )  # fmt: skip
    assert len(session_batches(loader)) == 48
    reads = [line.split(" ", 1) for line in log.read_text().splitlines()]
    chunks = [chunk for _, chunk in reads]
    assert len(chunks) == len(set(chunks)) == 12, reads  # 240 rows / 20: each read once
    assert len({pid for pid, _ in reads}) == workers  # and every worker read some


def test_an_older_state_of_one_reader_a_rank_resumes_bitwise(tmp_path: Path) -> None:
    """States saved when each worker read a share of its own name ``num_workers`` in their
    layout; with 0 (or 1) workers those are the rows read now, so they resume bitwise."""
    path = write_sessions(tmp_path / "s.parquet", 90, 4)

    def make() -> Any:
        made = PartitionedParquet(
            path, batch_size=4, list_columns={"items": 3}, world=World(1, 2), seed=5,
            buffer_rows=16,
        )  # fmt: skip
        made.set_epoch(2)
        return made

    want = session_batches(make())
    head = make()
    for taken, _ in enumerate(head, 1):
        if taken == 3:
            break
    state = head.state_dict()
    older = {**state, "layout": {**state["layout"], "num_workers": 0}}
    resumed = make()
    resumed.load_state_dict(older)
    assert session_batches(resumed) == want[3:]


def test_an_older_state_of_two_readers_a_rank_halfway_is_not_at_its_epochs_end(
    tmp_path: Path,
) -> None:
    """A state saved when each of 2 workers read a share of its own counts the rank's
    batches over both: at one worker's batch count it is halfway through the epoch, not at
    its end, and its other half is read after the resume (not skipped to the next epoch)."""
    path = write_sessions(tmp_path / "s.parquet", 90, 4)

    def make(rank: int) -> Any:
        return PartitionedParquet(
            path, batch_size=4, list_columns={"items": 3}, world=World(rank, 2), seed=5,
            buffer_rows=16,
        )  # fmt: skip

    state = make(0).state_dict()
    per_worker = -(-90 // 4 // 4)  # 90 rows over 2 ranks x 2 workers, 4 rows a batch: 6
    older = {**state, "epoch": 2, "batches": per_worker}
    older["layout"] = {**state["layout"], "num_workers": 2}
    read = set()
    for rank in range(2):
        resumed = make(rank)
        resumed.load_state_dict(older)
        assert resumed.epoch == 2
        read.update(row for batch in session_batches(resumed) for row in batch)
    assert 30 <= len(read) <= 60, f"{len(read)} rows read after a halfway state of 90"


@pytest.mark.parametrize(("old", "new"), [(4, 2), (2, 3), (3, 1)])
@pytest.mark.parametrize("workers", [0, forked(2)])
def test_elastic_resume_reads_every_row_once(
    tmp_path: Path, old: int, new: int, workers: int
) -> None:
    rows = 211
    path = write_sessions(tmp_path / "s.parquet", rows, 5)

    def make(world: World, num_workers: int) -> Any:
        return PartitionedParquet(
            path, batch_size=3 if world.world_size == old else 5, list_columns={"items": 2},
            world=world, seed=8, buffer_rows=16, equalize="pad", num_workers=num_workers,
            multiprocessing_context="fork",
        )  # fmt: skip

    readers = new
    key = lambda batch: batch["session_id"].tolist()  # noqa: E731
    assert_elastic(make, old, new, workers, 3, rows, key, max_repeats=readers - 1, epoch=1)


@pytest.mark.slow  # chains of elastic resumes: ~3.5 s each
@pytest.mark.parametrize("equalize", ["pad", "truncate"])
def test_chained_elastic_resumes(tmp_path: Path, equalize: str) -> None:
    """4 ranks x 2 workers, then 2 x 0, then 3 x 1 with other batch sizes, then the same
    layout again: rows read once each (truncate may leave out fewer than the last readers)."""
    rows = 300
    path = write_sessions(tmp_path / "s.parquet", rows, 6)
    layouts = [(4, 2, 4, 3), (2, 0, 7, 5), (3, 1, 2, 9), (3, 1, 2, None)]
    seen: Counter[int] = Counter()
    state: dict[str, Any] | None = None
    for world_size, workers, batch, stop in layouts:
        states = []
        for rank in range(world_size):
            loader = PartitionedParquet(
                path, batch_size=batch, list_columns={"items": 2}, world=World(rank, world_size),
                seed=3, buffer_rows=20, equalize=equalize, num_workers=workers,
                multiprocessing_context="fork",
            )  # fmt: skip
            loader.set_epoch(0)
            if state is not None:
                loader.load_state_dict(state)
            for taken, b in enumerate(loader, 1):
                seen.update(b["session_id"].tolist())
                if taken == stop:
                    break
            states.append(loader.state_dict())
        assert all(x == states[0] for x in states)
        state = states[0]
    last_readers = layouts[-1][0]
    if equalize == "pad":
        assert set(seen) == set(range(rows))
        assert sum(seen.values()) - rows < last_readers
    else:
        assert max(seen.values()) == 1
        assert rows - len(seen) < last_readers


def test_impossible_requests_fail_at_construction(tmp_path: Path) -> None:
    path = write_sessions(tmp_path / "s.parquet", 3, 1)
    with pytest.raises(ValueError, match=r"3 rows cannot give each of 4 readers"):
        PartitionedParquet(
            path, batch_size=2, list_columns={"items": 2}, equalize="truncate", world=World(0, 4)
        )
    with pytest.raises(ValueError, match="is a list column"):
        PartitionedParquet(path, batch_size=2, world=World())
    with pytest.raises(ValueError, match="no column 'nope'"):
        PartitionedParquet(path, columns=["nope"], batch_size=2, world=World())


def test_bad_files_are_lading_errors_naming_the_file(tmp_path: Path) -> None:
    """A review: files that are not parquet, that lack a column or differ from the others
    raised a bare ValueError, which an ``except lading.LadingError`` missed."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from lading import LadingError, ParquetError

    path = write_sessions(tmp_path / "s.parquet", 3, 1)
    junk = tmp_path / "junk" / "x.parquet"
    junk.parent.mkdir()
    junk.write_bytes(b"not parquet")
    other = tmp_path / "o.parquet"
    pq.write_table(pq.read_table(path).drop_columns(["items"]), other)
    floats = tmp_path / "f.parquet"
    table = pq.read_table(path)
    sid = table.column("session_id").cast(pa.float64())
    pq.write_table(table.set_column(0, "session_id", sid), floats)
    cases = [
        ([junk], {}, "x.parquet is not a parquet file"),
        ([path], {"columns": ["nope"]}, "no column 'nope'"),
        ([path, floats], {"list_columns": {"items": 2}}, "f.parquet does not match"),
        ([other], {"list_columns": {"items": 2}}, "no column 'items'"),
    ]
    for paths, kw, said in cases:
        with pytest.raises(ParquetError, match=said) as caught:
            PartitionedParquet(paths, batch_size=2, world=World(), **kw)
        assert isinstance(caught.value, LadingError) and isinstance(caught.value, ValueError)


def test_pad_lists_keeps_the_most_recent_items() -> None:
    values = np.array([1, 2, 3, 4, 5, 6, 7])
    offsets = np.array([0, 5, 5, 7])
    padded, lengths = pad_lists(values, offsets, 3, "left", fill=0)
    assert padded.tolist() == [[3, 4, 5], [0, 0, 0], [0, 6, 7]] and lengths.tolist() == [3, 0, 2]


def test_repartition_streams_into_a_multiple_and_keeps_metadata(tmp_path: Path) -> None:
    a = write_sessions(tmp_path / "in" / "a.parquet", 30, 1)
    write_sessions(tmp_path / "in" / "b.parquet", 23, 2, seed=1)
    report = repartition(tmp_path / "in", tmp_path / "out", world_size=3, workers=2)
    assert report.rows == 53 and report.row_groups_after % 6 == 0
    out = pq.ParquetFile(tmp_path / "out" / "part-0.parquet")
    assert out.metadata.num_row_groups == report.row_groups_after
    assert out.schema_arrow.metadata[b"origin"] == b"test"
    sizes = [out.metadata.row_group(i).num_rows for i in range(out.metadata.num_row_groups)]
    assert max(sizes) - min(sizes) <= 1
    got = pq.read_table(tmp_path / "out").to_pydict()
    want = pq.read_table(tmp_path / "in").to_pydict()
    assert got["session_id"] == want["session_id"] and got["items"] == want["items"]
    assert json.loads((tmp_path / "out" / "_lading.json").read_text())["report"]["rows"] == 53
    del a


@pytest.mark.slow
def test_lading_train_sessions_with_two_ranks(tmp_path: Path) -> None:
    data = tmp_path / "days"
    for day in (1, 2, 3):
        for split, rows in (("train", 120), ("valid", 20), ("test", 20)):
            write_sessions(data / str(day) / f"{split}.parquet", rows, 2, seed=day)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            "2",
            "--master_port",
            str(free_port()),
            "-m",
            "lading",
            "train",
            "sessions",
            "--data",
            str(data),
            "--train-days",
            "1,2",
            "--eval-day",
            "3",
            "--out",
            str(tmp_path / "out"),
            "--column",
            "items",
            "--max-len",
            "6",
            "--batch-size",
            "16",
            "--epochs",
            "2",
            "--dim",
            "16",
            "--log-every",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["steps"] > 0
    assert 0 <= summary["model"]["recall@20"] <= 1 and summary["most_popular"]["sessions"] > 0


@pytest.mark.e2e  # whole training runs (lading train sessions)
@pytest.mark.parametrize("stop", [5, 8])
def test_lading_train_sessions_resumed_gives_the_uninterrupted_losses(
    tmp_path: Path, stop: int
) -> None:
    """Stopped mid-epoch (step 5) or at the end of the epoch (step 8) and resumed: the later
    steps have the losses of an unbroken run."""
    from lading.tabular.train import SessionsConfig, train_sessions

    data = tmp_path / "days"
    for day in (1, 2):
        for split, rows in (("train", 60), ("valid", 10), ("test", 10)):
            write_sessions(data / str(day) / f"{split}.parquet", rows, 2, seed=day)

    def run(out: str, steps: int, **extra: Any) -> dict[int, float]:
        config = SessionsConfig(
            data=data, out=tmp_path / out, train_days=[1], eval_day=2, column="items", max_len=6,
            batch_size=8, steps=steps, dim=8, heads=2, parallel="none", log_every=1,
            progress=False, **extra,
        )  # fmt: skip
        train_sessions(config)
        lines = (tmp_path / out / "log.jsonl").read_text().splitlines()
        return {r["step"]: r["loss"] for r in map(json.loads, lines)}

    want = run("reference", 12)
    assert len(want) == 12 and len(set(want.values())) > 1
    first = run("resumed", stop, checkpoint_every=stop)  # 60 rows: 8 batches an epoch
    assert first == {s: want[s] for s in range(1, stop + 1)}
    got = run("resumed", 12, checkpoint_every=stop, resume=True)
    assert got == want  # the resumed run appended the later steps to the log


@pytest.mark.parametrize("workers", [0, 2])
def test_a_second_elastic_state_loaded_into_one_loader_reads_its_own_rows(
    tmp_path: Path, workers: int
) -> None:
    """Rolling back to another checkpoint in the same process: two elastic states both resume
    as the epoch's segment 1, and the chunk cached for the first (keyed by epoch, segment,
    reader and chunk, not by its rows) served the second's batches (29 of 293 rows read twice,
    others never)."""
    path = write_sessions(tmp_path / "s.parquet", 293, 7)

    def make(world: World, batch: int, buffer: int, num_workers: int = 0) -> Any:
        return PartitionedParquet(
            path, batch, list_columns={"items": 2}, world=world, seed=11, buffer_rows=buffer,
            num_workers=num_workers, persistent_workers=num_workers > 0,
            multiprocessing_context="fork",
        )  # fmt: skip

    def state_after(k: int) -> dict[str, Any]:  # 2 ranks, batches of 8, stopped after k
        loader = make(World(0, 2), 8, 24)
        loader.set_epoch(0)
        for i, _ in enumerate(loader, 1):
            if i == k:
                break
        return loader.state_dict()

    first, second = state_after(3), state_after(5)
    fresh = make(World(0, 3), 7, 21)
    fresh.load_state_dict(second)
    want = [b["session_id"].tolist() for b in fresh]
    loader = make(World(0, 3), 7, 21, workers)
    loader.load_state_dict(first)
    next(iter(loader))
    loader.load_state_dict(second)
    assert [b["session_id"].tolist() for b in loader] == want
