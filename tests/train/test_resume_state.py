"""A resume continues the random streams and the fp16 loss scale of the run it resumes.

The CUDA generator (dropout on the GPU) is saved beside the CPU one and restored on an exact
resume; ``torch.manual_seed`` in the loop's start reset it to the first step's stream before.
The GradScaler's scale and growth counter are saved too; a resume restarted them at 65536 and
0. Checkpoints without these entries (written before) resume as they did.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import lading
from lading.train import LoopConfig, StepResult, Trainer, TrainingTask, checkpoint, state
from lading.world import World

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="CUDA is not available on this machine")
DEVICES = ["cpu", pytest.param("cuda", marks=needs_cuda)]


class Square(TrainingTask):
    """The squared weight as the loss: a step with an update and no randomness."""

    def __init__(self, model: torch.nn.Linear) -> None:
        self.model = model

    def step(self, batch: Any) -> StepResult:
        return StepResult((self.model.weight**2).sum(), len(batch))


def trainer(
    out: Path, total: int, device: str = "cpu", scaler: Any = None, resume: bool = True
) -> Trainer:
    """A trainer of a 1x1 linear model over 12 rows in batches of 4, checkpointing every 3."""
    model = torch.nn.Linear(1, 1)
    data = lading.loader(list(range(12)), 4, seed=1, world=World())
    config = LoopConfig(total, out=out, checkpoint_every=3, resume=resume, progress=False)
    config.log_every = 1
    config.prefetch = False  # a faked CUDA device: the batches stay where they are
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    parts = (model, optimizer, None, scaler)
    return Trainer(Square(model), data, config, World(), torch.device(device), *parts)


class FakeCudaRng:
    """``torch.cuda``'s generator state calls, on a machine without a GPU: a state to save
    and a record of the states set."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.state = torch.arange(16, dtype=torch.uint8)
        self.set: list[torch.Tensor] = []
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
        monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device="cuda": self.state.clone())
        monkeypatch.setattr(
            torch.cuda, "set_rng_state", lambda new, device="cuda": self.set.append(new.clone())
        )


def test_the_cuda_generator_is_saved_and_restored_on_an_exact_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The checkpoint holds every rank's CUDA generator state (a tensor: safetensors), and an
    exact resume sets it back, after the loop's seeding, where before it kept the seed's."""
    fake = FakeCudaRng(monkeypatch)
    first = trainer(tmp_path, 3, "cuda")
    first.loader.set_epoch(0)
    state.save(first, 3)
    saved = checkpoint.load(tmp_path / "checkpoint")
    assert [s.tolist() for s in saved["cuda_rng"]] == [fake.state.tolist()]
    fake.state = torch.zeros(16, dtype=torch.uint8)  # what the loop's seeding would leave
    assert state.restore(trainer(tmp_path, 6, "cuda")).step == 3
    assert [s.tolist() for s in fake.set] == [list(range(16))]


def test_an_elastic_resume_reseeds_the_cuda_generator_rather_than_restore_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On another world size no saved stream is this rank's: ``torch.manual_seed`` from
    ``(seed, rank, step)`` reseeds the CPU and every CUDA generator, the saved one unused."""
    fake = FakeCudaRng(monkeypatch)
    first = trainer(tmp_path, 3, "cuda")
    first.loader.set_epoch(0)
    state.save(first, 3)
    saved = checkpoint.load(tmp_path / "checkpoint")
    for key in ("loaders", "rng", "cuda_rng"):  # as two ranks wrote it
        saved[key] = saved[key] * 2
    checkpoint.save(saved, tmp_path / "checkpoint")
    seeds: list[int] = []
    monkeypatch.setattr(torch, "manual_seed", seeds.append)
    state.restore(trainer(tmp_path, 6, "cuda"))
    assert fake.set == [] and seeds == [state.elastic_seed(0, 0, 3)]


def test_a_resume_on_another_world_size_says_the_global_batch_changed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A checkpoint of 2 ranks resumed on 1 went on with half the rows a step and no word
    (a review, 2026-12-07): the global batch, before and now, is said on stderr, in the
    loader's own unit (it said "4 rows a step" of 4 groups of 8 rows)."""
    first = trainer(tmp_path, 3)
    first.loader.set_epoch(0)
    state.save(first, 3)
    saved = checkpoint.load(tmp_path / "checkpoint")
    for key in ("loaders", "rng"):  # as two ranks wrote it
        saved[key] = saved[key] * 2
    checkpoint.save(saved, tmp_path / "checkpoint")
    capsys.readouterr()
    resumed = trainer(tmp_path, 6)
    assert state.restore(resumed).step == 3
    rows = resumed.loader.batch_size
    said = capsys.readouterr().err
    assert f"resumed at step 3 with a global batch of {rows} (1 rank x batch size {rows})" in said
    assert "rows" not in said, said  # a batch counts groups of rows where the loader does
    assert f"saved with {2 * rows} (2 ranks x {rows})" in said, said


def test_a_resume_with_another_batch_size_says_the_saved_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The message took this run's batch size for the checkpoint's: 2 ranks of 4 resumed on
    1 of 2 said "it took 4" for 8 (a review of this change)."""
    first = trainer(tmp_path, 3)
    first.loader.set_epoch(0)
    state.save(first, 3)
    saved = checkpoint.load(tmp_path / "checkpoint")
    rows = first.loader.batch_size
    for key in ("loaders", "rng"):  # as two ranks of twice the batch wrote it
        saved[key] = saved[key] * 2
    for loader in saved["loaders"]:
        loader["layout"] = {**loader["layout"], "batch_size": 2 * rows, "world_size": 2}
    checkpoint.save(saved, tmp_path / "checkpoint")
    capsys.readouterr()
    state.restore(trainer(tmp_path, 6))
    said = capsys.readouterr().err
    assert f"saved with {4 * rows} (2 ranks x {2 * rows})" in said, said


def test_a_checkpoint_without_a_cuda_state_resumes_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint of a CPU run (or one written before CUDA states were saved) resumed on
    CUDA sets no CUDA state, and one of a CUDA run resumed on the CPU touches none."""
    trainer(tmp_path, 3).run()
    assert "cuda_rng" not in checkpoint.load(tmp_path / "checkpoint")
    fake = FakeCudaRng(monkeypatch)
    state.restore(trainer(tmp_path, 6, "cuda"))
    assert fake.set == []
    cuda = trainer(tmp_path, 3, "cuda")
    cuda.loader.set_epoch(0)
    state.save(cuda, 3)
    state.restore(trainer(tmp_path, 6, "cpu"))
    assert fake.set == []


def scaler() -> torch.amp.GradScaler:
    """A CPU GradScaler whose scale doubles every second step, so its state moves."""
    return torch.amp.GradScaler("cpu", init_scale=16.0, growth_interval=2)


def test_the_grad_scaler_goes_on_from_its_checkpointed_scale(tmp_path: Path) -> None:
    """Three steps, a checkpoint, three more: the scale and growth counter are those of six
    steps in one go (before, the resumed scaler started again at its initial scale)."""
    whole = trainer(tmp_path / "whole", 6, scaler=scaler())
    whole.run()
    trainer(tmp_path / "cut", 3, scaler=scaler()).run()
    saved = checkpoint.load(tmp_path / "cut" / "checkpoint")
    assert saved["scaler"] == {**scaler().state_dict(), "scale": 32.0, "_growth_tracker": 1}
    resumed = trainer(tmp_path / "cut", 6, scaler=scaler())
    resumed.run()
    assert resumed.scaler.state_dict() == whole.scaler.state_dict()
    assert whole.scaler.get_scale() == 128.0


def test_a_disabled_scaler_or_a_checkpoint_without_one_changes_nothing(tmp_path: Path) -> None:
    """A disabled scaler (fp32, bf16, or fp16 off CUDA) saves nothing; a checkpoint without a
    scaler's state (written before, or by such a run) leaves this run's scaler as it was."""
    off = torch.amp.GradScaler("cpu", enabled=False)
    trainer(tmp_path, 3, scaler=off).run()
    assert "scaler" not in checkpoint.load(tmp_path / "checkpoint")
    resumed = trainer(tmp_path, 3, scaler=scaler())
    state.restore(resumed)
    assert resumed.scaler.state_dict() == scaler().state_dict()


@pytest.mark.parametrize("key", ["cuda_rng", "scaler"])
def test_a_task_state_may_not_take_the_new_reserved_keys(tmp_path: Path, key: str) -> None:
    """The checkpoint's own entries are refused as a task's state keys."""
    run = trainer(tmp_path, 3)
    run.task.state = lambda: {key: 1}  # type: ignore[method-assign]
    run.loader.set_epoch(0)
    with pytest.raises(ValueError, match=key):
        state.save(run, 3)


class Dropped(TrainingTask):
    """A linear layer behind dropout on ``device``: each step's output depends on the mask
    the device's generator draws; the outputs are kept (on the CPU) to compare."""

    def __init__(self, model: torch.nn.Module, device: torch.device) -> None:
        self.model, self.device = model, device
        self.outputs: list[torch.Tensor] = []
        self.drop = torch.nn.Dropout(0.5)

    def step(self, batch: Any) -> StepResult:
        x = batch.to(self.device, torch.float32).reshape(-1, 1).repeat(1, 64)
        out = self.model(self.drop(x))
        self.outputs.append(out.detach().cpu())
        return StepResult(out.square().mean(), len(batch))


def dropout_run(out: Path, total: int, device: str) -> list[torch.Tensor]:
    """The outputs of the steps up to ``total`` that this run made (resumed from ``out``)."""
    torch.manual_seed(0)  # the same initial weights every run
    model = torch.nn.Linear(64, 8).to(device)
    task = Dropped(model, torch.device(device))
    data = lading.loader(list(range(12)), 4, seed=1, world=World())
    config = LoopConfig(total, out=out, checkpoint_every=3, resume=True, progress=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    Trainer(task, data, config, World(), torch.device(device), model, optimizer).run()
    return task.outputs


@pytest.mark.parametrize("device", DEVICES)
def test_dropout_after_a_resume_continues_the_uninterrupted_stream(
    tmp_path: Path, device: str
) -> None:
    """Six steps in one go, and three then three more from the checkpoint: the same dropout
    masks, so the same outputs at every step (on CUDA the resumed steps drew the first
    steps' masks again before)."""
    whole = dropout_run(tmp_path / "whole", 6, device)
    head = dropout_run(tmp_path / "cut", 3, device)
    tail = dropout_run(tmp_path / "cut", 6, device)
    assert len(whole) == 6 and len(head) == 3 and len(tail) == 3
    for step, (expected, got) in enumerate(zip(whole, head + tail), 1):
        assert torch.equal(expected, got), f"step {step} differs"


def test_a_resume_of_a_finished_run_trains_nothing_and_keeps_its_last_loss(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--resume`` of a run that reached its last step: no step ran, and the result's loss
    was NaN, which summary.json then held as the non-JSON ``NaN`` (a review's find). The
    checkpoint keeps the last step's loss; the resume says there is nothing to train."""
    import json
    import math

    from lading.train.records import write_summary

    done = trainer(tmp_path, 6).run()
    assert done.steps == 6 and math.isfinite(done.last_loss)
    capsys.readouterr()
    again = trainer(tmp_path, 6).run()
    assert (again.steps, again.last_loss) == (6, done.last_loss)
    said = capsys.readouterr().err
    assert "at step 6, this run's last" in said and "nothing to train" in said, said
    write_summary(tmp_path, {"last_loss": math.nan, "steps": 0}, World())
    strict = json.loads(
        (tmp_path / "summary.json").read_text(),
        parse_constant=lambda c: pytest.fail(f"summary.json holds {c}"),
    )
    assert strict == {"last_loss": None, "steps": 0}


def test_log_lines_hold_no_nan_or_infinity_that_strict_json_refuses(tmp_path: Path) -> None:
    """A diverged run's log.jsonl held a bare ``"loss": NaN``, which jq and strict readers
    refuse (a review's find): a loss that is not finite is written as null."""
    import json
    import math

    from lading.train.records import write_line

    with open(tmp_path / "log.jsonl", "w") as file:
        write_line(file, {"step": 2, "loss": math.nan, "lr": math.inf, "rows": 4})
    line = (tmp_path / "log.jsonl").read_text()
    strict = json.loads(line, parse_constant=lambda c: pytest.fail(f"log.jsonl holds {c}"))
    assert strict == {"step": 2, "loss": None, "lr": None, "rows": 4}


def _logged_steps(out: Path) -> list[int]:
    import json

    return [json.loads(line)["step"] for line in (out / "log.jsonl").read_text().splitlines()]


def test_a_resume_after_a_kill_logs_each_step_once(tmp_path: Path) -> None:
    """A run killed after it logged step 8 but before its checkpoint at 9, resumed from its
    checkpoint at 6: log.jsonl read 1..8, 7, 8, 9 (a review's find: "15, 15" after a kill past
    the checkpoint at 10). A resume drops the records after its checkpoint first."""
    import json

    trainer(tmp_path, 6).run()
    with open(tmp_path / "log.jsonl", "a") as log:  # what the killed run logged past step 6
        for step in (7, 8):
            log.write(json.dumps({"step": step, "loss": 0.5}) + "\n")
    trainer(tmp_path, 9).run()
    assert _logged_steps(tmp_path) == list(range(1, 10))


def test_a_fresh_run_into_a_folder_holding_a_run_is_refused_not_mixed_with_it(
    tmp_path: Path,
) -> None:
    """A run without --resume into an --out holding another run's checkpoint went on with no
    word: log.jsonl read steps 1, 2, 3, 1, 2, and the folder's checkpoint stayed the old run's,
    which a later --resume would continue (a review's find). It is refused, naming --resume
    and the folder; a fresh run into a folder with a log and no checkpoint starts its log anew."""
    trainer(tmp_path, 3).run()
    with pytest.raises(ValueError, match=r"holds a run.*resume=True"):
        trainer(tmp_path, 2, resume=False).run()
    without = trainer(tmp_path, 2, resume=False)
    without.config.checkpoint_every = 0  # (a run that saves none would leave the old one)
    with pytest.raises(ValueError, match=r"holds a run.*resume=True"):
        without.run()
    import shutil

    shutil.rmtree(tmp_path / "checkpoint")
    trainer(tmp_path, 2, resume=False).run()
    assert _logged_steps(tmp_path) == [1, 2]


def test_a_fresh_run_is_refused_before_its_workload_writes_into_the_folder(
    tmp_path: Path,
) -> None:
    """The refusal came from the training loop, after the workload had rebuilt ``OUT/store``
    from another corpus beside the old run's checkpoint (a diff review's find): every
    ``lading train`` command refuses in ``ddp.run``, before its body writes anything."""
    from lading.train import ddp
    from lading.train.config import RunConfig

    trainer(tmp_path, 3).run()
    ran: list[bool] = []
    config = RunConfig(out=tmp_path, parallel="none")
    with pytest.raises(ValueError, match=r"holds a run.*resume=True"):
        ddp.run(config, lambda world, device, out: ran.append(True))
    assert ran == []
    config.resume = True
    ddp.run(config, lambda world, device, out: ran.append(True))
    assert ran == [True]


def test_a_summary_holds_no_nan_or_infinity_at_any_depth(tmp_path: Path) -> None:
    """The LM's summary nests its evaluations (``[{"valid_ppl": inf}]``: a perplexity past
    what a float holds), the sessions' its metrics: NaN and Infinity stayed there (a diff
    review's find). Every depth is JSON's null now."""
    import json
    import math

    from lading.train.records import write_summary

    summary = {"evaluations": [{"step": 5, "valid_ppl": math.inf}], "model": {"ndcg": math.nan}}
    write_summary(tmp_path, summary, World())
    strict = json.loads(
        (tmp_path / "summary.json").read_text(),
        parse_constant=lambda c: pytest.fail(f"summary.json holds {c}"),
    )
    assert strict == {"evaluations": [{"step": 5, "valid_ppl": None}], "model": {"ndcg": None}}


def test_a_log_line_a_kill_cut_short_is_dropped_not_glued_to_the_next(tmp_path: Path) -> None:
    """A kill mid-write left ``{"step": 7, "lo`` with no newline; the resume kept it and
    appended the next record to it, so step 7's record was lost in an unparseable line (a
    diff review's find)."""
    import json

    trainer(tmp_path, 6).run()
    with open(tmp_path / "log.jsonl", "a") as log:
        log.write('{"step": 7, "lo')
    trainer(tmp_path, 9).run()
    lines = (tmp_path / "log.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == list(range(1, 10))


def test_a_tasks_state_may_not_take_the_last_loss_key(tmp_path: Path) -> None:
    """The checkpoint's ``last_loss`` is the trainer's: a task state of that name overwrote
    it with a list of every rank's, and a resume read None (a diff review's find)."""
    first = trainer(tmp_path, 3)
    first.task.state = lambda: {"last_loss": 1.0}  # type: ignore[method-assign]
    first.loader.set_epoch(0)
    with pytest.raises(ValueError, match="reserved"):
        state.save(first, 3, 0.5)
