"""The training loop every task shares: steps over epochs, update, log, trace, checkpoint.

The task turns a batch into a loss (:class:`~lading.train.task.TrainingTask`); :class:`Trainer`
does the rest the same way for the cross-encoder, the LSTM language model, the next-item
transformer and the bench: seed each rank, restore from ``out/checkpoint`` (exactly, or
elastically on another world size), iterate the loader epoch after epoch until ``total`` steps,
update (zero grad, backward through an optional GradScaler, clip, step, schedule), write
``log.jsonl`` and traces, checkpoint every ``checkpoint_every`` steps and at the end.
Throughput counts the whole loop: waiting for the batch, the copy and the step. On CUDA the
loader is wrapped in a :class:`~lading.device.DevicePrefetcher` (unless ``config.prefetch`` is
off): batches arrive on the device, copied on a side stream during the previous step, and
checkpoints still count only the batches the loop received.

A run whose model diverged (a loss NaN or infinite, and weights no longer finite) stops with
:class:`~lading.errors.DivergedError` at its next step that logs, checkpoints or ends the run,
every rank together, before anything of it is saved (:mod:`lading.train.diverged`); a step a
GradScaler skipped is no divergence.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from lading.device import DevicePrefetcher
from lading.loading.resumable import Resumable
from lading.train import checkpoint, ddp, state
from lading.train.checkpoint import need_safetensors
from lading.train.diverged import Advice, DivergenceWatch
from lading.train.records import ProgressLines, Window, open_lines, write_line
from lading.train.task import LoopConfig, LoopResult, StepResult, TrainingTask
from lading.world import World


@dataclass
class Trainer:
    """A task, its loader and (unless it only reads) the model and its optimizer.

    Attributes:
        task: the step and the other hooks.
        loader: this rank's loader (one of lading's resumable loaders).
        config: steps, logging, checkpoints.
        world: this process's place in the job.
        device: where the step runs (CUDA synchronised before the clock reads).
        model: the bare model (not the DDP wrapper): checkpointed and put in train mode.
        optimizer: None for a run without updates.
        scheduler: stepped after every update; None for none.
        scaler: a ``torch.amp.GradScaler`` for fp16 (checkpointed where enabled); None
            backpropagates the loss as it is.
        resumed: set by :meth:`run` where it resumed: ``{"step": …, "changed": {…}}``
            (the optimizer settings this run changed, :func:`lading.train.state.restore`).
    """

    task: TrainingTask
    loader: Resumable
    config: LoopConfig
    world: World
    device: torch.device
    model: nn.Module | None = None
    optimizer: Any = None
    scheduler: Any = None
    scaler: Any = None
    resumed: dict[str, Any] | None = field(default=None, init=False)
    # the checkpoint's last loss: the result's where no step runs after the resume
    _resumed_loss: float = field(default=math.nan, init=False, repr=False)

    def __post_init__(self) -> None:
        cuda = torch.device(self.device).type == "cuda"
        if cuda and self.config.prefetch and not isinstance(self.loader, DevicePrefetcher):
            self.loader = DevicePrefetcher(self.loader, self.device)

    def run(self) -> LoopResult:
        """Train from scratch or the checkpoint to ``config.total`` steps; this rank's result.

        Raises:
            DivergedError: on every rank, at the first step that logs, checkpoints or is the
                last after a loss went NaN or infinite, where the weights are no longer finite
                (:mod:`lading.train.diverged`); nothing is checkpointed from that step on.
        """
        config = self.config
        step = self._start()
        watch = DivergenceWatch(self.device)
        at = None if self.resumed is None else step  # a resume keeps the records up to here
        trace = open_lines(config.out, f"trace-rank{self.world.rank}.jsonl", config.trace, at)
        log = open_lines(config.out, "log.jsonl", self.world.rank == 0 and config.log_every > 0, at)
        bar = self._bar(step)
        lines = self._lines(bar, log, step)
        window, timed = Window(), _Clock(self.device)
        last: StepResult = StepResult(None, 0)
        if self.model is not None:
            self.model.train()
        try:
            while step < config.total:
                if self.loader.remaining() == 0:  # read to its end (here, or before a checkpoint)
                    self.loader.set_epoch(self.loader.epoch + 1)
                    self.task.on_epoch(self.loader.epoch)
                received = False
                waited = time.perf_counter()
                for batch in self.loader:
                    received, fetch_s = True, time.perf_counter() - waited
                    if step >= config.warmup and not timed.running:
                        timed.start()  # this batch's wait was before the clock
                    elif timed.running:
                        timed.wait_s += fetch_s
                    last = self.task.step(batch)
                    self._update(last.loss)
                    step += 1
                    if self.optimizer is not None:  # (no update: nothing to diverge)
                        watch.note(step, last.loss)
                    window.add(last.loss, last.rows)
                    timed.rows += last.rows if timed.running else 0
                    if trace is not None:
                        write_line(trace, self._trace(step, last, batch, fetch_s))
                    bar.update(1)
                    measured = self.task.evaluate(step)
                    # the log line first: a run killed between the two resumes from the
                    # previous checkpoint and writes this step's line again, never none
                    logs = config.log_every and (
                        step % config.log_every == 0 or step >= config.total
                    )
                    if logs:
                        self._log(log, bar, window, step, lines, measured)
                    elif measured and log is not None:
                        write_line(log, {"step": step, "epoch": self.loader.epoch, **measured})
                    if config.checkpoint_every and step % config.checkpoint_every == 0:
                        self._check(watch, step)  # before the checkpoint is saved
                        self._save(step, last)
                    elif logs and step < config.total:  # (the last: after the clock stops)
                        self._check(watch, step)
                    if step >= config.total:
                        break
                    waited = time.perf_counter()
                else:
                    if not received:
                        raise ValueError(
                            f"the loader gave no batch in epoch {self.loader.epoch} "
                            f"(step {step} of {config.total}): it has fewer rows than one batch "
                            "per rank; use a smaller batch size or fewer processes"
                        )
        finally:
            bar.close()
            for file in (trace, log):
                if file is not None:
                    file.close()
        seconds = timed.stop()
        if watch.checked_at != step:  # the last step, before the run returns or saves
            self._check(watch, step)
        if config.checkpoint_every:
            self._save(step, last)
        loss = self._resumed_loss if last.loss is None else float(last.loss.item())
        return LoopResult(
            step, self.loader.epoch, loss, timed.rows, seconds, timed.wait_s, self.resumed
        )

    def _start(self) -> int:
        """Seed this rank, then restore the checkpoint if asked and present; the first step.

        Asked to resume (``--resume``) where there is none, rank 0 says so on stderr."""
        torch.manual_seed(self.config.seed + self.world.rank)  # dropout differs per rank
        if self.config.checkpoint_every or self.config.resume:
            need_safetensors()  # now, not after the steps up to the first checkpoint
        if self.config.resume and self.config.out is not None and state.present(self):
            resumed = state.restore(self)
            self.resumed = {"step": resumed.step, "changed": resumed.changed}
            if resumed.last_loss is not None:
                self._resumed_loss = resumed.last_loss
            if resumed.step >= self.config.total and self.world.rank == 0:
                print(
                    f"{self.config.desc}: resume: the checkpoint is at step {resumed.step}, "
                    f"this run's last ({self.config.total} steps): nothing to train; give "
                    "more steps (--steps, --epochs) to train on",
                    file=sys.stderr,
                    flush=True,
                )
            return resumed.step
        if not self.config.resume and self.config.out is not None:  # another run's there
            checkpoint.refuse_a_fresh_run_over(state.directory(self), self.config.out)
        out = self.config.out
        missing = "no out folder" if out is None else f"no checkpoint in {out / 'checkpoint'}"
        if self.config.resume and not self.config.checkpoint_every:  # (every rank: the same)
            raise ValueError(
                f"{self.config.desc}: resume: {missing}, and this run would save none either "
                "(checkpoint_every is 0: none, not even at the end), so a kill would leave "
                "nothing to resume; give --checkpoint-every N (checkpoint_every=N) to resume "
                "this run later, or leave out --resume"
            )
        if self.config.resume and self.world.rank == 0:  # asked for, but nothing to resume
            print(
                f"{self.config.desc}: resume: {missing}; starting at step 0",
                file=sys.stderr,
                flush=True,
            )
        self.loader.set_epoch(0)
        return 0

    def _update(self, loss: torch.Tensor | None) -> None:
        if loss is None or self.optimizer is None:
            return
        self.optimizer.zero_grad(set_to_none=True)
        scaler = self.scaler
        (scaler.scale(loss) if scaler is not None else loss).backward()
        if self.config.clip is not None:
            assert self.model is not None, "clipping needs the model"
            if scaler is not None:
                scaler.unscale_(self.optimizer)
            nn.utils.clip_grad_norm_(self.model.parameters(), self.config.clip)
        if scaler is not None:
            scaler.step(self.optimizer)
            scaler.update()
        else:
            self.optimizer.step()
        if self.scheduler is not None:
            self.scheduler.step()

    def _check(self, watch: DivergenceWatch, step: int) -> None:
        """Stop a diverged run (:meth:`DivergenceWatch.check`); every rank calls it at the
        same steps. A run without updates (no optimizer) has nothing to check."""
        if self.optimizer is not None:
            watch.check(step, self._parameters, self._advice)

    def _parameters(self) -> list[torch.Tensor]:
        """The weights a diverged run leaves non-finite: the model's, else the optimizer's."""
        if self.model is not None:
            return list(self.model.parameters())
        return [p for group in self.optimizer.param_groups for p in group["params"]]

    def _advice(self) -> Advice:
        scaler = self.scaler
        fp16 = scaler is not None and bool(getattr(scaler, "is_enabled", lambda: True)())
        return Advice(self.optimizer, self.config.clip, fp16, bool(self.config.checkpoint_every))

    def _trace(self, step: int, result: StepResult, batch: Any, fetch_s: float) -> dict[str, Any]:
        loss = float(result.loss.item()) if result.loss is not None else None
        head = {"step": step, "epoch": self.loader.epoch, "loss": loss, "rows": result.rows}
        return {**head, **self.task.trace(batch), "fetch_s": fetch_s}

    def _save(self, step: int, last: StepResult) -> None:
        if self.config.out is not None and self.model is not None:
            loss = None if last.loss is None else float(last.loss.item())
            state.save(self, step, self._resumed_loss if loss is None else loss)

    def _log(
        self,
        log: Any,
        bar: Any,
        window: Window,
        step: int,
        lines: ProgressLines | None,
        measured: dict[str, Any],
    ) -> None:
        """One record from every rank's window (all ranks reduce) and what the task
        ``measured`` at this step; rank 0 writes it, and shows it on the bar or, where none is
        drawn, as a progress line."""
        config = self.config
        record = window.record(step, self.loader.epoch, config.rate_key, config.memory, self.device)
        record.update(measured)
        if log is not None:
            write_line(log, record)
            short = config.rate_key.removesuffix("_per_s") + "_s"
            bar.set_postfix(
                {"loss": f"{record['loss']:.4f}", short: f"{record[config.rate_key]:,.1f}"}
            )
        if lines is not None:
            lines.record(step, record["loss"], record[config.rate_key])
        window.reset()

    def _lines(self, bar: Any, log: Any, step: int) -> ProgressLines | None:
        """Progress lines on rank 0 where the bar is not drawn (stderr is no terminal: a log
        file, a pipe, CI), unless progress is off; one per log record, as the HF Trainer shows
        its progress wherever it runs."""
        config = self.config
        if log is None or config.progress is False or not bar.disable:
            return None
        return ProgressLines(config.desc, config.total, step, config.log_every, config.rate_key)

    def _bar(self, step: int) -> Any:
        from tqdm.auto import tqdm

        show = self.world.rank == 0 and self.config.progress is not False
        return tqdm(
            total=self.config.total,
            initial=step,
            disable=None if show else True,
            unit="step",
            desc=self.config.desc,
        )


class _Clock:
    """Time, rows and batch waits from the first step after the warm-up on."""

    def __init__(self, device: torch.device) -> None:
        self.device, self.running = device, False
        self.started, self.rows, self.wait_s = 0.0, 0, 0.0

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def start(self) -> None:
        self._sync()
        ddp.barrier()  # every rank starts the clock together
        self.started, self.rows, self.wait_s, self.running = time.perf_counter(), 0, 0.0, True

    def stop(self) -> float:
        if not self.running:
            return 0.0
        self._sync()
        return time.perf_counter() - self.started
