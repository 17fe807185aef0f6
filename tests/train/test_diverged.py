"""A diverged run is stopped by the shared loop, whatever the workload: a loss NaN or infinite
that left weights NaN stops the run at its next step that logs, checkpoints or ends it, every
rank together (:class:`lading.DivergedError`), with no checkpoint, model or summary of the
diverged model written. A non-finite loss that a GradScaler skipped (fp16: its weights stay
finite) is no divergence: the run goes on.

Before, only ``lading train sessions`` stopped (its own step checked its loss); ``lading train
lm`` and ``lading train cross-encoder`` trained on after a NaN loss, checkpointed the NaN
weights and kept a NaN model in ``OUT/model``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection
from pathlib import Path
from typing import Any

import pytest
import torch

import lading
from lading.train import LoopConfig, StepResult, Trainer, TrainingTask
from lading.world import World


class Squares(torch.nn.Module):
    """One weight, trained towards 0; the model the loop checkpoints."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(3))


class Poisoned(TrainingTask):
    """A task whose loss is NaN at each step in ``nan_at`` (its gradient too, so an optimizer
    step without a scaler leaves NaN weights); at each step in ``poison_at`` the weight itself
    is made NaN first (what a real divergence leaves, whatever a scaler does). ``steps``: the
    steps it ran."""

    def __init__(
        self, model: Squares, nan_at: Collection[int], poison_at: Collection[int] = ()
    ) -> None:
        self.model, self.nan_at, self.poison_at, self.steps = model, nan_at, poison_at, 0

    def step(self, batch: Any) -> StepResult:
        self.steps += 1
        if self.steps in self.poison_at:
            with torch.no_grad():
                self.model.weight.fill_(math.nan)
        loss = (self.model.weight**2).sum() * 0.1
        if self.steps in self.nan_at:
            loss = loss * math.nan
        return StepResult(loss, len(batch))


def fit(
    out: Path,
    nan_at: Collection[int],
    *,
    total: int = 8,
    log_every: int = 0,
    checkpoint_every: int = 0,
    scaler: Any = None,
    poison_at: Collection[int] = (),
    schedule: bool = False,
    made: list[Poisoned] | None = None,
) -> tuple[Any, Poisoned, Squares]:
    """``total`` steps of :class:`Poisoned` through the shared loop on the CPU (SGD, lr 0.1);
    the loop's result, the task (also appended to ``made``, for a run that raises) and the
    model."""
    model = Squares()
    poisoned = Poisoned(model, nan_at, poison_at)
    if made is not None:
        made.append(poisoned)

    loader = lading.loader(list(range(40)), batch_size=4, collate_fn=list, world=World(0, 1))
    config = LoopConfig(
        total,
        out=out,
        log_every=log_every,
        checkpoint_every=checkpoint_every,
        progress=False,
        memory=False,
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.5) if schedule else None
    trainer = Trainer(
        poisoned, loader, config, World(0, 1), torch.device("cpu"), model, optimizer, scheduler
    )
    trainer.scaler = scaler
    return trainer.run(), poisoned, model


def checkpointed_step(out: Path) -> int:
    return int(json.loads((out / "checkpoint" / "state.json").read_text())["step"])


# ------------------------------------------------------------------------ the shared loop


@pytest.mark.parametrize(("log_every", "checkpoint_every", "stopped_at"), [
    (1, 0, 2),  # the step that went NaN logs: stopped there
    (3, 0, 3),  # the next step that logs
    (0, 0, 8),  # none logs: the last step, before the loop returns
    (0, 5, 5),  # the next checkpoint, before it is saved
])  # fmt: skip
def test_a_nan_loss_that_left_nan_weights_stops_the_run_at_the_next_check(
    tmp_path: Path, log_every: int, checkpoint_every: int, stopped_at: int
) -> None:
    """Before, the loop ran its 8 steps on NaN weights and returned (and, checkpointing,
    saved them at step 5 and at the end). Now no step runs after the check that stops it."""
    from lading.errors import DivergedError, LadingError

    if checkpoint_every:
        pytest.importorskip("safetensors")
    made: list[Poisoned] = []
    with pytest.raises(DivergedError) as raised:
        fit(tmp_path, {2}, log_every=log_every, checkpoint_every=checkpoint_every, made=made)
    assert made[0].steps == stopped_at
    error = raised.value
    assert isinstance(error, LadingError) and isinstance(error, RuntimeError)
    message = str(error)
    assert "training diverged: loss nan at step 2 (lr= 0.1)" in message, message
    assert "lower lr=" in message and "gradient clipping" in message, message
    assert "rank" not in message and "fp16" not in message, message  # one process, no scaler
    assert not (tmp_path / "checkpoint").exists()  # none taken at or after step 2


def test_the_last_checkpoint_kept_is_the_last_step_before_the_divergence(tmp_path: Path) -> None:
    """Checkpoints every step: the one of step 1 is kept, none of step 2 (its loss NaN) or
    after; before, step 8's NaN weights were the checkpoint."""
    from lading.errors import DivergedError

    pytest.importorskip("safetensors")
    with pytest.raises(DivergedError, match="at step 2"):
        fit(tmp_path, {2}, checkpoint_every=1)
    assert checkpointed_step(tmp_path) == 1


def test_the_error_names_the_learning_rate_set_not_the_schedules(tmp_path: Path) -> None:
    """A scheduler scaling the lr by 0.5: the lr named is the one the run was given (what
    ``--lr`` sets), the optimizer's ``initial_lr``."""
    from lading.errors import DivergedError

    with pytest.raises(DivergedError, match=r"\(lr= 0\.1\)"):
        fit(tmp_path, {2}, log_every=1, schedule=True)


def test_a_nan_loss_the_scaler_skipped_does_not_stop_the_run(tmp_path: Path) -> None:
    """Under fp16 a step whose loss overflows is normal: the GradScaler skips it (the weights
    stay finite) and lowers its scale. The run goes on to its end, checkpointing every step."""
    pytest.importorskip("safetensors")
    scaler = torch.amp.GradScaler("cpu")
    result, task, model = fit(tmp_path, {2, 6}, log_every=2, checkpoint_every=1, scaler=scaler)
    assert result.steps == 8 and task.steps == 8
    assert bool(torch.isfinite(model.weight).all())
    assert checkpointed_step(tmp_path) == 8
    assert scaler.get_scale() < 2.0**16  # (it did skip: its scale went down)


def test_after_a_skipped_step_a_later_divergence_is_named_by_its_own_step(
    tmp_path: Path,
) -> None:
    """Step 2's NaN loss is skipped by the scaler (checked at step 3: the weights are finite,
    the run goes on); at step 5 the weights go NaN: stopped at step 6, naming step 5, its
    checkpoint of step 3 kept; the fp16 fix is named as the run had a scaler."""
    from lading.errors import DivergedError

    pytest.importorskip("safetensors")
    scaler = torch.amp.GradScaler("cpu")
    with pytest.raises(DivergedError) as raised:
        fit(tmp_path, {2}, log_every=3, checkpoint_every=3, scaler=scaler, poison_at={5})
    message = str(raised.value)
    assert "loss nan at step 5" in message, message
    assert "precision='bf16'" in message and "fp16" in message, message
    assert checkpointed_step(tmp_path) == 3


def test_a_run_without_a_non_finite_loss_reduces_nothing_more(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check joins one reduction of one flag at a step that logs, checkpoints or ends the
    run (here only the last), and nothing more where every loss was finite."""
    from lading.train import ddp

    calls: list[list[float]] = []
    real = ddp.sum_over_ranks

    def counted(values: list[float], device: Any) -> list[float]:
        calls.append(list(values))
        return real(values, device)

    monkeypatch.setattr(ddp, "sum_over_ranks", counted)
    monkeypatch.setattr(ddp, "gather_objects", lambda obj: pytest.fail("gathered"))
    result, _, _ = fit(tmp_path, set(), log_every=0)
    assert result.steps == 8
    assert calls == [[0.0]]  # the last step's, once


# --------------------------------------------------------------------------- two ranks


def _rank(rank: int, world: int, out: str) -> str:
    """Rank 1 alone goes NaN at step 2 (no DDP: the ranks' weights are their own); both stop
    at step 3, the first that logs, with the same error."""
    from lading.errors import DivergedError

    try:
        fit(Path(out) / str(rank), {2} if rank == 1 else set(), log_every=3)
    except DivergedError as e:
        return str(e)
    return "not stopped"


@pytest.mark.slow
def test_every_rank_stops_together_naming_the_rank_that_diverged(tmp_path: Path) -> None:
    """Before, rank 0 (finite) and rank 1 (NaN) both ran on to step 8."""
    from distributed import run_processes

    said = run_processes(_rank, 2, str(tmp_path), timeout=120)
    assert said[0] == said[1], said
    assert "loss nan at step 2 on rank 1" in said[0], said


# ------------------------------------------------------------------- the workloads' CLIs


def _one_line(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if "training diverged" in line]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.e2e
def test_lading_train_lm_stops_a_diverged_gpt_keeping_no_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A GPT at --lr 1e6: its loss is NaN from step 2 on. Before, the run went on to step 6,
    checkpointed every NaN step and kept the NaN model (exit 0)."""
    pytest.importorskip("tokenizers")
    pytest.importorskip("safetensors")
    from conftest import word_corpus
    from lading.cli import main

    corpus = word_corpus(tmp_path / "c", docs=40, lengths=(20, 60), words=50, seed=0)
    out = tmp_path / "run"
    code = main(["train", "lm", "--corpus", str(corpus.path), "--out", str(out),
                 "--arch", "gpt", "--batch-size", "4", "--bptt", "8", "--emb", "16",
                 "--heads", "2", "--layers", "1", "--dropout", "0", "--steps", "6",
                 "--valid-fraction", "0", "--parallel", "none", "--log-every", "0",
                 "--checkpoint-every", "1", "--lr", "1e6"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2, err
    line = _one_line(err)
    assert line.startswith("lading train lm: training diverged: loss nan at step 2"), line
    assert "(--lr 1000000.0)" in line and "lower --lr" in line, line
    assert not (out / "model").exists() and not (out / "summary.json").exists()
    assert checkpointed_step(out) == 1


@pytest.mark.e2e
def test_lading_train_cross_encoder_stops_a_diverged_model_keeping_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The tiny BERT at --lr 1e6: its loss is NaN from step 2 on. Before, the run went on,
    checkpointed the NaN weights and kept them in OUT/model (exit 0)."""
    pytest.importorskip("tokenizers")
    pytest.importorskip("transformers")
    pytest.importorskip("safetensors")
    from lading.bench.synth import synth
    from lading.cli import main

    files = synth("passages", 60, tmp_path / "c", queries=6)
    out = tmp_path / "run"
    code = main(["train", "cross-encoder", "--parallel", "none", "--out", str(out),
                 "--corpus", str(files.corpus), "--queries", str(files.queries),
                 "--qrels", str(files.qrels), "--negatives", str(files.run),
                 "--steps", "6", "--log-every", "0", "--checkpoint-every", "1",
                 "--group-size", "4", "--batch-size", "2", "--max-length", "32",
                 "--max-query-length", "8", "--lr", "1e6"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2, err
    line = _one_line(err)
    assert line.startswith("lading train cross-encoder: training diverged: loss nan at step 2")
    assert "(--lr 1000000.0)" in line and "lower --lr" in line, line
    assert not (out / "model").exists() and not (out / "summary.json").exists()
    assert checkpointed_step(out) == 1


def test_diverged_error_is_exported_from_lading() -> None:
    import lading
    from lading.errors import DivergedError, LadingError

    assert lading.DivergedError is DivergedError and issubclass(DivergedError, LadingError)


# ------------------------------------------------------------------------ the fix it names


@pytest.mark.parametrize("kind", ["cross-encoder", "sessions", "lm"])
def test_every_train_command_takes_the_clipping_the_divergence_message_names(
    kind: str, tmp_path: Path
) -> None:
    """The message of a diverged run says "gradient clipping"; before, only the language model
    clipped (LMConfig.clip), and neither `lading train cross-encoder` nor `sessions` had a flag
    or a field for it: the fix it named could not be taken. Now every kind's config has `clip`,
    the command line's `--clip` sets it (0: none) and the shared loop is given it."""
    from lading.cli import build_parser
    from lading.cli.bench import int_list
    from lading.cli.train import _config
    from lading.ir.train import TrainConfig
    from lading.lm.train import LMConfig
    from lading.tabular.train import SessionsConfig
    from lading.train.task import LoopConfig

    def parsed(argv: list[str]) -> Any:
        args = build_parser().parse_args(argv)
        if kind == "sessions":  # as the command reads them before its config
            args.train_days = int_list(args.train_days)
        return args

    config_of = {"cross-encoder": TrainConfig, "sessions": SessionsConfig, "lm": LMConfig}[kind]
    flag = {"cross-encoder": "--store", "sessions": "--data", "lm": "--corpus"}[kind]
    base = ["train", kind, "--out", str(tmp_path / "o"), flag, str(tmp_path)]
    if kind == "cross-encoder":
        (tmp_path / "q.tsv").write_text("1\tq\n")
        (tmp_path / "qrels").write_text("1 0 d 1\n")
        base += ["--queries", str(tmp_path / "q.tsv"), "--qrels", str(tmp_path / "qrels")]
    for given, wanted in ((["--clip", "0.5"], 0.5), (["--clip", "0"], None)):
        config = _config(config_of, parsed(base + given), ())
        assert config.clip == wanted, (kind, given, config.clip)
        assert LoopConfig.of(config, 10).clip == wanted
    default = _config(config_of, parsed(base), ())
    assert default.clip == (0.25 if kind == "lm" else None)  # each kind's default as before


def test_the_message_names_the_clip_option() -> None:
    from lading.train.diverged import Advice

    message = Advice(None, None, fp16=False, checkpoints=False).message(3, float("nan"), "")
    assert "gradient clipping (clip=1.0, --clip 1.0)" in message, message
    clipped = Advice(None, 1.0, fp16=False, checkpoints=False).message(3, float("nan"), "")
    assert "clipping" not in clipped, clipped


def test_clip_zero_means_none_and_a_bad_norm_is_refused() -> None:
    """``clip=0`` in a config (the docs: 0 for none) reached ``clip_grad_norm_(.., 0)``, which
    sets every gradient to 0: the model never trained. 0 is None now, in the config as on the
    command line; a negative, NaN or infinite norm is refused in one line, on both."""
    import argparse

    from lading.cli.inputs import clip_norm
    from lading.train.task import LoopConfig

    assert LoopConfig(10, clip=0).clip is None and LoopConfig(10, clip=0.5).clip == 0.5
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="finite number of at least 0"):
            LoopConfig(10, clip=bad)
    for text in ("-1", "nan", "inf", "abc"):
        with pytest.raises(argparse.ArgumentTypeError, match="not a gradient norm"):
            clip_norm(text)


@pytest.mark.skipif(
    __import__("torch").cuda.is_available(), reason="checks the refusal where CUDA is absent"
)
def test_fp16_without_cuda_is_refused_before_training(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--precision fp16`` on the CPU ran fp16 autocast with the GradScaler off (it scales
    on CUDA only): gradients free to underflow, without a word. Refused now, naming bf16."""
    pytest.importorskip("transformers")
    from lading.bench.synth import synth
    from lading.cli import main

    files = synth("passages", 20, tmp_path / "c", queries=3)
    code = main(["train", "cross-encoder", "--parallel", "none", "--out", str(tmp_path / "r"),
                 "--corpus", str(files.corpus), "--queries", str(files.queries),
                 "--qrels", str(files.qrels), "--steps", "1", "--precision", "fp16"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2, err
    assert "--precision fp16 on cpu" in err and "--precision bf16" in err, err
    assert not (tmp_path / "r" / "model").exists()
