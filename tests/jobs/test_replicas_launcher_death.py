"""`distrain run --replicas`: a group's own launcher dies (SIGKILL), not one of its workers.

The job restarts that group's launcher (within --max-restarts, as for a worker), the new group
heals from the live one, and the groups end equal; with no restart left the job says in one line
that the group is gone and why.  Real lighthouse, real groups, real SIGKILL of the launcher.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from helpers import SCRIPTS, kill_group, python

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("torchft") is None,
    reason="torchft not installed (pip install 'distrain[ft]')",
)

SCRIPT = str(SCRIPTS / "replica_job.py")


def _group_launcher(job: subprocess.Popen[str], group: int) -> int:
    """The pid of replica group `group`'s own `distrain run` (a child of the job's launcher)."""
    import psutil

    for child in psutil.Process(job.pid).children():
        try:
            if child.environ().get("DISTRAIN_REPLICA_GROUP") == str(group):
                return int(child.pid)
        except psutil.Error:
            continue
    raise AssertionError(f"no launcher of group {group} under {job.pid}")


def _job_with_a_launcher_killed(
    tmp_path: Path, *extra: str, steps: int = 60, sig: int = signal.SIGKILL, restarts: bool = True
) -> tuple[int, str, Path, int]:
    """Start 2 groups × 1, SIGKILL group 1's launcher once group 1 committed a step; the groups
    then wait at step 30 until a process started again, or (`restarts` False: none will) group 0
    waits there until the killed launcher is reaped (file `reaped` in out), so it trains its
    last 30 steps after the loss, and no hold runs out its 120 s.  (exit code, stderr, out, pid)"""
    out = tmp_path / "out"
    out.mkdir()
    hold = ["--hold-for-restart", "30"] if restarts else ["--hold", f"30:0:{out / 'reaped'}"]
    cmd = [python(), "-m", "distrain.cli", "run", "--cpu", "--replicas", "2", "-n", "1", *extra,
           SCRIPT, "--out", str(out), "--dir", str(tmp_path / "ckpt"), "--steps", str(steps),
           *hold]  # fmt: skip
    job = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 120
        while not (out / "first.1.0").exists():  # group 1 is in the quorum: mid-run
            assert job.poll() is None and time.monotonic() < deadline, job.communicate()[1][-3000:]
            time.sleep(0.05)
        victim = _group_launcher(job, 1)
        os.kill(victim, sig)
        if not restarts:
            _wait_reaped(victim, deadline=time.monotonic() + 60)
            (out / "reaped").touch()
        _, err = job.communicate(timeout=200)
        return job.returncode, err, out, victim
    finally:
        kill_group(job)


def _wait_reaped(pid: int, deadline: float) -> None:
    """Wait until `pid` (a child of the job's launcher) is gone: the job has seen its end."""
    import psutil

    while time.monotonic() < deadline:
        try:
            psutil.Process(pid)
        except psutil.NoSuchProcess:
            return
        time.sleep(0.05)
    raise AssertionError(f"the killed launcher {pid} was not reaped in 60 s")


def _finals(out: Path) -> dict[int, dict[str, object]]:
    return {int(p.name.split(".")[1]): json.loads(p.read_text()) for p in out.glob("final.*.json")}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_killed_group_launcher_is_restarted_and_its_group_heals(
    tmp_path: Path, sig: signal.Signals
) -> None:
    """Group 1's launcher SIGKILLed mid-run (its worker dies with it), or SIGTERMed by someone
    else than the job (its agent stops its worker, it exits 143): the job restarts that
    launcher, its new worker heals from group 0, and both groups end at the last step with the
    same parameters (the job's own end check says so too).  Before, the group stayed gone, group
    0 finished alone and the job exited 137 (143)."""
    code, err, out, victim = _job_with_a_launcher_killed(tmp_path, sig=sig)
    assert code == 0, err[-3000:]
    how = "killed by SIGKILL" if sig == signal.SIGKILL else "stopped, exit code 143"
    said = f"(its launcher, pid {victim}, {how}); restarting it (1/3); 1/2 groups"
    assert "distrain run: replica group 1 lost at step" in err and said in err, err[-3000:]
    assert "replica group 1 healed from group 0 at step" in err, err[-3000:]
    assert "replica groups 0, 1 ended at step 60 with equal states" in err, err[-3000:]
    finals = _finals(out)
    assert finals[0]["step"] == finals[1]["step"] == 60
    assert finals[0]["params"] == finals[1]["params"]
    starts = [line.split()[1] for line in (out / "starts").read_text().splitlines()]
    assert starts.count("0") == 1 and starts.count("1") == 2, starts  # group 0 never restarted


@pytest.mark.timeout(300)
def test_with_no_restart_left_the_job_says_the_group_is_gone_and_why(tmp_path: Path) -> None:
    """--max-restarts 0: the killed launcher's group is not restarted; one line names it and the
    spent budget, group 0 trains on to the end, and the job fails with the launcher's signal."""
    code, err, out, victim = _job_with_a_launcher_killed(
        tmp_path, "--max-restarts", "0", restarts=False
    )
    assert code == 128 + signal.SIGKILL, err[-3000:]
    line = (
        f"distrain run: replica group 1 lost for good: its launcher (pid {victim}) was killed by "
        "SIGKILL and the group's 0 restart(s) (--max-restarts) are spent"
    )
    assert line in err, err[-3000:]
    assert _finals(out)[0]["step"] == 60
