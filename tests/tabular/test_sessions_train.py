"""``lading train sessions`` on files laid out as Transformers4Rec's YOOCHOOSE days: every item
list right-padded with 0 to 20. What a step trains on and what evaluation ranks are the most
recent real items of every session, whatever ``max_len``; the evaluation day is never trained on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import kept_model

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
torch = pytest.importorskip("torch")

WIDTH = 20  # the T4R files' list length
TINY: dict[str, Any] = {
    "train_days": [1], "eval_day": 2, "batch_size": 8, "epochs": 1, "dim": 8, "heads": 2,
    "parallel": "none", "log_every": 1, "progress": False,
}  # fmt: skip


def padded_sessions(path: Path, rows: int, seed: int) -> list[list[int]]:
    """Sessions of 1-12 items (ids >= 1) written right-padded with 0 to ``WIDTH``, as the T4R
    preprocessing writes them; the sessions without their padding."""
    rng = np.random.default_rng(seed)
    sessions = [list(rng.integers(1, 50, n)) for n in rng.integers(1, 13, rows)]
    column = [[int(i) for i in s] + [0] * (WIDTH - len(s)) for s in sessions]
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"item_id-list_seq": pa.array(column, pa.list_(pa.int64()))}), path)
    return [[int(i) for i in s] for s in sessions]


@pytest.fixture
def days(tmp_path: Path) -> tuple[Path, list[list[int]], list[list[int]]]:
    """Day 1 (train) and day 2 (train, valid, test); day 1's and day 2's sessions."""
    data = tmp_path / "days"
    train = padded_sessions(data / "1" / "train.parquet", 64, 1)
    evaluated = []
    for i, split in enumerate(("train", "valid", "test")):
        evaluated += padded_sessions(data / "2" / f"{split}.parquet", 20, 10 + i)
    return data, train, evaluated


def sessions_trained_on(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, ...]]:
    """The list every session a step computes the loss of is added to (its real items)."""
    import lading.tabular.train as train

    seen: list[tuple[int, ...]] = []
    loss = train.next_item_loss

    def spy(model: Any, hidden: Any, items: Any, lengths: Any, positions: Any) -> Any:
        seen.extend(tuple(row[:n]) for row, n in zip(items.tolist(), lengths.tolist()))
        return loss(model, hidden, items, lengths, positions)

    monkeypatch.setattr(train, "next_item_loss", spy)
    return seen


@pytest.mark.parametrize("max_len", [20, 10, 5])
def test_a_short_max_len_trains_on_the_latest_real_items_of_every_session(
    days: tuple[Path, list[list[int]], list[list[int]]],
    max_len: int,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before, the loader kept each list's last ``max_len`` entries, mostly the file's
    padding: at max_len 5 a session of 4 items was all 0s, and was never trained on."""
    from lading.tabular.train import SessionsConfig, train_sessions

    data, sessions, evaluated = days
    seen = sessions_trained_on(monkeypatch)
    config = SessionsConfig(data=data, out=tmp_path / "run", max_len=max_len, **TINY)
    summary = train_sessions(config)
    want = sorted(tuple(s[-max_len:]) for s in sessions if len(s) >= 2)
    assert sorted(seen) == want  # one epoch: every session of 2 items or more, once
    assert summary["model"]["sessions"] == sum(len(s) >= 2 for s in evaluated)


@pytest.mark.parametrize(
    "days_given, words",
    [([1, 2], "evaluation day 2"), ([1, 1], "day 1 twice")],
)
def test_training_on_the_evaluation_day_or_a_day_twice_is_refused(
    tmp_path: Path, days_given: list[int], words: str
) -> None:
    from lading.tabular.train import SessionsConfig

    with pytest.raises(ValueError, match=words):
        SessionsConfig(data=tmp_path, out=tmp_path / "run", train_days=days_given, eval_day=2)


def test_the_command_refuses_training_on_the_evaluation_day_in_one_line(
    days: tuple[Path, list[list[int]], list[list[int]]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from lading.cli import main

    args = ["train", "sessions", "--data", str(days[0]), "--out", str(tmp_path / "run")]
    assert main([*args, "--train-days", "1,2", "--eval-day", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "evaluation day 2" in err[0] and "--train-days" in err[0]
    assert not (tmp_path / "run").exists()


def mostly_single_items(path: Path, rows: int, multi: int) -> list[list[int]]:
    """``rows`` sessions, all of one item but ``multi`` of 3 (at rows spread over the file),
    right-padded to ``WIDTH``: most batches hold nothing to predict."""
    sessions = [[1 + r % 40] for r in range(rows)]
    for k in range(multi):
        sessions[k * (rows // multi)] = [5, 6, 7 + k]
    column = [s + [0] * (WIDTH - len(s)) for s in sessions]
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"item_id-list_seq": pa.array(column, pa.list_(pa.int64()))}), path)
    return sessions


def finite_losses(out: Path) -> list[float]:
    import json

    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    losses = [float(r["loss"]) for r in log if r.get("loss") is not None]
    assert losses and all(np.isfinite(losses)), losses
    return losses


def test_a_batch_with_no_session_of_two_items_trains_on_without_a_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, a batch whose sessions all had one item reached the model empty and the step
    crashed in the attention's reshape. Now the step runs with a zero loss (so that under DDP
    every rank still meets the gradient all-reduce) and the sessions of 2+ items are all
    trained on."""
    from lading.tabular.train import SessionsConfig, train_sessions

    data = tmp_path / "days"
    sessions = mostly_single_items(data / "1" / "train.parquet", 64, 3)
    for split in ("train", "valid", "test"):
        padded_sessions(data / "2" / f"{split}.parquet", 20, 3)
    seen = sessions_trained_on(monkeypatch)
    out = tmp_path / "run"
    train_sessions(SessionsConfig(data=data, out=out, **TINY))
    assert sorted(seen) == sorted(tuple(s) for s in sessions if len(s) >= 2)
    finite_losses(out)


@pytest.mark.slow
def test_ranks_whose_batch_has_nothing_to_predict_still_meet_the_others(tmp_path: Path) -> None:
    """Two ranks under torchrun: a step where one rank's batch holds no session of 2+ items
    and the other's does must neither crash nor hang the other rank."""
    from distributed import run_cli

    data = tmp_path / "days"
    mostly_single_items(data / "1" / "train.parquet", 64, 3)
    for split in ("train", "valid", "test"):
        padded_sessions(data / "2" / f"{split}.parquet", 20, 3)
    out = tmp_path / "run"
    args = ["train", "sessions", "--data", str(data), "--out", str(out)]
    args += ["--train-days", "1", "--eval-day", "2", "--batch-size", "8", "--epochs", "1"]
    args += ["--dim", "8", "--heads", "2", "--log-every", "1"]
    run_cli(args, torchrun=2, timeout=300)
    finite_losses(out)


def test_an_untrained_model_guesses_about_uniformly() -> None:
    """The output layer is the item embedding (tied): it started at nn.Embedding's N(0, 1), so
    the first logits had a std of ~8 (the LayerNorm's output is ~sqrt(dim) long) and the loss
    sat above uniform guessing's ln(items) for the first steps; a reviewer's epoch of
    YOOCHOOSE ended at Recall@20 0.11, about the most-popular baseline's, against 0.33 from a
    small start. An untrained model now guesses about uniformly."""
    import math

    import torch

    from lading.tabular.sessions import NextItemTransformer, next_item_loss

    torch.manual_seed(0)
    model = NextItemTransformer(5000).eval()
    items = torch.randint(1, 5000, (64, 20))
    lengths = torch.full((64,), 20)
    with torch.no_grad():
        loss = float(next_item_loss(model, model(items, lengths), items, lengths))
    assert loss < 1.05 * math.log(5000), loss
    assert not model.items.weight[0].any()  # the padding item's row stays zero


def test_the_trained_model_is_kept_in_out_model_and_loads_back(
    days: tuple[Path, list[list[int]], list[list[int]]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before, without --checkpoint-every OUT held only log.jsonl and summary.json. Now
    OUT/model holds model.safetensors and config.json (what rebuilds the model), named in
    the summary; the model loaded back computes what the trained one does."""

    import lading.tabular.train as train

    made: list[Any] = []
    real = train.NextItemTransformer

    def making(*args: Any, **kwargs: Any) -> Any:
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(train, "NextItemTransformer", making)
    out = tmp_path / "run"
    summary = train.train_sessions(train.SessionsConfig(data=days[0], out=out, **TINY))
    folder, saved = kept_model(out, summary)
    assert saved["num_items"] == summary["num_items"] and saved["dim"] == 8
    monkeypatch.undo()
    loaded = train.load_sessions_model(folder)
    assert type(loaded) is real
    items = torch.randint(1, saved["num_items"], (3, 6))
    lengths = torch.tensor([6, 4, 2])
    with torch.no_grad():
        want = made[0].eval()(items, lengths)
        got = loaded.eval()(items, lengths)
    assert torch.equal(want, got)
    assert not list(out.glob("model.*"))  # no temporary left beside it


def odd_columns(data: Path) -> Path:
    """Days 1 and 2 whose files hold an integer list, a float list and an integer scalar
    column, as a T4R day's ``item_id-list_seq``, ``et_dayofweek_sin-list_seq`` and
    ``item_id-count``; the first train file."""
    table = pa.table(
        {
            "item_id-list_seq": pa.array([[1, 2, 3], [4, 5]], pa.list_(pa.int64())),
            "et_dayofweek_sin-list_seq": pa.array([[0.5, 0.1], [0.2]], pa.list_(pa.float32())),
            "item_id-count": pa.array([3, 2], pa.int32()),
        }
    )
    for day, split in (("1", "train"), ("2", "train"), ("2", "valid"), ("2", "test")):
        (data / day).mkdir(parents=True, exist_ok=True)
        pq.write_table(table, data / day / f"{split}.parquet")
    return data / "1" / "train.parquet"


@pytest.mark.parametrize(
    "column, said",
    [
        ("item_id-count", "is int32, not a list of integers"),
        ("et_dayofweek_sin-list_seq", "is list<element: float>, not a list of integers"),
        ("item_id", "has no column 'item_id'"),
    ],
)
def test_a_column_that_is_no_list_of_item_ids_is_refused_naming_flag_file_and_choices(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], column: str, said: str
) -> None:
    """Before: an AttributeError ('Int32Array' has no attribute 'flatten'), a RuntimeError
    from torch.embedding, or pyarrow's "No match for FieldRef.Name(item_id)" with the whole
    schema, naming neither the file nor the flag. Now one line before anything is read:
    the flag, the first train file, what the column is, the integer-list columns it has."""
    from lading.cli import main

    first = odd_columns(tmp_path / "days")
    out = tmp_path / "run"
    args = ["train", "sessions", "--data", str(tmp_path / "days"), "--out", str(out)]
    args += ["--train-days", "1", "--eval-day", "2", "--column", column, "--dim", "8"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert f"--column {column}" in err[0] and str(first) in err[0] and said in err[0], err[0]
    assert "integer-list columns: item_id-list_seq" in err[0], err[0]
    assert not (out / "log.jsonl").exists()


@pytest.mark.parametrize("given", ["178-181", "178,,x", ","])
def test_train_days_not_a_list_of_day_numbers_is_refused_naming_the_flag_and_form(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], given: str
) -> None:
    """Before: "invalid literal for int() with base 10: '178-181'", naming neither the flag
    nor the form expected (and ``,`` trained on no day). Now the parser refuses it, naming
    --train-days, what it was given and the form, with an example."""
    from lading.cli import main

    args = ["train", "sessions", "--data", str(tmp_path), "--out", str(tmp_path / "run")]
    with pytest.raises(SystemExit) as exited:
        main([*args, "--train-days", given])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "--train-days" in err and repr(given) in err, err
    assert "comma-separated day numbers" in err and "178,179,180,181" in err, err
    assert "invalid literal" not in err
