"""Which processes the chaos campaign holds still (SIGSTOP) before it SIGKILLs a launcher
(benchmarks/chaos/faults.py `_kill_frozen`), on real processes: the rank distrain started, whose
death signal the kernel delivers to a stopped process too, never a self-starting script's
children, which end by a thread of their own that a stopped process cannot run (seed 9302
trials 68 and 80: both children held, then left behind, a false `leftovers`)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

import psutil
from helpers.paths import REPO

sys.path.insert(0, str(REPO / "benchmarks" / "chaos"))
from faults import ranks  # noqa: E402
from membership import TRIAL_VAR, follow  # noqa: E402

#: a rank as a self-starting script's process looks: its title, and a spawned child
SCRIPT = """
import multiprocessing as mp, time
from setproctitle import setproctitle
setproctitle(" ".join(["distrain", "rank", "0/1", "·", "spawn_train.py"]))  # not in argv
if __name__ == "__main__":
    child = mp.get_context("spawn").Process(target=time.sleep, args=(60,))
    child.start()
    child.join()
"""


def test_the_frozen_ranks_are_the_launched_ones_not_a_script_s_children() -> None:
    trial = f"unit-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, TRIAL_VAR: trial}
    # a shell that forks the rank, as a launcher does: the rank's title hides its environment
    # (setproctitle), so the campaign knows it as its launcher's descendant (membership.follow)
    launcher = subprocess.Popen(["sh", "-c", '"$0" -c "$1"; :', sys.executable, SCRIPT], env=env,
                                start_new_session=True)  # fmt: skip
    follow(trial, launcher.pid)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not psutil.Process(launcher.pid).children():
            time.sleep(0.05)
        (rank,) = psutil.Process(launcher.pid).children()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and [p.pid for p in ranks(trial)] in ([], [rank.pid]):
            time.sleep(0.2)  # until the child started
        children = ranks(trial)  # what kill_rank and the others aim at: the spawned child
        held = ranks(trial, spawned_first=False)
        assert [p.pid for p in held] == [rank.pid]
        assert len(children) == 1 and children[0].pid != rank.pid
        assert "multiprocessing.spawn" in " ".join(children[0].cmdline())
    finally:
        os.killpg(launcher.pid, 9)
        launcher.wait(10)
