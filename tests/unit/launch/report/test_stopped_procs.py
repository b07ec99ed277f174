"""The launcher's watch of a job no rank's watchdog watches (launch/report/stopped_procs.py), on
real child processes: one stopped for good is named and killed; a running one, or one stopped and
continued within the bound, is left alone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from distrain.launch.report.stopped_procs import StoppedProcesses


def _sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])


def test_a_process_stopped_for_good_is_named_and_killed(capsys: pytest.CaptureFixture[str]) -> None:
    frozen, running, resumed = _sleeper(), _sleeper(), _sleeper()
    watch = StoppedProcesses(2.0, poll=0.2).start()
    try:
        os.kill(frozen.pid, signal.SIGSTOP)
        os.kill(resumed.pid, signal.SIGSTOP)
        time.sleep(0.8)
        os.kill(resumed.pid, signal.SIGCONT)  # stopped less than the bound: left alone
        assert frozen.wait(timeout=30) == -signal.SIGKILL
        time.sleep(1.0)
        assert running.poll() is None and resumed.poll() is None
        assert watch.killed == [frozen.pid]
        err = capsys.readouterr().err
        assert f"distrain run: watchdog: pid {frozen.pid} (" in err
        assert (
            "was stopped (SIGSTOP) for 2 s (--watchdog 2): killed, so the job restarts or ends"
            in err
        )
    finally:
        watch.stop()
        for proc in (frozen, running, resumed):
            proc.kill()
            proc.wait(timeout=30)
