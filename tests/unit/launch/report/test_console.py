"""launch/report/console.py: the restart line from the agent's own records, and the resume hint."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from distrain.events import emit
from distrain.launch.report.console import RestartReporter, resume_hint


def _record(msg: str, *args: object, level: int = logging.INFO) -> logging.LogRecord:
    return logging.LogRecord("torch", level, __file__, 1, msg, args, None)


FAILED = "failed (exitcode: %s) local_rank: %s (pid: %s) of fn: %s (start_method: %s)"
RESTART = "[%s] Worker group %s. %s/%s attempts left; will restart worker group"


def test_restart_line_names_cause_attempt_and_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reporter = RestartReporter(str(tmp_path), multinode=False)
    emit("checkpoint", str(tmp_path), step=22, path="ckpt/step_00000022")
    assert reporter.filter(
        _record(FAILED, -9, 1, 379, "run_script", "forkserver", level=logging.ERROR)
    )
    assert not reporter.filter(
        _record(RESTART, "default", "FAILED", 3, 3)
    )  # torch's INFO line: not shown
    assert capsys.readouterr().err.strip() == (
        "distrain run: rank 1 (pid 379) was killed by SIGKILL; restarting every rank (attempt 1 of "
        "3), resuming from step 22"
    )
    reporter.filter(_record(FAILED, 1, 0, 400, "run_script", "forkserver", level=logging.ERROR))
    reporter.filter(_record(RESTART, "default", "FAILED", 2, 3))
    assert (
        "rank 0 (pid 400) exited with code 1; restarting every rank (attempt 2 of 3)"
        in capsys.readouterr().err
    )


def test_no_step_without_a_checkpointer_and_the_start_without_a_save(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reporter = RestartReporter(str(tmp_path), multinode=True)
    reporter.filter(_record(RESTART, "default", "FAILED", 1, 1))
    assert (
        capsys.readouterr().err.strip()
        == "distrain run: a worker failed; restarting this node's ranks (attempt 1 of 1)"
    )
    emit("checkpoint", str(tmp_path), step=None, path="ckpt")
    reporter.filter(_record(RESTART, "default", "FAILED", 1, 2))
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith("(attempt 2 of 2), from the start (no checkpoint saved yet)")
    )


def test_resume_hint_only_with_a_saved_step(tmp_path: Path) -> None:
    assert resume_hint(str(tmp_path)) == "" and resume_hint(None) == ""
    emit("checkpoint", str(tmp_path), step=None, path="ckpt")
    assert resume_hint(str(tmp_path)) == ""
    emit("checkpoint", str(tmp_path), step=40, path="ckpt/step_00000040")
    assert (
        resume_hint(str(tmp_path))
        == "; rerun the same command to resume from step 40 (ckpt/step_00000040)"
    )
