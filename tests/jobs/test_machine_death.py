"""A pretend machine that dies (tests/helpers/netns_hosts.machine_dies) takes the names of its
semaphores with it, as a real machine's /dev/shm goes with the machine: Python's multiprocessing
names one under spawn and forkserver and only its creator's exit or resource tracker removes it,
both killed with the machine."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.netns_hosts import machine_dies, named_semaphores

#: a process that makes a named semaphore (a spawn context's Lock), prints its name and waits
HOLDER = """
import multiprocessing as mp, sys, time
lock = mp.get_context("spawn").Lock()
print(lock._semlock.name, flush=True)
time.sleep(60)
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("stopped", [False, True], ids=["running", "stopped"])
def test_a_dying_machine_s_semaphores_go_with_it(stopped: bool) -> None:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        path = Path("/dev/shm") / f"sem.{proc.stdout.readline().strip().lstrip('/')}"
        assert path.exists(), path
        assert str(path) in named_semaphores([proc.pid])
        if stopped:  # a frozen rank's machine dies too (the chaos campaign's SIGSTOP faults)
            proc.send_signal(signal.SIGSTOP)
        machine_dies([proc.pid], (signal.SIGCONT, signal.SIGKILL))
        assert proc.wait(timeout=20) == -signal.SIGKILL
        assert not path.exists(), f"{path} outlived its machine"
    finally:
        proc.kill()
        proc.wait()


def test_a_process_that_ended_well_left_nothing_to_find() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", HOLDER.replace("time.sleep(60)", "")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    name = proc.stdout.strip().lstrip("/")
    time.sleep(0.1)  # the resource tracker unlinks after its creator's exit
    assert not (Path("/dev/shm") / f"sem.{name}").exists()
