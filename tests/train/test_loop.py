"""The training loop tells the task of every new epoch, also of one that starts right after
a checkpoint taken at the end of an epoch (the LM's hidden state is reset there)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

import lading
from lading.train import LoopConfig, StepResult, Trainer, TrainingTask
from lading.world import World


class Events(TrainingTask):
    """Records each batch and each ``on_epoch`` in the order the loop makes them."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model, self.seen = model, []  # type: list[Any]

    def step(self, batch: Any) -> StepResult:
        self.seen.append(batch.tolist())
        return StepResult((self.model.weight**2).sum(), len(batch))

    def on_epoch(self, epoch: int) -> None:
        self.seen.append(f"epoch {epoch}")


def run(out: Path, total: int) -> list[Any]:
    model = torch.nn.Linear(1, 1)
    events = Events(model)
    data = lading.loader(list(range(12)), 4, seed=1, world=World())  # 3 batches an epoch
    config = LoopConfig(total, out=out, checkpoint_every=3, resume=True, progress=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    Trainer(events, data, config, World(), torch.device("cpu"), model, optimizer).run()
    return events.seen


def test_a_checkpoint_at_the_end_of_an_epoch_resumes_into_the_next_one_announced(
    tmp_path: Path,
) -> None:
    whole = run(tmp_path / "whole", 7)
    assert whole[3] == "epoch 1" and whole[7] == "epoch 2" and len(whole) == 9
    head = run(tmp_path / "cut", 3)  # the checkpoint at step 3 is the end of epoch 0
    assert head == whole[:3]
    assert run(tmp_path / "cut", 7) == whole[3:]  # "epoch 1" first, then its batches


CRASH_MID_PUBLISH = """
import os, signal, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import lading.disk.atomic as atomic
from test_loop import run
atomic._exchange = lambda a, b: False  # as on NFS: the old checkpoint is renamed aside first
real = os.replace
class Os:  # os as lading.disk.atomic sees it: killed right after the old one is moved aside
    def __getattr__(self, name):
        return getattr(os, name)
    @staticmethod
    def replace(src, dst):
        real(src, dst)
        if ".old-" in Path(dst).name:
            os.kill(os.getpid(), signal.SIGKILL)
atomic.os = Os()
run(Path(sys.argv[2]), int(sys.argv[3]))
"""


def test_a_save_killed_between_the_renames_of_its_publish_resumes_from_the_new_checkpoint(
    tmp_path: Path,
) -> None:
    """Without an atomic exchange (NFS) a save renames the previous checkpoint aside, then the
    new one in; killed between the two it leaves no ``checkpoint/``. ``--resume`` puts the new
    one (its ``meta.json``, written last, is there) back and goes on from it, not from step 0."""
    whole = run(tmp_path / "whole", 9)
    out = tmp_path / "cut"
    run(out, 3)
    here = str(Path(__file__).parent)
    child = subprocess.run([sys.executable, "-c", CRASH_MID_PUBLISH, here, str(out), "6"])
    assert child.returncode == -signal.SIGKILL
    assert not (out / "checkpoint").exists()
    assert run(out, 9) == whole[7:]  # "epoch 2" and steps 7-9: resumed at step 6
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint"]


def test_resume_refuses_while_a_live_process_has_the_checkpoint_aside(tmp_path: Path) -> None:
    """A checkpoint renamed aside by a process still running (between its renames, or a pid
    this host reuses) is not taken: ``--resume`` names it rather than start again at step 0."""
    out = tmp_path / "cut"
    run(out, 3)
    aside = out / f"checkpoint.old-{os.getppid()}-aa"
    (out / "checkpoint").rename(aside)
    with pytest.raises(FileExistsError, match=aside.name):
        run(out, 6)
    assert aside.is_dir() and not (out / "checkpoint").exists()


def test_a_save_sweeps_what_a_killed_save_left_and_keeps_a_live_saves(tmp_path: Path) -> None:
    """A run killed while writing a checkpoint leaves a full-size ``checkpoint.tmp-<pid>-*``;
    the next save removes it (its pid is dead), never a live process's (another run's save
    in progress), and leaves no lock behind."""
    from lading.train import checkpoint

    dead = tmp_path / "checkpoint.tmp-999999999-aa"
    dead.mkdir()
    (dead / "tensors.safetensors").write_bytes(bytes(4096))
    live = tmp_path / f"checkpoint.tmp-{os.getppid()}-bb"
    live.mkdir()
    checkpoint.save({"step": 1, "w": torch.ones(2)}, tmp_path / "checkpoint")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint", live.name]
    assert checkpoint.load(tmp_path / "checkpoint")["step"] == 1


def fit(
    out: Path, total: int, lr: float, schedule: bool, keep: tuple[str, ...] = ()
) -> tuple[Any, torch.optim.SGD, Any]:
    """``total`` steps of SGD at ``lr`` (under a decaying schedule), resumed from ``out``
    (keeping the checkpoint's settings named in ``keep``)."""
    model = torch.nn.Linear(1, 1)
    data = lading.loader(list(range(12)), 4, seed=1, world=World())
    config = LoopConfig(
        total, out=out, checkpoint_every=3, resume=True, progress=False, keep_on_resume=keep
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, weight_decay=0.01)
    decay = None
    if schedule:
        decay = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1 / (1 + s))
    parts = (model, optimizer, decay)
    result = Trainer(Events(model), data, config, World(), torch.device("cpu"), *parts).run()
    return result, optimizer, decay


@pytest.mark.parametrize("schedule", [False, True], ids=["constant", "scheduled"])
def test_a_changed_lr_on_resume_is_applied_said_and_recorded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], schedule: bool
) -> None:
    """The optimizer's saved state held the first run's lr, which silently won over the one
    given to the resumed run (while its summary recorded the new one). This run's lr now
    applies from the resumed step on, scaled by the schedule where there is one, in one line
    on stderr and in the result (the summaries' ``resumed``)."""
    fit(tmp_path, 3, 0.1, schedule)
    capsys.readouterr()
    result, optimizer, decay = fit(tmp_path, 6, 0.5, schedule)
    group = optimizer.param_groups[0]
    assert group["lr"] == pytest.approx(0.5 / 7 if schedule else 0.5)  # the schedule at step 6
    assert decay is None or decay.base_lrs == [0.5]
    assert result.resumed == {"step": 3, "changed": {"lr": {"from": 0.1, "to": 0.5}}}
    assert "lr 0.1 -> 0.5" in capsys.readouterr().err
    result, optimizer, _ = fit(tmp_path, 9, 0.5, schedule)  # the same lr: nothing to say
    assert result.resumed == {"step": 6, "changed": {}} and "lr" not in capsys.readouterr().err
    assert optimizer.param_groups[0]["weight_decay"] == 0.01


@pytest.mark.parametrize("schedule", [False, True], ids=["constant", "scheduled"])
def test_a_resume_keeps_the_checkpoints_lr_where_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], schedule: bool
) -> None:
    """``keep_on_resume=("lr",)`` (what ``lading train`` asks where ``--lr`` is not given):
    the first run's lr goes on, whatever this run's optimizer was made with."""
    fit(tmp_path, 3, 0.1, schedule)
    capsys.readouterr()
    result, optimizer, decay = fit(tmp_path, 6, 0.5, schedule, keep=("lr",))
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.1 / 7 if schedule else 0.1)
    assert decay is None or decay.base_lrs == [0.1]
    assert result.resumed == {"step": 3, "changed": {}} and "lr" not in capsys.readouterr().err


def test_the_old_name_of_a_training_task_still_answers_with_a_warning() -> None:
    """``lading.train.Workload`` (the word a loader's workload also used) is now
    ``TrainingTask``; code subclassing the old name keeps working, told the new one."""
    import lading.train

    with pytest.warns(DeprecationWarning, match="TrainingTask"):
        old = lading.train.Workload  # type: ignore[attr-defined]
    assert old is TrainingTask
    with pytest.raises(AttributeError, match="Nothing"):
        lading.train.Nothing  # type: ignore[attr-defined]  # noqa: B018


def test_resume_without_a_checkpoint_says_it_starts_at_step_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``resume`` (``--resume``) in a folder with no checkpoint started at step 0 without a
    word (a mistyped OUT looked like a resumed run); it now says so on stderr, and a run that
    does resume says nothing of the kind."""
    result, _, _ = fit(tmp_path, 3, 0.1, schedule=False)
    err = capsys.readouterr().err
    assert result.resumed is None
    said = f"train: resume: no checkpoint in {tmp_path / 'checkpoint'}; starting at step 0\n"
    assert said in err, err
    result, _, _ = fit(tmp_path, 6, 0.1, schedule=False)
    assert result.resumed is not None and "no checkpoint" not in capsys.readouterr().err


def test_resume_with_no_checkpoint_and_none_to_be_saved_is_refused(tmp_path: Path) -> None:
    """``--resume`` without ``--checkpoint-every`` (0, the default: no checkpoint, not even at
    the end): a run killed at step 20 left none, and its ``--resume`` began at step 0 again
    with a one-line note (a reviewer lost every step so). Where there is no checkpoint and
    this run would write none, resuming cannot be what was meant: refused, naming the flag."""
    model = torch.nn.Linear(1, 1)
    data = lading.loader(list(range(12)), 4, seed=1, world=World())
    config = LoopConfig(6, out=tmp_path, resume=True, progress=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    trainer = Trainer(Events(model), data, config, World(), torch.device("cpu"), model, optimizer)
    with pytest.raises(ValueError, match=r"no checkpoint in .*--checkpoint-every"):
        trainer.run()
    assert not (tmp_path / "log.jsonl").exists()
    run(tmp_path, 3)  # with checkpoints, as before
    config = LoopConfig(6, out=tmp_path, resume=True, progress=False)  # one to resume: goes on
    result = Trainer(Events(model), data, config, World(), torch.device("cpu"), model, optimizer)
    assert result.run().resumed is not None


def resume_as(out: Path, desc: str, model: torch.nn.Module) -> None:
    """Resume ``out``'s checkpoint with another task's label and model."""
    data = lading.loader(list(range(12)), 4, seed=1, world=World())
    config = LoopConfig(6, out=out, checkpoint_every=3, resume=True, progress=False, desc=desc)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    Trainer(Events(model), data, config, World(), torch.device("cpu"), model, optimizer).run()


def test_a_checkpoint_of_another_kind_of_run_is_refused_naming_both(tmp_path: Path) -> None:
    """``lading train sessions --resume`` into the ``--out`` of a cross-encoder raised torch's
    ``Missing key(s) ... Unexpected key(s)`` in a traceback. The refusal is one line now,
    with torch's first detail and, where the checkpoint names the run that wrote it, both
    runs; a label alone (the same model under another ``desc``) is no refusal."""
    run(tmp_path, 3)  # `lading train` (the loop's default label), a Linear(1, 1)
    with pytest.raises(ValueError, match=r"its weights do not fit this run's model \(size "
                       r"mismatch.*written by `lading train`, this is `lading train sessions`; "
                       r"resume with"):  # fmt: skip
        resume_as(tmp_path, "train sessions", torch.nn.Bilinear(2, 2, 1))
    resume_as(tmp_path, "train another label", torch.nn.Linear(1, 1))  # the same model
    from lading.train import checkpoint

    where = tmp_path / "checkpoint"
    saved = checkpoint.load(where)
    del saved["written_by"]  # a checkpoint of before the run was recorded
    checkpoint.save(saved, where)
    with pytest.raises(ValueError, match=r"do not fit this run's model \(.*\): it holds "
                       r"another model, or one of other sizes"):  # fmt: skip
        resume_as(tmp_path, "train sessions", torch.nn.Linear(2, 2))
