"""How a cell that did not run to the end is recorded: out of memory only where memory ran out.

A rank that hangs past the timeout, dies by a signal or exits without a report is an error (the
run exits non-zero, larger world sizes still run); a cell is OOM only when the memory monitor
saw the budget passed, or a rank got a SIGKILL the bench did not send (the kernel's OOM killer).
The ranks here are stand-ins spawned as the bench spawns them, which hang or kill themselves,
so the statuses are those ``run_cell`` records from real exit codes, with no torch loaded.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pytest

from lading.bench import cell as cell_module
from lading.bench.cell import Cell, Settings, cell_record, run_cell
from lading.bench.grid import predict_oom
from lading.bench.launched import launched_record

GiB = 2**30


def hangs(*args: Any) -> None:
    time.sleep(120)  # a rank stuck in a collective, or a window far slower than expected


def segfaults(*args: Any) -> None:
    os.kill(os.getpid(), signal.SIGSEGV)


def sigkilled(*args: Any) -> None:
    os.kill(os.getpid(), signal.SIGKILL)  # what the kernel's OOM killer sends


def exits_quietly(*args: Any) -> None:
    os._exit(3)


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Run cells whose ranks are ``target``; ranks left at the end are killed after 0.2 s
    (the bench waits 10 s for them to leave by themselves first)."""
    real_finish = cell_module.finish
    monkeypatch.setattr(
        cell_module, "finish", lambda procs, pids: real_finish(procs, pids, grace_s=0.2)
    )

    def run(target: Any, timeout_s: float = 30.0, budget: int | None = 8 * GiB) -> Any:
        monkeypatch.setattr(cell_module, "rank_main", target)
        settings = Settings(timeout_s=timeout_s)
        return run_cell(Cell("packed", 1, "loader"), settings, None, budget)  # type: ignore[arg-type]

    return run


def test_a_cell_past_its_timeout_is_an_error_not_oom(stand_in: Any) -> None:
    from lading.cli.bench import _failed_cells

    record = stand_in(hangs, timeout_s=1.0)
    assert record["status"] == "error"
    assert record["reason"] == "timed out after 1 s (no report from rank 0)"
    # an error is no reason to skip the larger world sizes, and the run exits non-zero
    assert predict_oom(Cell("packed", 2, "loader"), [record], 8 * GiB) is None
    assert _failed_cells([record]) == 1


def test_a_rank_dead_by_a_signal_is_an_error_naming_it(stand_in: Any) -> None:
    record = stand_in(segfaults)
    assert record["status"] == "error"
    assert record["reason"] == "rank 0 died by SIGSEGV without a report"


def test_a_rank_exiting_without_a_report_is_an_error_with_its_code(stand_in: Any) -> None:
    record = stand_in(exits_quietly)
    assert record["status"] == "error"
    assert record["reason"] == "rank 0 exited with code 3 without a report"


def test_a_sigkill_the_bench_did_not_send_is_oom(stand_in: Any) -> None:
    record = stand_in(sigkilled)
    assert record["status"] == "oom"
    assert "SIGKILL" in record["reason"] and "OOM killer" in record["reason"]


def test_a_cell_over_the_budget_is_oom(stand_in: Any) -> None:
    record = stand_in(hangs, budget=2**20)  # a Python process alone holds more than 1 MiB
    assert record["status"] == "oom"
    assert record["reason"] == "anonymous memory passed the budget"


def test_the_record_reads_exit_codes_not_the_kills_of_the_clean_up() -> None:
    cell = Cell("packed", 2, "loader")
    # rank 1 still running when the window ended (None): the bench killed it afterwards
    got = cell_record(cell, {}, [], {"samples": 0}, False, [None, None], timeout_s=2.0)
    assert (got["status"], got["reason"]) == (
        "error",
        "timed out after 2 s (no report from ranks 0, 1)",
    )
    got = cell_record(cell, {}, [], {"samples": 0}, False, [-signal.SIGSEGV, None])
    assert (got["status"], got["reason"]) == ("error", "rank 0 died by SIGSEGV without a report")


def launched_report(rank: int, exitcode: int | None, timed_out: bool) -> dict[str, Any]:
    return {
        "rank": rank,
        "host": "host0",
        "node": "0",
        "result": None,
        "error": None,
        "memory": {"samples": 0},
        "over_budget": False,
        "exitcode": exitcode,
        "timed_out": timed_out,
        "timeout_s": 2.0,
    }


def test_a_launched_cell_past_its_timeout_is_an_error() -> None:
    reports = [launched_report(0, None, True), launched_report(1, None, True)]
    record = launched_record(Cell("packed", 2, "loader"), reports)
    assert record["status"] == "error"
    assert record["reason"] == "timed out after 2 s (no report from ranks 0, 1)"


def test_a_launched_rank_dead_by_a_signal_is_an_error() -> None:
    reports = [launched_report(0, None, False), launched_report(1, -signal.SIGSEGV, False)]
    record = launched_record(Cell("packed", 2, "loader"), reports)
    assert (record["status"], record["reason"]) == (
        "error",
        "rank 1 died by SIGSEGV without a report",
    )
