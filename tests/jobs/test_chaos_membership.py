"""The chaos campaign finds a trial's processes by what they are (benchmarks/chaos/membership.py):
a process that double-forks away from the trial's launcher, clears its environment, closes its
fds and renames itself is still the trial's, found by the cgroup the trial's commands run in;
the older ways (the launcher's descendants, the trial's mark) miss it."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest
from helpers import REPO

sys.path.insert(0, str(REPO / "benchmarks" / "chaos"))
import membership  # noqa: E402

#: a launcher stand-in that leaves a detached, renamed sleep with no environment and exits
DETACH = ("(env -i /bin/bash -c 'exec -a kworker-chaos-test /bin/sleep 60' "
          "</dev/null >/dev/null 2>&1 &) ; exit 0")  # fmt: skip


def _name(proc: psutil.Process) -> str | None:
    """The process's name, or None once it has exited: the trial's `sh` and subshell live for
    milliseconds, and one the cgroup lists can be gone before it is asked (CI, stop 52)."""
    try:
        return proc.name()
    except psutil.NoSuchProcess:
        return None


@pytest.mark.timeout(60)
def test_a_detached_process_is_found_by_the_trials_cgroup() -> None:
    trial = f"membership-test-{os.getpid()}"
    if os.geteuid() != 0 or membership.cgroup(trial) is None:
        pytest.skip("no cgroup per trial here (needs root and a writable cgroupfs)")
    env = {**os.environ, membership.TRIAL_VAR: trial}
    try:
        proc = subprocess.Popen(membership.wrap(trial, ["setsid", "sh", "-c", DETACH]), env=env,
                                start_new_session=True, close_fds=True)  # fmt: skip
        membership.follow(trial, proc.pid)
        assert proc.wait(timeout=20) == 0
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            found = [p for p in membership.trial_processes(trial) if _name(p) == "sleep"]
            if found:
                break
            time.sleep(0.1)
        assert found, "the detached sleep is not in the trial's cgroup"
        assert "kworker-chaos-test" in " ".join(found[0].cmdline())
        assert membership.TRIAL_VAR not in found[0].environ()
        old = {p.pid for p in membership.trial_processes(trial, cgroup=False)}
        assert found[0].pid not in old, "the older ways found it too: the test proves nothing"
    finally:
        membership.remove_all()
    assert membership.members(trial) == []
