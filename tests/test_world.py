"""Rank detection: every launcher's variables, their precedence, and who builds."""

from __future__ import annotations

from pathlib import Path

import pytest

from lading.world import World, from_environment, resolve_shared_fs, tasks_per_node

# (case, environment, expected (launcher, rank, world, local rank, local world, node))
TABLE = [
    ("nothing", {}, ("none", 0, 1, 0, 1, None)),
    (
        "torchrun node 1 of 2",
        {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4",
         "GROUP_RANK": "1"},
        ("torchrun", 5, 8, 1, 4, 1),
    ),
    ("bare RANK/WORLD_SIZE: one node", {"RANK": "2", "WORLD_SIZE": "3"},
     ("torchrun", 2, 3, 2, 3, 0)),
    (
        "srun 2 nodes x 4 tasks",
        {"SLURM_PROCID": "6", "SLURM_NTASKS": "8", "SLURM_LOCALID": "2", "SLURM_NODEID": "1",
         "SLURM_TASKS_PER_NODE": "4(x2)", "SLURM_STEP_ID": "0"},
        ("slurm", 6, 8, 2, 4, 1),
    ),
    (
        "srun uneven nodes: the step's own counts win over the job's",
        {"SLURM_PROCID": "8", "SLURM_NTASKS": "16", "SLURM_STEP_NUM_TASKS": "9",
         "SLURM_LOCALID": "0", "SLURM_NODEID": "2", "SLURM_TASKS_PER_NODE": "8(x2)",
         "SLURM_STEP_TASKS_PER_NODE": "4(x2),1", "SLURM_STEP_ID": "3"},
        ("slurm", 8, 9, 0, 1, 2),
    ),
    (
        "srun --ntasks-per-node",
        {"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1", "SLURM_NODEID": "1",
         "SLURM_NTASKS_PER_NODE": "2", "SLURM_STEPID": "0"},
        ("slurm", 3, 4, 1, 2, 1),
    ),
    (
        "sbatch script without srun: one process, not rank 0 of 8",
        {"SLURM_PROCID": "0", "SLURM_NTASKS": "8", "SLURM_NODEID": "0"},
        ("none", 0, 1, 0, 1, None),
    ),
    (
        "Open MPI",
        {"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4",
         "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"},
        ("openmpi", 3, 4, 1, 2, None),
    ),
    (
        "MVAPICH2",
        {"MV2_COMM_WORLD_RANK": "2", "MV2_COMM_WORLD_SIZE": "6",
         "MV2_COMM_WORLD_LOCAL_RANK": "2", "MV2_COMM_WORLD_LOCAL_SIZE": "3"},
        ("mvapich", 2, 6, 2, 3, None),
    ),
    (
        "PMI (MPICH / Intel MPI)",
        {"PMI_RANK": "7", "PMI_SIZE": "8", "MPI_LOCALRANKID": "3", "MPI_LOCALNRANKS": "4"},
        ("pmi", 7, 8, 3, 4, None),
    ),
    (
        "srun --mpi=pmi2 (PMI_RANK/PMI_SIZE alone): Slurm's step says the node",
        {"PMI_RANK": "4", "PMI_SIZE": "8", "SLURM_PROCID": "4", "SLURM_NTASKS": "8",
         "SLURM_LOCALID": "0", "SLURM_NODEID": "1", "SLURM_TASKS_PER_NODE": "4(x2)",
         "SLURM_STEP_ID": "0"},
        ("pmi", 4, 8, 0, 4, 1),
    ),
    (
        "HPE PALS mpiexec (PMI_LOCAL_RANK)",
        {"PMI_RANK": "4", "PMI_SIZE": "8", "PMI_LOCAL_RANK": "0", "PMI_LOCAL_SIZE": "4"},
        ("pmi", 4, 8, 0, 4, None),
    ),
    (
        "RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS exported under srun",
        {"RANK": "6", "WORLD_SIZE": "8", "SLURM_PROCID": "6", "SLURM_NTASKS": "8",
         "SLURM_LOCALID": "2", "SLURM_NODEID": "1", "SLURM_TASKS_PER_NODE": "4(x2)",
         "SLURM_STEP_ID": "0"},
        ("torchrun", 6, 8, 2, 4, 1),
    ),
    (
        "torchrun under srun: torchrun's variables win",
        {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4",
         "GROUP_RANK": "1", "SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0",
         "SLURM_NODEID": "1", "SLURM_TASKS_PER_NODE": "1(x2)", "SLURM_STEP_ID": "0"},
        ("torchrun", 5, 8, 1, 4, 1),
    ),
    (
        "mpirun inside sbatch: MPI wins over the batch step's Slurm ids",
        {"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "8",
         "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
         "SLURM_PROCID": "0", "SLURM_NTASKS": "8", "SLURM_STEP_ID": "0"},
        ("openmpi", 5, 8, 1, 4, None),
    ),
    (
        "explicit override wins over everything",
        {"LADING_RANK": "1", "LADING_WORLD_SIZE": "2", "LADING_LOCAL_RANK": "0",
         "LADING_LOCAL_WORLD_SIZE": "1", "LADING_NODE_RANK": "1", "RANK": "0",
         "WORLD_SIZE": "4", "OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4"},
        ("lading", 1, 2, 0, 1, 1),
    ),
]  # fmt: skip


@pytest.mark.parametrize(("case", "env", "expected"), TABLE, ids=[row[0] for row in TABLE])
def test_launcher_table(case: str, env: dict[str, str], expected: tuple[object, ...]) -> None:
    world = from_environment(env)
    got = (world.launcher, world.rank, world.world_size, world.local_rank)
    assert (*got, world.local_world_size, world.node_rank) == expected, case


def test_a_world_size_without_a_rank_is_refused_naming_the_fix() -> None:
    """Lightning's DDP launcher sets WORLD_SIZE, LOCAL_RANK and NODE_RANK but no RANK until its
    process group starts: every process was rank 0 (a reviewer: two ranks read the same half
    of the data, the other half never). Refused, naming the fix; a size of 1 is one process."""
    env = {"WORLD_SIZE": "2", "LOCAL_RANK": "1", "NODE_RANK": "0"}
    with pytest.raises(ValueError, match=r"WORLD_SIZE=2 without RANK.*LadingDataModule"):
        from_environment(env)
    assert from_environment({"WORLD_SIZE": "1"}).world_size == 1


def test_detect_reads_the_given_environment() -> None:
    env = {"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "1"}
    world = World.detect(env)
    assert (world.rank, world.world_size, world.local_rank, world.num_workers) == (1, 2, 0, 1)


@pytest.mark.parametrize(
    ("value", "counts"),
    [("4", [4]), ("4(x2)", [4, 4]), ("4(x2),3", [4, 4, 3]), ("2,1(x3)", [2, 1, 1, 1])],
)
def test_slurm_tasks_per_node(value: str, counts: list[int]) -> None:
    assert tasks_per_node(value) == counts


def test_bad_values_name_the_variable() -> None:
    with pytest.raises(ValueError, match="cannot read Slurm tasks per node '4x2'"):
        tasks_per_node("4x2")
    with pytest.raises(ValueError, match="OMPI_COMM_WORLD_RANK='three'"):
        from_environment({"OMPI_COMM_WORLD_RANK": "three", "OMPI_COMM_WORLD_SIZE": "4"})
    with pytest.raises(ValueError, match="slurm environment variables are inconsistent"):
        from_environment({"SLURM_PROCID": "9", "SLURM_NTASKS": "4", "SLURM_STEP_ID": "0"})


def test_who_builds_follows_shared_fs(monkeypatch: pytest.MonkeyPatch) -> None:
    # node 1's local rank 0 (global rank 4) builds node-locally, never on a shared filesystem
    world = World(rank=4, world_size=8, local_rank=0, local_world_size=4, node_rank=1)
    assert world.is_builder(shared_fs=False) and not world.is_builder(shared_fs=True)
    assert World(rank=0, world_size=8, local_world_size=4).is_builder(shared_fs=True)
    monkeypatch.setenv("LADING_SHARED_FS", "1")
    assert resolve_shared_fs() and not world.is_builder()
    monkeypatch.setenv("LADING_SHARED_FS", "0")
    assert not resolve_shared_fs() and world.is_builder()
    assert resolve_shared_fs(True)  # the argument wins over the variable
    monkeypatch.setenv("LADING_SHARED_FS", "maybe")
    with pytest.raises(ValueError, match="LADING_SHARED_FS='maybe'"):
        resolve_shared_fs()


def test_process_group_is_none_without_one_and_the_group_when_up(tmp_path: Path) -> None:
    import torch.distributed as dist

    from lading.world import process_group

    assert not dist.is_initialized() and process_group() is None
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rdv'}", rank=0, world_size=1)
    try:
        assert process_group() is dist
        assert process_group(min_size=2) is None  # a group of one: nothing to agree with
    finally:
        dist.destroy_process_group()
    assert process_group() is None


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"rank": 1.0, "world_size": 2}, r"World\(rank=1.0\): rank must be an int"),
        ({"world_size": "2"}, r"World\(world_size='2'\): world_size must be an int"),
        ({"rank": True, "world_size": 2}, r"World\(rank=True\): rank must be an int"),
        ({"node_rank": 0.0}, r"World\(node_rank=0.0\): node_rank must be an int or None"),
        ({"num_workers": None}, r"World\(num_workers=None\): num_workers must be an int"),
    ],
)
def test_a_world_of_other_than_ints_is_refused_naming_the_field(
    fields: dict[str, object], says: str
) -> None:
    """A World's places are ints: a float, str or bool is refused naming the field (was: taken
    as it stood, a rank of 1.0 went into the loader's plan and its saved state)."""
    with pytest.raises(TypeError, match=says) as e:
        World(**fields)  # type: ignore[arg-type]
    assert "\n" not in str(e.value)


def test_numpy_ints_of_a_world_become_python_ints() -> None:
    """numpy integers are ints, stored as Python's: the rank and world size go into every
    loader state, which a checkpoint writes as JSON."""
    import json

    import numpy as np

    world = World(np.int64(3), np.int32(4), np.int64(1), np.int64(2), node_rank=np.int64(1))
    fields = (world.rank, world.world_size, world.local_rank, world.local_world_size)
    assert fields == (3, 4, 1, 2) and world.node_rank == 1
    assert all(type(v) is int for v in (*fields, world.node_rank, world.num_workers))
    json.dumps({"rank": world.rank, "node": world.node_rank})
    assert world.with_worker(np.int64(1), np.int64(2)).worker_id == 1
    assert type(world.with_worker(np.int64(1), np.int64(2)).num_workers) is int


@pytest.mark.parametrize(
    ("env", "names"),
    [
        ({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "2"},
         "LOCAL_RANK=3 and LOCAL_WORLD_SIZE=2"),
        ({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2",
          "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "1"},
         "OMPI_COMM_WORLD_LOCAL_RANK=1 and OMPI_COMM_WORLD_LOCAL_SIZE=1"),
    ],
)  # fmt: skip
def test_a_local_rank_past_the_local_size_is_refused_naming_both(
    env: dict[str, str], names: str
) -> None:
    """A launcher's local rank at or past its local size (a hand-written job script) was taken
    as a node of ``local_rank + 1`` processes, with nothing said: the node cache's cap was
    shared among ranks that do not exist (a review's find)."""
    with pytest.raises(ValueError, match=names):
        from_environment(env)
