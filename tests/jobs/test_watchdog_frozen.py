"""A frozen rank 0 (SIGSTOP) is named by the watchdog, though the job's store lives in its
process: every other rank's heartbeat then waits on a frozen store. Found by the chaos campaign
(benchmarks/chaos, seed 15 trial 22: `--watchdog 8`, rank 0 stopped for good, the job hung
until the trial's bound; py-spy: rank 1's watchdog inside `store.check`)."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from helpers import SCRIPTS, kill_group, python


def _rank(launcher: subprocess.Popen[str], rank: int) -> psutil.Process | None:
    for proc in psutil.Process(launcher.pid).children(recursive=True):
        try:
            if " ".join(proc.cmdline()).startswith(f"distrain rank {rank}/"):
                return proc
        except psutil.Error:
            continue
    return None


@pytest.mark.timeout(300)
def test_a_frozen_rank_0_is_named_and_the_job_stops(tmp_path: Path) -> None:
    cmd = [python(), "-m", "distrain.cli", "run", "-n", "2", "--watchdog", "5",
           str(SCRIPTS / "ckpt_worker.py"), "--epochs", "500", "--step-sleep", "0.05",
           "--out", str(tmp_path / "final.pt")]  # fmt: skip
    launcher = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)  # fmt: skip
    stopped = None
    try:
        deadline = time.monotonic() + 150
        while (stopped := _rank(launcher, 0)) is None or _rank(launcher, 1) is None:
            assert launcher.poll() is None and time.monotonic() < deadline, (
                "the ranks did not start"
            )
            time.sleep(0.2)
        time.sleep(3.0)  # training: the watchdog is armed after the first step
        stopped.send_signal(signal.SIGSTOP)
        try:
            out, _ = launcher.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            raise AssertionError("the job did not stop within 120 s of rank 0's SIGSTOP") from None
        assert launcher.returncode != 0, out[-3000:]
        assert "rank 0 is frozen or gone" in out, out[-3000:]
        # the stopped rank was SIGKILLed at once, not after torch's 30 s SIGTERM grace
        assert "Unable to shutdown process" not in out, out[-3000:]
    finally:
        if stopped is not None:
            try:
                stopped.send_signal(signal.SIGCONT)
            except psutil.Error:
                pass
        kill_group(launcher)


@pytest.mark.timeout(300)
def test_a_rank_frozen_after_its_training_is_named_and_the_job_stops(tmp_path: Path) -> None:
    """Rank 1 SIGSTOPs itself after its training loop (chaos campaign, seed 16 trial 8): rank 0's
    script ends, and its watchdog, which used to end with it, names rank 1 and stops the job."""
    cmd = [python(), "-m", "distrain.cli", "run", "-n", "2", "--watchdog", "5", "--max-restarts",
           "0",
           str(SCRIPTS / "ckpt_worker.py"), "--epochs", "4", "--step-sleep", "0.05",
           "--freeze-after-loop", "--out", str(tmp_path / "final.pt")]  # fmt: skip
    launcher = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)  # fmt: skip
    try:
        try:
            out, _ = launcher.communicate(timeout=150)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                "the job did not stop: nothing watched the frozen rank 1"
            ) from None
        assert "finished at step" in out, out[-3000:]  # rank 0 ended its script
        assert launcher.returncode != 0, out[-3000:]
        assert "distrain watchdog: rank 1 (host" in out, out[-3000:]
        assert "after rank 0's script ended, before its own end: frozen or gone" in out, out[-3000:]
        # the stopped rank was SIGKILLed at once, not after torch's 30 s SIGTERM grace
        assert "Unable to shutdown process" not in out, out[-3000:]
    finally:
        kill_group(launcher)  # SIGKILL ends a stopped process too
