"""Fixes from a review of the tabular code, each test seen failing on the code before it.

1. A diverged (NaN) or constant next-item model ranked every target first (Recall@20 and
   NDCG@20 of 1.0): NaN compares False, and ties counted in the model's favour; a training run
   whose loss went NaN printed those metrics as its result.
2. A generator of paths (``Path.glob``) was read twice by PartitionedParquet and repartition:
   the second read found it empty ("paths is empty").
3. repartition rounded the row-group count up to the multiple of world_size x workers and
   refused where that exceeded the rows, blaming the world size, where rounding down fit.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
torch = pytest.importorskip("torch")

WIDTH = 20  # the T4R files' list length


# ------------------------------------------------------- 1. ranks of diverged/constant models


def _model(num_items: int = 1000) -> Any:
    from lading.tabular.sessions import NextItemTransformer

    torch.manual_seed(0)
    return NextItemTransformer(num_items=num_items, dim=16, layers=1, heads=1, max_len=5).eval()


def _sessions(num_items: int = 1000) -> tuple[Any, Any]:
    torch.manual_seed(1)
    return torch.randint(1, num_items, (64, 5)), torch.full((64,), 5)


@pytest.mark.parametrize("broken", ["nan", "constant"])
def test_a_diverged_or_constant_model_ranks_every_target_last(broken: str) -> None:
    """Before, both ranked every target 1st: Recall@20 = NDCG@20 = 1.0. Now the target of a
    NaN score, and one tied with every item, ranks last of the 999 items proposed."""
    from lading.tabular.sessions import last_item_ranks, metrics

    model = _model()
    with torch.no_grad():
        if broken == "nan":
            model.norm.weight.fill_(math.nan)  # what a diverged step leaves
        else:
            model.items.weight.zero_()  # every item scored 0
    items, lengths = _sessions()
    with torch.no_grad():
        ranks = last_item_ranks(model, items, lengths).numpy()
    assert ranks.tolist() == [999] * 64
    assert metrics(ranks) == {"recall@20": 0.0, "ndcg@20": 0.0, "sessions": 64}


class _Scored(torch.nn.Module):
    """A stand-in model whose scores of the last position are ``scores`` (``[rows, items]``)."""

    def __init__(self, scores: Any) -> None:
        super().__init__()
        self.fixed = scores

    def forward(self, items: Any, lengths: Any) -> Any:
        return torch.zeros(items.shape[0], items.shape[1], 1)

    def scores(self, hidden: Any) -> Any:
        return self.fixed.clone()


def _ranks(scores: list[list[float]], targets: list[int]) -> list[int]:
    from lading.tabular.sessions import last_item_ranks

    items = torch.tensor([[1, t] for t in targets])
    model: Any = _Scored(torch.tensor(scores))
    return [int(r) for r in last_item_ranks(model, items, torch.full((len(targets),), 2))]


def test_ties_count_against_the_model_and_a_non_finite_target_ranks_last() -> None:
    """Rank = items scored above the target + items tied with it, the target included; a
    NaN or infinite target ranks last of the items proposed (never padding, item 0), and an
    item scored NaN counts above the target."""
    nan, inf = math.nan, math.inf
    scores = [
        [9.0, 0.5, 0.2, 0.5, 0.1, 0.5],  # target 1 tied with items 3 and 5: 3rd
        [9.0, 0.9, 0.2, 0.5, 0.1, 0.5],  # target 1 the highest: 1st (padding's 9 not counted)
        [9.0, 0.9, 0.2, 0.5, 0.1, 0.5],  # target 4 the lowest: 5th
        [0.0, 0.0, 0.0, 0.0, 0.0, 0.0],  # all tied: last
        [0.0, 0.9, nan, 0.5, 0.1, 0.5],  # target 2 NaN: last
        [0.0, 0.9, inf, 0.5, 0.1, 0.5],  # target 2 infinite: last
        [0.0, 0.9, nan, 0.5, 0.1, 0.5],  # item 2 NaN counts above target 1: 2nd
    ]
    assert _ranks(scores, [1, 1, 4, 3, 2, 2, 1]) == [3, 1, 5, 5, 5, 5, 2]


def test_ranks_differ_from_before_only_by_ties() -> None:
    """On float scores the ranks are the old formula's (items scored strictly higher, plus
    one) but for the items tied with the target, which now count against it: one row of
    these 256 draws of float32 normals holds such a tie."""
    generator = torch.Generator().manual_seed(3)
    scores = torch.randn(256, 5000, generator=generator)
    targets = torch.randint(1, 5000, (256,), generator=generator)
    rows = torch.arange(256)
    old = scores.clone()
    old[:, 0] = -math.inf
    target_score = old[rows, targets][:, None]
    before = (old > target_score).sum(dim=1) + 1
    others_tied = (old == target_score).sum(dim=1) - 1
    assert int((others_tied > 0).sum()) == 1
    assert _ranks(scores.tolist(), targets.tolist()) == (before + others_tied).tolist()


def _write_days(data: Path, train_rows: int = 64) -> None:
    """Day 1 (train) and day 2 (train, valid, test) of sessions of 1-12 items (ids 1-49),
    right-padded with 0 to ``WIDTH`` as the T4R files are."""
    for day, split, rows, seed in [(1, "train", train_rows, 1)] + [
        (2, s, 20, 10 + i) for i, s in enumerate(("train", "valid", "test"))
    ]:
        rng = np.random.default_rng(seed)
        lists = [
            [int(i) for i in rng.integers(1, 50, n)] + [0] * (WIDTH - n)
            for n in rng.integers(1, 13, rows)
        ]
        path = data / str(day) / f"{split}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        column = pa.array(lists, pa.list_(pa.int64()))
        pq.write_table(pa.table({"item_id-list_seq": column}), path)


TINY: dict[str, Any] = {
    "train_days": [1], "eval_day": 2, "batch_size": 8, "epochs": 1, "dim": 8, "heads": 2,
    "parallel": "none", "progress": False,
}  # fmt: skip


@pytest.mark.parametrize(("log_every", "steps"), [(1, 2), (3, 3), (0, 8)])
def test_a_diverged_run_stops_naming_the_step_and_the_loss(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, log_every: int, steps: int
) -> None:
    """At lr=1e6 the loss of these sessions is NaN from step 2 on. Before, the run went on to
    its end, evaluated and kept the model and reported Recall@20 = NDCG@20 = 1.0. Now it stops
    at the first log step from there (``steps``; the last, 8, where none logs), naming the
    step the loss first went non-finite, the loss and the fix, and neither evaluates nor keeps
    the model."""
    import lading.tabular.train as train
    from lading.errors import DivergedError

    loss = train.next_item_loss
    taken: list[int] = []

    def counted(*args: Any) -> Any:
        taken.append(1)
        return loss(*args)

    monkeypatch.setattr(train, "next_item_loss", counted)
    _write_days(tmp_path / "days")
    out = tmp_path / "run"
    config = train.SessionsConfig(
        data=tmp_path / "days", out=out, lr=1e6, log_every=log_every, **TINY
    )
    with pytest.raises(DivergedError) as raised:
        train.train_sessions(config)
    message = str(raised.value)
    assert "loss nan at step 2" in message, message
    assert "lr= 1000000.0" in message and "lower lr=" in message, message
    assert not (out / "summary.json").exists() and not (out / "model").exists()
    assert len(taken) == steps


def test_no_checkpoint_holds_a_diverged_model(tmp_path: Path) -> None:
    """Checkpoints every step: the last kept is that of step 1, the last finite loss; a step
    whose loss was not finite is never checkpointed (and ``--resume`` restarts from it)."""
    from lading.errors import DivergedError
    from lading.tabular.train import SessionsConfig, train_sessions

    pytest.importorskip("safetensors")
    _write_days(tmp_path / "days")
    out = tmp_path / "run"
    config = SessionsConfig(
        data=tmp_path / "days", out=out, lr=1e6, log_every=0, checkpoint_every=1, **TINY
    )
    with pytest.raises(DivergedError, match="step 2"):
        train_sessions(config)
    assert json.loads((out / "checkpoint" / "state.json").read_text())["step"] == 1


def test_the_command_stops_a_diverged_run_in_one_line_and_prints_no_metrics(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before, ``--lr 1e6`` logged loss nan every step, then printed ``model 1.0000 1.0000``."""
    from lading.cli import main

    _write_days(tmp_path / "days")
    args = ["train", "sessions", "--data", str(tmp_path / "days"), "--out", str(tmp_path / "r")]
    args += ["--train-days", "1", "--eval-day", "2", "--batch-size", "8", "--epochs", "1"]
    args += ["--dim", "8", "--heads", "2", "--parallel", "none", "--log-every", "0"]
    assert main([*args, "--lr", "1e6"]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert "Recall@20" not in captured.out and "1.0000" not in captured.out
    assert len(err) == 1 and "loss nan at step 2" in err[0], err
    assert "--lr 1000000.0" in err[0] and "lower --lr" in err[0], err


@pytest.mark.slow
def test_every_rank_stops_a_diverged_run_together(tmp_path: Path) -> None:
    """Two ranks under torchrun: the ranks agree (one all-reduce at the steps that log) and
    stop at the same step, each with the one line; none waits for the other in a collective."""
    from distributed import run_cli

    _write_days(tmp_path / "days", train_rows=128)
    out = tmp_path / "run"
    args = ["train", "sessions", "--data", str(tmp_path / "days"), "--out", str(out)]
    args += ["--train-days", "1", "--eval-day", "2", "--batch-size", "8", "--epochs", "1"]
    args += ["--dim", "8", "--heads", "2", "--log-every", "3", "--lr", "1e6"]
    done = run_cli(args, torchrun=2, timeout=300, check=False)
    assert done.returncode != 0
    assert done.stderr.count("lading train sessions: training diverged: loss nan at step") == 2
    assert "Recall@20" not in done.stdout and not (out / "summary.json").exists()


# ------------------------------------------------------------- 2. a generator of paths


def _files(folder: Path, sizes: list[int]) -> list[int]:
    """Parquet files ``p0.parquet``... of ``sizes`` rows; every session id written."""
    folder.mkdir(parents=True, exist_ok=True)
    ids, start = [], 0
    for i, n in enumerate(sizes):
        column = list(range(start, start + n))
        pq.write_table(
            pa.table({"session_id": pa.array(column, pa.int64())}), folder / f"p{i}.parquet"
        )
        ids += column
        start += n
    return ids


@pytest.mark.parametrize("kind", ["glob", "iter", "map"])
def test_partitioned_parquet_reads_a_generator_of_paths(tmp_path: Path, kind: str) -> None:
    """Before: ValueError "no parquet files given: paths is empty" (the URL check had read
    the generator to its end)."""
    from lading.tabular import PartitionedParquet
    from lading.world import World

    ids = _files(tmp_path / "d", [7, 5, 9])
    listed = sorted((tmp_path / "d").glob("*.parquet"))
    paths = {
        "glob": (tmp_path / "d").glob("*.parquet"),
        "iter": iter(listed),
        "map": map(str, listed),
    }[kind]
    loader = PartitionedParquet(
        paths, 4, columns=["session_id"], shuffle=False, world=World(), equalize="truncate"
    )
    try:
        assert loader.total_rows == len(ids) and len(loader.files) == 3
        seen = [int(i) for batch in loader for i in batch["session_id"]]
    finally:
        loader.close()
    assert sorted(seen) == ids


def test_repartition_reads_a_generator_of_paths(tmp_path: Path) -> None:
    """Before: ValueError "no parquet files given: paths is empty" (the check that no input
    lies inside the output had read the generator)."""
    from lading.tabular import repartition

    ids = _files(tmp_path / "d", [7, 5, 9])
    report = repartition((tmp_path / "d").glob("*.parquet"), tmp_path / "out", world_size=2)
    assert report.rows == len(ids) and report.source_files == 3
    got = pq.read_table(tmp_path / "out").column("session_id").to_pylist()
    assert sorted(got) == ids


def test_repartition_refuses_a_generated_input_inside_its_output(tmp_path: Path) -> None:
    """The check of inputs against the output still sees every generated path."""
    from lading.tabular import repartition

    _files(tmp_path / "d", [3])
    repartition(tmp_path / "d", tmp_path / "out")
    with pytest.raises(ValueError, match="inside the output"):
        repartition((tmp_path / "out").glob("*.parquet"), tmp_path / "out")
    assert pq.read_table(tmp_path / "out").num_rows == 3


# ---------------------------------------------------------- 3. repartition's group count


@pytest.mark.parametrize(
    ("rows", "current", "multiple", "row_group_size", "groups"),
    [
        (5, 1, 2, 1, 4),  # 5 wanted, 6 > 5 rows: down to 4 (before: refused)
        (5, 5, 2, None, 4),  # the current 5 groups: 6 > 5 rows, down to 4 (before: refused)
        (7, 1, 3, 2, 6),  # 4 wanted, 6 fits: up, as before
        (53, 2, 6, None, 6),  # as before
        (53, 1, 4, 10, 8),  # as before
        (100, 3, 8, 1, 96),  # 100 wanted, 104 > 100: down to 96 (before: refused)
        (4, 1, 4, 1, 4),  # exactly one multiple
    ],
)
def test_the_group_count_is_rounded_down_where_rounding_up_exceeds_the_rows(
    rows: int, current: int, multiple: int, row_group_size: int | None, groups: int
) -> None:
    from lading.tabular.repartition import plan_groups

    assert plan_groups(rows, current, multiple, row_group_size) == groups


def test_repartition_of_five_rows_for_two_ranks_writes_four_groups(tmp_path: Path) -> None:
    """The reviewer's case: 5 rows, world size 2, row_group_size=1. Before: "5 rows cannot
    fill 6 row groups (...); use fewer processes or workers". Now 4 groups of 1-2 rows."""
    from lading.tabular import repartition

    ids = _files(tmp_path / "d", [5])
    report = repartition(tmp_path / "d", tmp_path / "out", world_size=2, row_group_size=1)
    assert report.row_groups_after == 4 and report.row_group_sizes == (1, 2)
    written = pq.ParquetFile(tmp_path / "out" / "part-0.parquet").metadata
    assert [written.row_group(i).num_rows for i in range(written.num_row_groups)] == [2, 1, 1, 1]
    assert pq.read_table(tmp_path / "out").column("session_id").to_pylist() == ids


def test_fewer_rows_than_readers_is_refused_naming_the_numbers_and_settings(
    tmp_path: Path,
) -> None:
    from lading.tabular import repartition

    _files(tmp_path / "d", [3])
    with pytest.raises(ValueError) as raised:
        repartition(tmp_path / "d", tmp_path / "out", world_size=2, workers=2)
    message = str(raised.value)
    assert "3 rows" in message and "4 readers" in message, message
    assert "world_size=2" in message and "workers=2" in message, message
    assert not (tmp_path / "out").exists()


def test_the_command_refuses_fewer_rows_than_readers_in_its_flags(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from lading.cli import main

    _files(tmp_path / "d", [3])
    args = ["repartition", str(tmp_path / "d"), str(tmp_path / "out"), "--world-size", "4"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "3 rows" in err[0] and "--world-size 4" in err[0], err
