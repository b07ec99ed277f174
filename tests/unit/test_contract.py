"""distrain.contract and distrain.errors: launcher↔worker names, exit codes, the entrypoint, CLI
errors."""

from __future__ import annotations

import argparse
import os
import pickle
import signal

import pytest

from distrain import contract
from distrain.cluster import ClusterError
from distrain.contract import ForkJob, WorkerEntrypoint, signal_exit_code
from distrain.errors import DistrainError, UsageError, fail, raise_usage_errors
from distrain.tools.top.status import NoJobError


def test_signal_exit_code_is_128_plus_the_signal_number() -> None:
    assert signal_exit_code(signal.SIGTERM) == 143
    assert signal_exit_code(signal.SIGKILL) == 137
    assert contract.WATCHDOG_EXIT_CODE == 124  # as timeout(1)


def test_variable_names_are_the_documented_ones() -> None:
    # both sides of the contract spell these; a rename silently breaks launched jobs
    assert (
        contract.LAUNCHER,
        contract.RUN_DIR,
        contract.WATCHDOG,
        contract.DEVICE,
        contract.SPAWN,
    ) == (
        "DISTRAIN_LAUNCHER",
        "DISTRAIN_RUN_DIR",
        "DISTRAIN_WATCHDOG",
        "DISTRAIN_DEVICE",
        "DISTRAIN_SPAWN",
    )
    assert contract.CPU_REHEARSAL == "DISTRAIN_CPU_REHEARSAL"
    assert contract.RESTART_COUNT == "TORCHELASTIC_RESTART_COUNT"


def test_worker_entrypoint_imports_lazily_and_pickles() -> None:
    entry = WorkerEntrypoint("os.path", "join")
    assert entry.__name__ == entry.__qualname__ == "join"
    clone = pickle.loads(pickle.dumps(entry))
    assert clone("a", "b") == os.path.join("a", "b")


def test_fork_job_defaults() -> None:
    job = ForkJob("train.py")
    assert (job.env, job.fallback_dir, job.imports_distrain) == ({}, None, False)
    assert ForkJob("x.py").env is not job.env  # no shared mutable default


def test_raise_usage_errors_turns_argparse_errors_into_usage_errors() -> None:
    parser = raise_usage_errors(argparse.ArgumentParser(prog="p"))
    parser.add_argument("--n", type=int)
    with pytest.raises(UsageError, match="invalid int value"):
        parser.parse_args(["--n", "x"])


def test_fail_prints_one_line_and_exits_with_the_code(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        fail("distrain run", "no script", 2)
    assert info.value.code == 2
    assert capsys.readouterr().err == "distrain run: error: no script\n"


@pytest.mark.parametrize("cls", [UsageError, ClusterError, NoJobError])
def test_distrain_errors_have_one_base(cls: type[Exception]) -> None:
    assert issubclass(
        cls, DistrainError
    )  # `except DistrainError` catches every error distrain raises
    assert str(cls("what to fix")) == "what to fix"


def test_a_usage_error_keeps_its_exit_code() -> None:
    assert UsageError("bad").exit_code == contract.USAGE_EXIT_CODE
    assert UsageError("bad", exit_code=1).exit_code == 1
