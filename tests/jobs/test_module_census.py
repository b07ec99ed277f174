"""The module figures of scripts/structure_metrics.py equal what the processes hold.

scripts/module_census.py runs `distrain run -n 1` of a 4-step script: each figure is read from the
processes' own ``sys.modules`` at the first step.  Here the worker's figure is checked against
the worker's direct dump, printed on its stdout (another route out of the job), and the
launcher's against what a launcher is: the pipeline's modules, none of a worker's.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.paths import REPO

sys.path.insert(0, str(REPO / "scripts"))
import module_census  # noqa: E402

pytestmark = pytest.mark.timeout(300)


@pytest.mark.parametrize("options", [(), ("--start-method", "spawn")], ids=["fast", "spawn"])
def test_the_figure_is_the_processes_own_dump(options: tuple[str, ...]) -> None:
    """Worker: the figure equals its own dump; launcher: launch/ modules, no worker layers."""
    found = module_census.census(*options, timeout=240)
    assert found.worker == found.worker_printed
    assert "distrain.worker.context" in found.worker
    assert "distrain.launch.plan" not in found.worker  # a worker without the launcher's plan
    assert {"distrain.cli", "distrain.launch.cli", "distrain.launch.plan"} <= set(found.launcher)
    assert not [m for m in found.launcher if m.startswith(("distrain.worker", "distrain.parallel"))]
    fast = "distrain.worker.fast_start.forked" in found.worker
    assert fast == (not options)
    # the fork server runs on no launcher frame: its workers keep no launcher code alive but the
    # server's own module (launch/fast_start/server_fork.py; 28 modules when it ran on them)
    assert found.worker_launch_code == (["distrain.launch.fast_start.server_fork"] if fast else [])
    # the job's folder held its event stream (the breakdown a 4-step job reports)
    assert "distrain-job/events.jsonl" in found.files


def test_the_launcher_hook_survives_its_timer_firing_inside_it(tmp_path: Path) -> None:
    """A look longer than the timer's 20 ms (a loaded machine) re-enters the handler: one dump."""
    out, tmp = tmp_path / "out", tmp_path / "tmp"
    (tmp / "distrain-job-1").mkdir(parents=True)
    (tmp / "distrain-job-1" / "events.jsonl").touch()
    out.mkdir()
    (out / "worker-1.txt").touch()  # the worker has dumped: the first tick dumps the launcher
    # each look sleeps through two ticks (a sleep runs a due handler at once); the launcher is a
    # loop until its dump, where `distrain run` would be
    hook = module_census.LAUNCHER_HOOK.replace(
        "def look():\n", "def look():\n    __import__('time').sleep(0.05)\n"
    ).replace(
        "from distrain.cli import entry_point\nentry_point()",
        "while not dumped: __import__('time').sleep(0.01)",
    )
    assert hook.count("sleep") == 2
    env = dict(os.environ, MODULE_CENSUS_DIR=str(out), TMPDIR=str(tmp))
    res = subprocess.run(
        [sys.executable, "-c", hook], env=env, capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stderr[-2000:]
    assert (out / "launcher.txt").exists() and not (out / ".launcher").exists()
    assert (out / "files.txt").read_text().split() == ["distrain-job/events.jsonl"]
