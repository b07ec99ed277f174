"""A SIGKILLed `distrain run` takes every process of its job along: fork server, ranks, replica
groups. Before, the fork server and a rank outlived it for good: each rank holds the server's
"alive" pipe open, and the ranks died only with the server (found by the chaos campaign)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import psutil
import pytest
from helpers import SCRIPTS, python

MARK = "DTEST_LAUNCHER_DEATH"


def _job_processes(mark: str) -> list[psutil.Process]:
    """Every live process that inherited the test's mark (forked workers keep the launcher's)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.status() != psutil.STATUS_ZOMBIE and proc.environ().get(MARK) == mark:
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


def _ranks(procs: list[psutil.Process]) -> int:
    titles = []
    for proc in procs:
        try:
            titles.append(" ".join(proc.cmdline()))
        except psutil.Error:
            continue
    return sum(t.startswith("distrain rank") for t in titles)


JOBS = {
    "ranks": ["-n", "2", str(SCRIPTS / "ckpt_worker.py"), "--epochs", "50", "--step-sleep", "0.05"],
    "replica groups": [
        "--replicas",
        "2",
        "-n",
        "1",
        str(SCRIPTS / "replica_job.py"),
        "--steps",
        "100000",
    ],
}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("job", list(JOBS))
def test_sigkill_of_the_launcher_leaves_nothing_running(job: str, tmp_path: Path) -> None:
    mark = uuid.uuid4().hex
    extra = ["--out", str(tmp_path / "out")] + (
        ["--dir", str(tmp_path / "ckpt")] if job != "ranks" else []
    )
    (tmp_path / "out").mkdir()
    cmd = [python(), "-m", "distrain.cli", "run", *JOBS[job], *extra]
    launcher = subprocess.Popen(cmd, env={**os.environ, MARK: mark}, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 200
        while _ranks(_job_processes(mark)) < 2:
            assert launcher.poll() is None, (
                f"the job ended (exit {launcher.returncode}) before training"
            )
            assert time.monotonic() < deadline, "the ranks did not start"
            time.sleep(0.2)
        time.sleep(1.0)
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
        deadline = time.monotonic() + 20  # the kernel's death signals are immediate; exits are not
        while (left := _job_processes(mark)) and time.monotonic() < deadline:
            time.sleep(0.2)
        names = [f"{p.pid} {' '.join(p.cmdline())[:100]}" for p in left if p.is_running()]
        assert not names, f"left running 20 s after the launcher's SIGKILL: {names}"
    finally:
        for proc in _job_processes(mark):
            proc.kill()
