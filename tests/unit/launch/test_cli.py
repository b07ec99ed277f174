"""launch/cli.py: the exit code and one-line summary `distrain run` derives from torch's records."""

from __future__ import annotations

import signal
from pathlib import Path
from types import SimpleNamespace

from distrain.launch.cli import _exit_code_of


def _failure(
    exitcode: int,
    timestamp: int = 0,
    error_file: str = "<N/A>",
    message: object = "",
    pid: int = 100,
) -> SimpleNamespace:
    return SimpleNamespace(
        exitcode=exitcode, timestamp=timestamp, error_file=error_file, message=message, pid=pid
    )


class Failed(Exception):
    """Stands in for torch's ChildFailedError: an exception with a failures dict."""

    def __init__(self, failures: dict[int, SimpleNamespace]) -> None:
        super().__init__("failed")
        self.failures = failures


def test_no_failure_records_is_code_1_with_the_first_line() -> None:
    assert _exit_code_of(RuntimeError("rendezvous closed\nmore")) == (1, "rendezvous closed")
    assert _exit_code_of(RuntimeError("")) == (1, "RuntimeError")


def test_a_signal_becomes_128_plus_n() -> None:
    code, line = _exit_code_of(Failed({1: _failure(-signal.SIGKILL, pid=42)}))
    assert code == 137 and line == "rank 1 (pid 42) was killed by SIGKILL"


def test_the_launchers_own_sigterm_of_survivors_is_not_the_cause() -> None:
    failures = {0: _failure(-signal.SIGTERM, timestamp=1), 3: _failure(7, timestamp=5, pid=9)}
    assert _exit_code_of(Failed(failures)) == (7, "rank 3 (pid 9) exited with code 7")


def test_the_rank_with_an_error_file_is_the_root_cause(tmp_path: Path) -> None:
    error_file = tmp_path / "error.json"
    error_file.write_text("{}")
    failures = {0: _failure(1, timestamp=1), 2: _failure(1, timestamp=9, error_file=str(error_file),
                                                        message={"message": "ValueError: bad lr"},
                                                         pid=5)}  # fmt: skip
    assert _exit_code_of(Failed(failures)) == (
        1,
        "rank 2 (pid 5) exited with code 1: ValueError: bad lr",
    )


def test_earliest_failure_wins_without_error_files() -> None:
    failures = {0: _failure(3, timestamp=8), 1: _failure(4, timestamp=2, pid=7)}
    assert _exit_code_of(Failed(failures)) == (4, "rank 1 (pid 7) exited with code 4")


def test_the_watchdog_exit_is_named() -> None:
    code, line = _exit_code_of(Failed({2: _failure(124)}))
    assert code == 124 and line.startswith("stopped by the watchdog (rank 2 exited with 124")


def test_a_usage_error_of_the_launcher_is_said_in_one_place() -> None:
    """`distrain run` says a usage error in launch/cli.py main alone: the features raise it."""
    launch = Path(__file__).resolve().parents[3] / "src" / "distrain" / "launch"
    sites = sorted(
        f"{path.relative_to(launch).as_posix()}:{n}"
        for path in launch.rglob("*.py")
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if line.strip().startswith("except UsageError")
    )
    assert [s.split(":")[0] for s in sites] == ["cli.py"], sites
