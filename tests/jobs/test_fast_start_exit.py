"""How a fast-start worker ends: the agent learns it finished without waiting on the worker.

torch's agent waits for a function entrypoint's return value, not for its exit code
(worker/fast_start/as_exec.py): a script ending in ``os._exit(0)`` hung the job forever,
and a rank SIGKILLed after its script finished, while it slept in torch's wait for the agent to
read that value, left the agent's ``Event.set`` waiting forever (chaos seed 4302, trial 8).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from helpers import distrain_run, python, run

_OS_EXIT = """
import os, sys, torch
# one write per line: under `python -u` print() writes the text and its newline apart, and the
# two ranks' lines, on one pipe, interleave between them
sys.stdout.write(f"rank {os.environ['RANK']} done\\n")
sys.stdout.flush()
sys.stdout.write("buffered, not flushed\\n")
os._exit(int(os.environ.get("EXIT_CODE", "0")))
"""

# rank 1 finishes at once and leaves its pid; rank 0 trains on until the test says stop
_EARLY_END = """
import os, time
from pathlib import Path
import torch
out = Path(os.environ["OUT"])
if os.environ["RANK"] == "1":
    (out / "pid.1").write_text(str(os.getpid()))
else:
    while not (out / "go").exists():
        time.sleep(0.05)
print(f"rank {os.environ['RANK']} finished", flush=True)
"""


def test_a_script_ending_in_os_exit_0_ends_the_job_as_under_torchrun(tmp_path: Path) -> None:
    script = tmp_path / "exits.py"
    script.write_text(_OS_EXIT)
    torchrun = [python(), "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    reference = run([*torchrun, str(script)], timeout=120)
    ours = distrain_run("-n", "2", str(script), timeout=120)
    assert reference.returncode == 0 == ours.returncode, ours.stderr[-2000:]
    for result in (reference, ours):  # os._exit skips the flush: what python -u prints anyway
        assert sorted(result.stdout.split("\n")[:-1]) == sorted(
            ["rank 0 done", "rank 1 done", *["buffered, not flushed"] * 2]
        ), result.stdout


_EXECUTOR = """
from concurrent.futures import ThreadPoolExecutor
import threading, time, torch
pool = ThreadPoolExecutor(2)  # never shut down: the interpreter's exit stops its workers
assert pool.submit(lambda: 6 * 7).result() == 42
done = []
threading.Thread(target=lambda: (time.sleep(1), done.append(1), print("thread done"))).start()
print("script done", flush=True)
"""


def test_a_script_leaving_an_executor_and_a_thread_running_ends_as_python_does(
    tmp_path: Path,
) -> None:
    """The executor's workers are stopped and the non-daemon thread is waited for, as at a fresh
    interpreter's exit (torch.compile leaves such an executor: a bare join hung its job)."""
    script = tmp_path / "pool.py"
    script.write_text(_EXECUTOR)
    result = distrain_run("-n", "1", str(script), timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines() == ["script done", "thread done"], result.stdout


def test_os_exit_with_a_failure_code_still_fails_the_job(tmp_path: Path) -> None:
    script = tmp_path / "exits.py"
    script.write_text(_OS_EXIT)
    result = distrain_run("-n", "2", str(script), env={"EXIT_CODE": "3"}, timeout=120)
    assert result.returncode != 0
    assert "exited with code 3" in result.stderr.splitlines()[-1], result.stderr[-1500:]


def test_a_rank_killed_after_its_script_finished_does_not_hang_the_job(tmp_path: Path) -> None:
    """The finished rank is gone by the time it is killed (it waits for nobody); the job ends 0."""
    script = tmp_path / "early.py"
    script.write_text(_EARLY_END)
    env = {**os.environ, "OUT": str(tmp_path)}
    cmd = [python(), "-m", "distrain.cli", "run", "-n", "2", str(script)]
    launcher = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        pid_file = tmp_path / "pid.1"
        deadline = time.monotonic() + 120
        while not pid_file.exists() and launcher.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        pid = int(pid_file.read_text())
        gone_by = time.monotonic() + 60  # the rank's own end: atexit handlers, flush, exit
        while _alive(pid) and time.monotonic() < gone_by:
            time.sleep(0.05)
        alive = _alive(pid)
        if alive:  # the fault chaos found: a kill while it waits for the agent to read
            os.kill(pid, signal.SIGKILL)
        (tmp_path / "go").write_text("")
        out, err = launcher.communicate(timeout=90)
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
    assert not alive, "the finished rank lingered after its script ended"
    assert launcher.returncode == 0, err.decode()[-2000:]
    assert b"rank 0 finished" in out and b"rank 1 finished" in out


def _alive(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie, exited but not reaped, counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"
