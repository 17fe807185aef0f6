"""What a training run writes besides checkpoints: log records, per-step traces, the summary.

``log.jsonl`` (rank 0) has one record per log window: the step, epoch, mean loss over the
window and the ranks, the throughput summed over ranks and, when asked, every rank's process
tree memory (``memory``: each process's :class:`~lading.train.procmem.Memory`) and two totals
over all of them that count each page once, however many processes map it:
``pss_anon_bytes_total``, the anonymous memory (heap, an in-memory corpus; no file behind it)
the run holds, and ``pss_bytes_total``, all its resident memory, the page cache of a
memory-mapped store included. ``trace-rank{R}.jsonl``
has one line per step and rank, flushed at once, so a killed run leaves every finished step.
Where no progress bar is drawn (stderr is a log file or a pipe), rank 0 prints each log record
as one :class:`ProgressLines` line instead: step, loss, throughput, elapsed time and ETA.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import IO, Any

import torch

from lading.train import ddp
from lading.train.procmem import tree_memory
from lading.world import World


class Window:
    """Loss and rows since the last log record, on this rank (summed without a GPU sync)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.rows, self.losses, self.since = 0, 0, time.perf_counter()
        self.loss_sum: torch.Tensor | float = 0.0

    def add(self, loss: torch.Tensor | None, rows: int) -> None:
        self.rows += rows
        if loss is not None:
            self.loss_sum = self.loss_sum + loss.detach().to(torch.float64)
            self.losses += 1

    def record(
        self, step: int, epoch: int, rate_key: str, memory: bool, device: torch.device
    ) -> dict[str, Any]:
        """The log record of this window; every rank must call it (it reduces over ranks)."""
        seconds = time.perf_counter() - self.since
        loss = float(self.loss_sum) / self.losses if self.losses else float("nan")
        rate, mean_loss = ddp.sum_over_ranks([self.rows / max(seconds, 1e-9), loss], device)
        out: dict[str, Any] = {
            "step": step,
            "epoch": epoch,
            "loss": mean_loss / ddp.world_size(),
            rate_key: rate,
        }
        if memory:
            trees = ddp.gather_objects([m.as_dict() for m in tree_memory()])
            out["memory"] = {f"rank{r}": procs for r, procs in enumerate(trees)}
            out.update(memory_totals([p for procs in trees for p in procs]))
        return out


def memory_totals(processes: list[dict[str, int]]) -> dict[str, int]:
    """Totals of the run's processes (``Memory.as_dict()`` of each), each page counted once.

    ``pss_anon_bytes_total`` sums ``Pss_Anon``: a DataLoader worker forked from its rank maps
    the rank's heap copy-on-write, and each such page counts 1/N in each of the N processes
    mapping it, so the sum is the private anonymous memory of every process plus the shared
    once. (Summing ``RssAnon``, as ``anon_bytes_total`` did before, counted it once per
    worker.) It is left out where the kernel does not report ``Pss_Anon``.
    ``pss_bytes_total`` sums PSS likewise, file-backed pages included.
    """
    out = {"pss_bytes_total": sum(p["pss"] for p in processes)}
    anon = sum(p.get("pss_anon", 0) for p in processes)
    if anon:
        out["pss_anon_bytes_total"] = anon
    return out


def open_lines(
    out: Path | None, name: str, wanted: bool, resumed_at: int | None = None
) -> IO[str] | None:
    """``out/name`` opened when ``wanted``: a run resumed from its checkpoint at step
    ``resumed_at`` adds to it, once the records of later steps are dropped (a killed run wrote
    them after its last checkpoint: they are stepped and written again); any other run starts
    it anew."""
    if out is None or not wanted:
        return None
    out.mkdir(parents=True, exist_ok=True)
    path = out / name
    if resumed_at is None:
        return open(path, "w")
    if path.is_file():  # (a last line a kill cut short, no newline: dropped, never glued to)
        lines = [line for line in path.read_text().splitlines(True) if line.endswith("\n")]
        replace_text(path, "".join(line for line in lines if _step(line) <= resumed_at))
    return open(path, "a")


def _step(line: str) -> int:
    """A record's step (0 for a line that holds none: kept)."""
    try:
        step = json.loads(line).get("step", 0)
    except (ValueError, AttributeError):
        return 0
    return step if isinstance(step, int) else 0


def replace_text(path: Path, text: str) -> None:
    """Write ``path`` whole through a file beside it, renamed over it (a kill leaves either)."""
    part = path.with_name(path.name + ".part")
    part.write_text(text)
    os.replace(part, path)


def write_line(file: IO[str] | None, record: dict[str, Any]) -> None:
    """Append one JSON line and flush it (a killed run keeps every line written)."""
    if file is not None:
        file.write(json.dumps(finite(record)) + "\n")
        file.flush()


def finite(value: Any) -> Any:
    """``value`` with each float that is not finite (a diverged loss, a perplexity past what
    a float holds), at any depth of its dicts and lists, as None: JSON has no NaN or
    Infinity, and strict readers (jq) refuse Python's spelling of them."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def jsonable(value: Any) -> Any:
    """``value`` with paths as strings and tuples as lists (a config, for JSON)."""
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def write_summary(out: Path, summary: dict[str, Any], world: World) -> None:
    """Rank 0 writes ``out/summary.json``; every rank waits for it."""
    if world.rank == 0:  # a NaN (a loss no step gave) is null: JSON has no NaN
        (out / "summary.json").write_text(json.dumps(finite(summary), indent=2))
    ddp.barrier()


class ProgressLines:
    """Progress as plain lines on stderr (rank 0, where no bar is drawn), one per log record:
    ``train cross-encoder: step 40/1000 (4%), loss 0.6931, 123.4 samples/s, elapsed 0:00:12,
    ETA 0:04:48``. The ETA is the remaining steps at this run's mean pace since its first."""

    def __init__(self, desc: str, total: int, first: int, every: int, rate_key: str) -> None:
        self.desc, self.total, self.first = desc, total, first
        self.rate = rate_key.removesuffix("_per_s") + "/s"
        self.began = time.perf_counter()
        self.say(
            f"{total} steps from step {first}; progress every {every} steps (its loss: the "
            "mean over those steps, of every rank)"
        )

    def say(self, text: str) -> None:
        print(f"{self.desc}: {text}", file=sys.stderr, flush=True)

    def record(self, step: int, loss: float, rate: float) -> None:
        elapsed = time.perf_counter() - self.began
        done = max(step - self.first, 1)
        left = elapsed / done * max(self.total - step, 0)
        self.say(
            f"step {step}/{self.total} ({100 * step // max(self.total, 1)}%), loss {loss:.4f}, "
            f"{rate:,.1f} {self.rate}, elapsed {_clock(elapsed)}, ETA {_clock(left)}"
        )


def _clock(seconds: float) -> str:
    return str(datetime.timedelta(seconds=round(seconds)))
