"""A self-started child stopped for good (SIGSTOP) under --watchdog: named, killed, the job heals.

Found by the chaos campaign (seed 26 trial 1: hung).  A script that starts its own workers never
calls distrain.init(), so no rank's watchdog runs; the launcher watches the one fault it can
see from outside, a process of the job stopped for longer than --watchdog
(launch/report/stopped_procs.py).  The child is killed, the script fails, the agent runs it again.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest
from helpers import SCRIPTS, python
from helpers.torch_races import torch_exit_race

MARK = "DTEST_SELFSTART_FROZEN"


def _children(mark: str) -> list[psutil.Process]:
    """The script's mp.spawn children (the test's mark in their environment)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if "spawn_main" in " ".join(proc.info["cmdline"] or []) and (
                proc.environ().get(MARK) == mark
            ):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def _port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


@pytest.mark.slow
@pytest.mark.timeout(500)
def test_a_child_stopped_for_good_is_killed_and_the_job_runs_again(tmp_path: Path) -> None:
    mark, out = uuid.uuid4().hex, tmp_path / "out"
    cmd = [python(), "-m", "distrain.cli", "run", "-n", "2", "--watchdog", "5", "--max-restarts",
           "1", str(SCRIPTS / "spawn_train.py"), str(out), "2", "--steps", "200",
           "--rerun-steps", "20"]  # fmt: skip
    env = {**os.environ, MARK: mark, "DTEST_MASTER_PORT": _port()}
    log = tmp_path / "job.log"
    with open(log, "w") as sink:
        job = subprocess.Popen(cmd, env=env, stdout=sink, stderr=sink, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while not (out / "started").exists():
            assert job.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "the children did not start"
            time.sleep(0.1)
        child = _children(mark)[0]
        child.send_signal(signal.SIGSTOP)  # for good: nothing resumes it
        code = job.wait(timeout=400)
        text = log.read_text()
        # the second run's mp.spawn children end through interpreter teardown: torch's exit race
        if not torch_exit_race(SimpleNamespace(returncode=code, stderr=text), "mp.spawn"):
            assert code == 0, text[-3000:]
        assert f"distrain run: watchdog: pid {child.pid} (" in text, text[-3000:]
        assert (
            "was stopped (SIGSTOP) for 5 s (--watchdog 5): killed, so the job restarts or ends"
            in text
        )
        assert (out / "final.pt").exists()  # the second run trained to the end
    finally:
        os.killpg(job.pid, signal.SIGKILL) if job.poll() is None else None
        for proc in _children(mark):
            proc.kill()
