"""Training shows its progress on rank 0 where no progress bar can (a log file, a pipe, CI):
steps, loss, throughput, elapsed time and ETA, as the HF Trainer's progress does."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")


def run_loop(out: Path, progress: bool | None, total: int = 20, log_every: int = 5) -> None:
    import lading
    from lading.train import LoopConfig, StepResult, Trainer, TrainingTask
    from lading.world import World

    model = torch.nn.Linear(1, 1)

    class Step(TrainingTask):
        def step(self, batch: list[int]) -> StepResult:
            x = torch.tensor(batch, dtype=torch.float32).unsqueeze(1)
            return StepResult(model(x).pow(2).mean(), len(batch))

    loader = lading.loader(list(range(24)), batch_size=4, collate_fn=list, world=World(0, 1))
    config = LoopConfig(
        total, out=out, log_every=log_every, progress=progress, memory=False, desc="train demo"
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
    Trainer(Step(), loader, config, World(0, 1), torch.device("cpu"), model, optimizer).run()


LINE = re.compile(
    r"^train demo: step (\d+)/20 \(\d+%\), loss \d+\.\d{4}, [\d,.]+ samples/s, "
    r"elapsed \d+:\d\d:\d\d, ETA \d+:\d\d:\d\d$"
)


def test_a_line_per_log_record_when_no_bar_is_shown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_loop(tmp_path, progress=None)  # stderr is no terminal here: tqdm draws no bar
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[0] == (
        "train demo: 20 steps from step 0; progress every 5 steps (its loss: the mean over "
        "those steps, of every rank)"
    ), lines  # (a newcomer read the last line's loss and the summary's as disagreeing)
    steps = [int(m.group(1)) for m in map(LINE.match, lines[1:]) if m]
    assert steps == [5, 10, 15, 20], lines
    assert lines[-1].endswith("ETA 0:00:00")


def test_no_progress_lines_when_asked_for_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_loop(tmp_path, progress=False)
    assert capsys.readouterr().err == ""


@pytest.mark.e2e
def test_lading_train_cross_encoder_shows_progress(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from lading.bench.synth import synth
    from lading.cli import main

    files = synth("passages", 200, tmp_path / "c", queries=10)
    code = main(["train", "cross-encoder", "--parallel", "none", "--out", str(tmp_path / "out"),
                 "--corpus", str(files.corpus), "--queries", str(files.queries),
                 "--qrels", str(files.qrels), "--negatives", str(files.run),
                 "--steps", "6", "--log-every", "3", "--group-size", "4",
                 "--max-length", "96", "--max-query-length", "16"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 0, err
    assert "train cross-encoder: step 3/6 (50%), loss " in err, err
    assert "samples/s" in err and "ETA" in err
