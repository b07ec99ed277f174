"""``kill -USR1 <rank pid>`` prints that rank's stacks and the job goes on, watchdog or not.

Real jobs on gloo: the test waits until both ranks train, sends SIGUSR1 to rank 1, lets the ranks
finish, and wants exit 0 with rank 1's stack (a frame of the training script) in the output.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from helpers import SCRIPTS, kill_group, python

SCRIPT = str(SCRIPTS / "signal_job.py")
#: faulthandler's frame line for the training script
SCRIPT_FRAME = 'signal_job.py", line'


def signal_rank_while_training(cmd: list[str], out: Path, timeout: float = 150) -> tuple[int, str]:
    """Start `cmd`, SIGUSR1 rank 1 once both ranks train, let it finish; (exit code, stderr)."""
    err_path = out / "stderr.txt"
    with open(err_path, "w") as err:
        proc = subprocess.Popen(cmd, stdout=err, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + timeout
        while not all((out / f"pid{r}").exists() for r in (0, 1)):
            assert proc.poll() is None, err_path.read_text()[-3000:]
            assert time.monotonic() < deadline, "the ranks never started training"
            time.sleep(0.1)
        os.kill(int((out / "pid1").read_text()), signal.SIGUSR1)
        time.sleep(1)  # a few more steps after the dump: the rank really goes on
        (out / "signalled").touch()
        code = proc.wait(max(1.0, deadline - time.monotonic()))
        return code, err_path.read_text()
    except subprocess.TimeoutExpired:
        pytest.fail(f"timed out: {cmd}\n{err_path.read_text()[-3000:]}")
    finally:
        kill_group(proc)


@pytest.mark.timeout(200)
@pytest.mark.parametrize("plain", [False, True], ids=["distrain-init", "plain-script"])
def test_usr1_dumps_stacks_under_distrain_run(tmp_path: Path, plain: bool) -> None:
    """`distrain run` without --watchdog: the signalled rank dumps its stacks and trains on."""
    cmd = [python(), "-m", "distrain.cli", "run", "-n", "2", SCRIPT, str(tmp_path)]
    code, output = signal_rank_while_training(cmd + (["--plain"] if plain else []), tmp_path)
    assert code == 0, output[-3000:]
    assert "most recent call first" in output and SCRIPT_FRAME in output, output[-3000:]
    assert "rank 1 done after" in output, output[-3000:]


@pytest.mark.timeout(200)
def test_usr1_dumps_stacks_under_torchrun(tmp_path: Path) -> None:
    """A script that calls distrain.init() under plain torchrun: the same dump, the same exit 0."""
    cmd = [
        python(),
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        SCRIPT,
        str(tmp_path),
    ]
    code, output = signal_rank_while_training(cmd, tmp_path)
    assert code == 0, output[-3000:]
    assert "most recent call first" in output and SCRIPT_FRAME in output, output[-3000:]
