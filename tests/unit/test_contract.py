"""distrain.contract and distrain.errors: launcher↔worker names, exit codes, parsers, CLI errors."""

from __future__ import annotations

import argparse
import os
import pickle
import signal

import pytest

from distrain import contract
from distrain.cluster import ClusterError
from distrain.contract import (
    ForkJob,
    WorkerEntrypoint,
    parse_seconds,
    rehearse_boot_dir,
    signal_exit_code,
    threads_per_process,
    usable_cores,
)
from distrain.errors import DistrainError, UsageError, fail, raise_usage_errors
from distrain.monitor.status import NoJobError


@pytest.mark.parametrize(
    ("text", "expected"), [("5", 5.0), ("0.25", 0.25), ("1e3", 1000.0), (" 7 ", 7.0)]
)
def test_parse_seconds_accepts_positive_numbers(text: str, expected: float) -> None:
    assert parse_seconds(text, "--watchdog") == expected


@pytest.mark.parametrize("text", ["0", "-1", "nan", "inf", "-inf"])
def test_parse_seconds_refuses_non_positive_or_non_finite(text: str) -> None:
    with pytest.raises(UsageError, match=r"--watchdog must be a positive number of seconds"):
        parse_seconds(text, "--watchdog")


def test_parse_seconds_names_the_option_for_non_numbers() -> None:
    with pytest.raises(UsageError, match=r"--watchdog expects seconds \(got 'ten'\)") as info:
        parse_seconds("ten", "--watchdog")
    assert info.value.exit_code == contract.USAGE_EXIT_CODE


def test_signal_exit_code_is_128_plus_the_signal_number() -> None:
    assert signal_exit_code(signal.SIGTERM) == 143
    assert signal_exit_code(signal.SIGKILL) == 137
    assert contract.WATCHDOG_EXIT_CODE == 124  # as timeout(1)


def test_usable_cores_is_the_affinity_mask(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 2, 5}, raising=False)
    assert usable_cores() == 3


def test_usable_cores_falls_back_to_cpu_count(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_affinity(pid: int) -> set[int]:
        raise OSError("not supported")

    monkeypatch.setattr(os, "sched_getaffinity", no_affinity, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 6)
    assert usable_cores() == 6


@pytest.mark.parametrize(
    ("cores", "local", "expected"), [(16, 4, 4), (16, 3, 5), (2, 8, 1), (8, 0, 8)]
)
def test_threads_per_process_splits_cores_evenly(
    monkeypatch: pytest.MonkeyPatch, cores: int, local: int, expected: int
) -> None:
    monkeypatch.setattr(contract, "usable_cores", lambda: cores)
    assert threads_per_process(local) == expected


def test_rehearse_boot_dir_holds_the_sitecustomize_the_launcher_prepends() -> None:
    folder = rehearse_boot_dir()
    assert os.path.isabs(folder)
    assert os.path.isfile(os.path.join(folder, "sitecustomize.py"))


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
