"""Ranks of a process group whose loaders plan other epochs are refused at the first pass,
naming what differs; ranks that agree read as before. Real processes in a gloo group."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from distributed import run_processes

pytestmark = pytest.mark.slow  # two spawned ranks in a gloo group: ~5 s a case
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def _days(folder: Path) -> list[str]:
    """Three parquet files of 40, 70 and 25 rows (ids 0..134), in path order."""
    files, start = [], 0
    for name, rows in (("a", 40), ("b", 70), ("c", 25)):
        path = folder / f"{name}.parquet"
        ids = list(range(start, start + rows))
        pq.write_table(pa.table({"id": ids}), path, row_group_size=16)
        files.append(str(path))
        start += rows
    return files


def _read(rank: int, world: int, files: list[str], case: str) -> Any:
    """One epoch of ``files`` as this rank sees them (``case``: how rank 1's differ)."""
    import torch.distributed as dist

    from lading.errors import RanksDisagreeError
    from lading.tabular import PartitionedParquet

    mine = list(files)
    batch = 8
    if rank == 1 and case == "order":
        mine.reverse()  # a listing's order, not sorted
    elif rank == 1 and case == "subset":
        mine = mine[:-1]  # one node's copy lacks a file
    elif rank == 1 and case == "batch":
        batch = 16
    loader = PartitionedParquet(mine, batch, shuffle=True, seed=3)
    try:
        ids = [int(i) for b in loader for i in b["id"]]
    except RanksDisagreeError as e:
        return ("refused", str(e))
    counts = [0] * world
    dist.all_gather_object(counts, len(ids))  # the DDP step that would hang at uneven counts
    return ("read", sorted(ids), counts)


@pytest.mark.parametrize("case", ["order", "subset", "batch"])
def test_ranks_whose_loaders_plan_other_epochs_are_refused_at_the_first_pass(
    tmp_path: Path, case: str
) -> None:
    """Rank 1 given the files in another order read 1,344 of 3,506 rows twice and left as
    many unread, without a word; given one file fewer, its batch count differed (28 and 17)
    and the job hung at the first collective after rank 1's last batch. Both ranks are
    refused before any batch, naming what differs and the fix."""
    results = run_processes(_read, 2, _days(tmp_path), case, timeout=120)
    for rank, (status, said) in enumerate(results):
        assert status == "refused", (rank, results[rank])
        what = "batch_size" if case == "batch" else "data"
        assert f"layout.{what}" in said or f"fingerprint.{what}" in said or what in said, said
        assert "on rank 0 (" in said and "on rank 1 (" in said, said
        import socket

        assert said.count(f"host {socket.gethostname()}") == 2, said  # which node holds which
        assert "sorted(glob.glob(...))" in said, said


def test_ranks_that_agree_read_disjoint_complete_shares_as_before(tmp_path: Path) -> None:
    results = run_processes(_read, 2, _days(tmp_path), "same", timeout=120)
    (s0, ids0, counts0), (s1, ids1, _) = results
    assert s0 == s1 == "read" and counts0[0] == counts0[1]
    # every row, once but for the one equalize="pad" repeats (135 rows over 2 ranks)
    assert set(ids0) | set(ids1) == set(range(135)) and len(ids0) == len(ids1) == 68


class _Copy:
    """A map dataset whose identity names its copy (a store's snapshot, an HF dataset's
    fingerprint drawn at random after an unhashable transform): another on every rank."""

    def __init__(self, rank: int) -> None:
        self.rank = rank

    def __len__(self) -> int:
        return 50

    def __getitem__(self, i: int) -> int:
        return i

    def data_fingerprint(self) -> str:
        return f"copy-of-rank-{self.rank}"


def _read_copies(rank: int, world: int) -> list[int]:
    import lading

    return [int(i) for b in lading.loader(_Copy(rank), 5, seed=1) for i in b]


def test_map_datasets_whose_identity_names_a_copy_are_compared_by_length_and_settings() -> None:
    """An HF dataset mapped with a function ``datasets`` cannot hash gets a random fingerprint
    in each process; a store built on each node's disk, another snapshot: the same data,
    refused as "other files" by the first version of this check."""
    first, second = run_processes(_read_copies, 2, timeout=120)
    assert sorted(first + second) == list(range(50)) and len(first) == len(second)


def _read_groups(rank: int, world: int, case: str) -> Any:
    """One epoch of TrainingGroups over an in-memory store (``case``: how rank 1's differ)."""
    import lading
    from lading.errors import RanksDisagreeError
    from lading.ir import TrainingGroups

    store = lading.InMemoryStore({f"d{i}": f"text {i}" for i in range(60)})
    queries = {f"q{i}": f"query {i}" for i in range(12)}
    qrels = {f"q{i}": {f"d{i}": 1} for i in range(12)}
    run = {f"q{i}": [f"d{(i + k) % 60}" for k in range(1, 9)] for i in range(12)}
    size, seed = 4, 0
    if rank == 1 and case == "group_size":
        size = 5
    elif rank == 1 and case == "seed":
        seed = 1
    elif rank == 1 and case == "run":
        run = {q: docs[::-1] for q, docs in run.items()}
    groups = TrainingGroups(store, queries, qrels, run, group_size=size, seed=seed)
    try:
        return ("read", [b for b in lading.loader(groups, 3, seed=1, collate_fn=list)])
    except RanksDisagreeError as e:
        return ("refused", str(e))


@pytest.mark.parametrize("case", ["group_size", "seed", "run"])
def test_training_groups_of_other_settings_or_negatives_are_refused(case: str) -> None:
    """Rank 1 with groups of 5 where rank 0 made groups of 4, another groups seed or another
    run file (the negatives): both read 50 batches of other groups without a word (a review's
    find), since a map dataset was compared by length and settings only. TrainingGroups tells
    the loader what every rank holds alike (``ranks_fingerprint``: its settings and groups,
    not the store's copy), and such ranks are refused."""
    results = run_processes(_read_groups, 2, case, timeout=120)
    for rank, (status, said) in enumerate(results):
        assert status == "refused", (rank, results[rank])
        assert "fingerprint.data" in said, said


def test_training_groups_alike_on_every_rank_read_as_before() -> None:
    (s0, b0), (s1, b1) = run_processes(_read_groups, 2, "same", timeout=120)
    assert s0 == s1 == "read" and len(b0) == len(b1) and b0 != b1


def test_a_backend_without_a_store_reads_as_before(tmp_path: Path) -> None:
    """The ``fake`` backend (and MPI) has no key-value store to compare through: the first
    pass raised "Not implemented" from the store; it reads, unchecked."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from lading.tabular import PartitionedParquet

    dist.init_process_group("fake", rank=1, world_size=4, store=FakeStore())
    try:
        loader = PartitionedParquet(_days(tmp_path), 8, shuffle=False)
        assert len([b for b in loader]) == len(loader) > 0
    finally:
        dist.destroy_process_group()


def _old_beside_new(rank: int, world: int, same: bool) -> str:
    """Rank 1 posts as a lading of before this change did (the plan alone, under its key);
    rank 0 checks with this one."""
    import json

    from torch.distributed.distributed_c10d import _get_default_store

    from lading.errors import RanksDisagreeError
    from lading.loading.agree import check_ranks_agree

    plan = {"kind": "map", "layout": {"batch_size": 8, "world_size": 2}}
    if rank == 1:
        theirs = plan if same else {**plan, "layout": {"batch_size": 4, "world_size": 2}}
        _get_default_store().set("lading/agree/0/1", json.dumps(theirs, sort_keys=True))
        return "posted"
    try:
        check_ranks_agree(plan, 0, 2)
    except RanksDisagreeError as e:
        return f"refused: {e}"
    return "agreed"


@pytest.mark.parametrize("same", [True, False])
def test_a_rank_of_an_older_lading_is_checked_as_before(same: bool) -> None:
    """The hosts' naming first posted ``{"plan", "host"}`` under the plan's key: a rank of an
    older lading, its plan the same, ended this one with ``KeyError('plan')`` (a review of
    this change). The host has a key of its own; the plan's key holds what it held."""
    said = run_processes(_old_beside_new, 2, same, timeout=120)[0]
    if same:
        assert said == "agreed", said
    else:
        assert said.startswith("refused:") and "layout.batch_size" in said, said
        assert "on rank 1 (host ?)" in said, said


def _resume(rank: int, world: int, case: str) -> Any:
    """Each rank resumes a map loader as ``case`` says, then reads on with a collective a
    batch (DDP's gradient all-reduce)."""
    import warnings

    import torch
    import torch.distributed as dist

    import lading
    import lading.loading.agree
    from lading.errors import RanksDisagreeError

    lading.loading.agree.WAIT_S = 5.0  # (a rank that never posts: warned of after this)
    saved = lading.loader(list(range(40)), 4, collate_fn=list)
    states, it = [], iter(saved)
    for _ in range(3):
        next(it)
        states.append(saved.state_dict())
    loader = lading.loader(list(range(40)), 4, collate_fn=list)
    if case == "one_rank":  # only rank 1 found the checkpoint: rank 1 is told, after WAIT_S
        if rank == 0:
            return ("skipped", [])
        loader.load_state_dict(states[2])
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            next(iter(loader))
        return ("warned", [str(w.message) for w in said])
    if case == "different_steps":
        loader.load_state_dict(states[1 + rank])  # each rank its own step's state
    elif case == "peek":  # rank 0 logs a sample batch first, then every rank resumes
        if rank == 0:
            next(iter(loader))
        loader.load_state_dict(states[1])
    elif case == "same":
        loader.load_state_dict(states[1])
    try:
        seen = []
        for batch in loader:
            dist.all_reduce(torch.ones(1))
            seen.extend(batch)
    except RanksDisagreeError as e:
        return ("refused", str(e))
    return ("read", seen)


def test_ranks_that_resume_from_other_steps_are_refused() -> None:
    """Each rank loading its own step's state read 3 and 2 batches: rank 1's epoch-end
    collective met rank 0's batch 3 and gloo aborted the job, no lading error (a review's
    repro). Where the first pass after a load starts is compared: both are refused before
    any batch, naming it and the fix."""
    results = run_processes(_resume, 2, "different_steps", timeout=120)
    for rank, (status, said) in enumerate(results):
        assert status == "refused", (rank, results[rank])
        assert "start.batches" in said and "the pass after load_state_dict()" in said, said
        assert "load_state_dict() of one state" in said, said


def test_a_state_loaded_on_one_rank_only_is_warned_of() -> None:
    """Rank 0 found no checkpoint and starts fresh: it never posts a start to compare, so rank
    1 cannot be refused, but is told (it read 2 batches where rank 0 read 10, silently)."""
    _, (status, said) = run_processes(_resume, 2, "one_rank", timeout=120)
    assert status == "warned", said
    assert any("rank 0 started no pass after the same load_state_dict()" in w for w in said), said


@pytest.mark.parametrize("case", ["same", "peek"])
def test_ranks_that_load_one_state_read_on_as_before(case: str) -> None:
    """One state on every rank reads on; so does a rank 0 that peeked at a batch before the
    load (refused by the first version of this check, which compared the first pass)."""
    (s0, seen0), (s1, seen1) = run_processes(_resume, 2, case, timeout=120)
    assert s0 == s1 == "read" and len(seen0) == len(seen1) > 0
    assert not set(seen0) & set(seen1)
