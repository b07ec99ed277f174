"""`distrain run --replicas`: real TorchFT lighthouse, real replica groups, real SIGKILL.

The script (tests/scripts/replica_job.py) is a normal distrain script without TorchFT code.
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
from helpers import SCRIPTS, kill_group, python, run

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("torchft") is None,
    reason="torchft not installed (pip install 'distrain[ft]')",
)

SCRIPT = str(SCRIPTS / "replica_job.py")


def _finals(out: Path) -> dict[int, dict[str, object]]:
    return {int(p.name.split(".")[1]): json.loads(p.read_text()) for p in out.glob("final.*.json")}


def _starts(out: Path) -> list[tuple[int, int]]:
    return [
        (int(pid), int(group))
        for pid, group, _ in (line.split() for line in (out / "starts").read_text().splitlines())
    ]


@pytest.mark.timeout(300)
def test_survivor_trains_through_a_sigkill(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    cmd = [python(), "-m", "distrain.cli", "run", "--replicas", "2", "-n", "1", SCRIPT,
           "--out", str(out), "--dir", str(tmp_path / "ckpt"), "--steps", "60", "--kill-at", "25", "--kill-group", "1"]  # fmt: skip
    res = run(cmd, timeout=280)
    assert res.returncode == 0, res.stderr[-3000:]
    starts = _starts(out)
    survivor = [pid for pid, group in starts if group == 0]
    assert len(survivor) == 1, starts  # the script's start ran once in the group that did not fail
    assert len([pid for pid, group in starts if group == 1]) == 2, (
        starts
    )  # killed once, replaced once
    finals = _finals(out)
    assert finals[0]["pid"] == survivor[0]  # the same process trained to the end
    assert finals[0]["step"] == finals[1]["step"] == 60
    assert (
        finals[0]["params"] == finals[1]["params"]
    )  # healed, then the same committed steps: bit for bit
    assert (
        "distrain run: replica group 1 lost at step 25 (rank 0, pid" in res.stderr
        and "SIGKILL); 1/2 groups continue" in res.stderr
    )
    assert "distrain run: replica group 1 healed from group 0 at step" in res.stderr


@pytest.mark.timeout(300)
def test_lighthouse_death_stops_the_job_in_one_line(tmp_path: Path) -> None:
    import psutil

    out = tmp_path / "out"
    out.mkdir()
    cmd = [python(), "-m", "distrain.cli", "run", "--replicas", "2", "-n", "1", SCRIPT,
           "--out", str(out), "--dir", str(tmp_path / "ckpt"), "--steps", "100000"]  # fmt: skip
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 200
        while not ((out / "starts").exists() and len(_starts(out)) >= 2):
            assert time.monotonic() < deadline and proc.poll() is None, "the groups did not start"
            time.sleep(0.5)
        time.sleep(2)  # training
        (house,) = [
            p
            for p in psutil.Process(proc.pid).children()
            if any(os.path.basename(a) == "torchft_lighthouse" for a in p.cmdline()[:2])
        ]
        os.kill(house.pid, signal.SIGKILL)
        _, err = proc.communicate(timeout=60)  # nothing hangs
    finally:
        kill_group(proc)
    assert proc.returncode != 0
    assert (
        f"distrain run: error: the TorchFT lighthouse (pid {house.pid}) ended (SIGKILL)" in err
    ), err[-3000:]
