"""A SIGKILLed `distrain run` takes a self-starting script's own children along (issue 30), and a
failed job takes the children of a script not read as self-starting (issue 41).

The launcher → fork server → script chain holds by death signals; the script's children are
its own.  ``mp.spawn``'s children ask for SIGINT at their parent's death, which does nothing
when the job was started with SIGINT ignored (``distrain run ... &`` in a shell script, as
here) and otherwise starts a slow exit (~20 s under load); a ``Process`` loop's children ask
for nothing.  They trained on, re-parented to pid 1, with multiprocessing's resource tracker.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from helpers import SCRIPTS, python

MARK = "DTEST_SELFSTART_DEATH"

JOBS = {  # the script's arguments after OUT, and the files saying its children run
    "torch mp.spawn": (["spawn_train.py", "2", "--steps", "100000"], ["started"]),
    "Process loop": (["process_sleepers.py", "2"], ["stepped-0", "stepped-1"]),
}


def _marked(mark: str) -> list[int]:
    """Live (not zombie) processes whose environment carries the test's mark."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if f"{MARK}={mark}".encode() not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] != "Z":
                    found.append(int(pid))
        except OSError:
            continue
    return found


def _describe(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        return f"{pid} {cmdline[:90]}"
    except OSError:
        return f"{pid} (gone)"


def _port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def _background_job() -> None:
    """As a shell script's ``cmd &``: the job starts with SIGINT (and SIGQUIT) ignored."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGQUIT, signal.SIG_IGN)


@pytest.mark.slow
@pytest.mark.timeout(420)  # the start (three interpreters importing torch) took 240 s at load 26
@pytest.mark.parametrize("job", list(JOBS))
def test_sigkill_of_the_launcher_ends_the_scripts_own_children(job: str, tmp_path: Path) -> None:
    mark, out = uuid.uuid4().hex, tmp_path / "out"
    script, *args = JOBS[job][0]
    cmd = [python(), "-m", "distrain.cli", "run", "-n", "2", str(SCRIPTS / script), str(out), *args]
    env = {**os.environ, MARK: mark, "DTEST_MASTER_PORT": _port()}
    log = open(tmp_path / "job.log", "w")  # noqa: SIM115 - closed below, the job writes into it
    launcher = subprocess.Popen(cmd, env=env, stdout=log, stderr=log,
                                start_new_session=True, preexec_fn=_background_job)  # fmt: skip
    try:
        deadline = time.monotonic() + 360
        while not all((out / name).exists() for name in JOBS[job][1]):
            assert launcher.poll() is None, (
                f"the job ended (exit {launcher.returncode}) early:\n"
                + (tmp_path / "job.log").read_text()[-3000:]
            )
            assert time.monotonic() < deadline, "the children did not start"
            time.sleep(0.2)
        launcher.send_signal(signal.SIGKILL)  # the launcher alone, not its session
        launcher.wait()
        deadline = time.monotonic() + 10
        while (left := _marked(mark)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not left, (
            f"left running 10 s after the launcher's SIGKILL: {list(map(_describe, left))}"
        )
    finally:
        log.close()
        for pid in _marked(mark):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.timeout(300)
def test_children_of_a_script_not_read_as_self_starting_end_with_the_failed_job(
    tmp_path: Path,
) -> None:
    """Issue 41: a script that starts its own children (not read as self-starting: N copies, no
    watch) and fails. torchrun stops each worker's process group, children included; the fast
    start's workers were stopped by pid, and their children trained on, re-parented to pid 1."""
    mark, out = uuid.uuid4().hex, tmp_path / "out"
    out.mkdir()
    cmd = [python(), "-m", "distrain.cli", "run", "-n", "2", str(SCRIPTS / "orphans.py"),
           "--children"]  # fmt: skip
    env = {**os.environ, MARK: mark, "DTEST_ORPHANS_OUT": str(out)}
    # its own session, never killed as a group before the check: the children must end by the
    # job's own doing; its output in a file (children left behind would hold a pipe open)
    log = open(tmp_path / "job.log", "w")  # noqa: SIM115 - closed below, the job writes into it
    job = subprocess.Popen(cmd, env=env, stdout=log, stderr=log, start_new_session=True)
    try:
        job.wait(timeout=240)
        err = (tmp_path / "job.log").read_text()
        assert job.returncode == 1, err[-3000:]
        assert "ValueError: the script failed after its peers started their children" in err
        assert len(list(out.glob("child-*.pid"))) == 2  # rank 0's two children had started
        deadline = time.monotonic() + 10
        while (left := _marked(mark)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not left, f"left running after the job ended: {list(map(_describe, left))}"
    finally:
        log.close()
        if job.poll() is None:
            job.kill()
        for pid in _marked(mark):
            os.kill(pid, signal.SIGKILL)
