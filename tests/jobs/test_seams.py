"""The launcher's seam (launch/seam.py) and the fast start's server: what each process holds.

- a ``--start-method spawn`` launcher of a plain script imports no feature module;
- a fast-start worker, at its first step, holds none of the launcher's modules (the fork server
  is forked from the launcher, which has imported them by then, and forgets them): what a
  ``--start-method spawn`` worker holds, and the fast start's own worker modules;
- a spawn worker and a fast-start worker of a plain DDP script each hold at most 55 distrain
  modules (issue 42), and neither holds what such a run does not use (FSDP's code, the
  recorder, other launchers' detectors);
- a replica worker (``--replicas 2``) holds none of the launcher's modules either.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from helpers import SCRIPTS, python, run

#: the launcher's features, each a folder of launch/ (CONTRIBUTING.md "The four optional
#: features", and the fan-out to hosts)
FEATURE_PACKAGES = ("fast_start", "rehearse", "self_start", "replicas", "hosts")

#: the launcher, in-process: its job's exit code, then the distrain modules it held at the end
LAUNCHER = (
    "import json, sys\n"
    "from distrain.launch import cli\n"
    "code = cli.main(sys.argv[1:])\n"
    "held = sorted(m for m in sys.modules if m.startswith('distrain'))\n"
    "print('MODULES ' + json.dumps([code, held]))\n"
)


def _launcher_modules(*argv: str, cwd: Path) -> tuple[int, list[str]]:
    res = run([python(), "-c", LAUNCHER, *argv], timeout=180, cwd=cwd)
    assert res.returncode == 0, res.stderr
    line = next(x for x in res.stdout.splitlines() if x.startswith("MODULES "))
    code, held = json.loads(line.removeprefix("MODULES "))
    return code, held


def test_a_spawn_launcher_imports_no_feature_module(tmp_path: Path) -> None:
    script = tmp_path / "hello.py"
    script.write_text("import os\nprint('hello from rank', os.environ['RANK'])\n")
    code, held = _launcher_modules("--start-method", "spawn", "-n", "1", str(script), cwd=tmp_path)
    assert code == 0
    assert "distrain.launch.agent" in held and "distrain.launch.seam" in held  # really launched
    features = [m for m in held if m.split(".")[2:3] and m.split(".")[2] in FEATURE_PACKAGES]
    assert features == [], f"a spawn launcher imported feature modules: {features}"


def test_the_seam_loads_a_feature_when_asked(tmp_path: Path) -> None:
    script = tmp_path / "hello.py"
    script.write_text("import os\nprint('hello from rank', os.environ['RANK'])\n")
    argv = ("--cpu", "--start-method", "spawn", "-n", "1", str(script))
    code, held = _launcher_modules(*argv, cwd=tmp_path)
    assert code == 0 and "distrain.launch.rehearse.feature" in held


def _worker_modules(tmp_path: Path, method: str, nproc: int, *options: str) -> list[dict[str, Any]]:
    out = tmp_path / method
    out.mkdir()
    cmd = [python(), "-m", "distrain.cli", "run", "-n", str(nproc), "--start-method", method]
    res = run([*cmd, *options, str(SCRIPTS / "modules_at_step.py"), str(out)], timeout=240)
    assert res.returncode == 0, res.stderr
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(nproc)]


#: the most distrain modules a spawn worker of a plain DDP script holds at its first step
#: (issue 42: 55; 49 measured, CONTRIBUTING.md "Figures of the path")
SPAWN_WORKER_MODULES = 55
#: the most a fast-start worker holds at its first step, a spawn worker's and fast start's own
#: (issue 42: 55; 54 measured: the spawn worker's 49 and fast start's 5)
FAST_START_WORKER_MODULES = 55
#: the fast start's own worker modules (the forked entry, its helpers, the server's preload whose
#: environment snapshot the worker rebuilds from, and forked.py's process lineage): what a
#: fast-start worker holds beyond a spawn worker's
FAST_START_OWN = ("distrain.worker.fast_start", "distrain.process.lineage")
#: what a plain DDP run does not use: FSDP's code, SyncBatchNorm, the metrics recorder without a
#: run directory, the progress bar without a terminal, distrain.spawn, the spawn and the other
#: launchers' detectors
NOT_IN_A_PLAIN_RUN = (
    "distrain.parallel.fsdp",
    "distrain.parallel.heap",
    "distrain.parallel.materialise",
    "distrain.parallel.batchnorm",
    "distrain.monitor.recorder",
    "distrain.monitor.probes",
    "distrain.monitor.progress",
    "distrain.launch",
    "distrain.cluster.spawn",
    "distrain.cluster.slurm",
)


def test_a_fast_start_worker_holds_no_launcher_module(tmp_path: Path) -> None:
    spawned = set(_worker_modules(tmp_path, "spawn", 1)[0]["modules"])
    assert len(spawned) <= SPAWN_WORKER_MODULES, sorted(spawned)
    for rank, seen in enumerate(_worker_modules(tmp_path, "fast", 2)):
        assert seen["forked"], "not forked from the fast start's server"
        launch = [m for m in seen["modules"] if m.startswith("distrain.launch")]
        assert len(launch) <= 2, f"rank {rank} holds the launcher's modules: {launch}"
        # what a fresh interpreter's worker holds, and the forked worker's own entry: nothing
        # of the launcher's inherited through the server
        extra = set(seen["modules"]) - spawned
        assert all(m.startswith(FAST_START_OWN) for m in extra), sorted(extra)
        # 49 + these 5 (CONTRIBUTING.md "Figures of the path")
        assert len(seen["modules"]) <= FAST_START_WORKER_MODULES, sorted(extra)
    for held in (spawned, set(seen["modules"])):
        unused = sorted(m for m in held if m.startswith(NOT_IN_A_PLAIN_RUN))
        assert unused == [], f"a plain DDP worker imported what it does not use: {unused}"


@pytest.mark.skipif(importlib.util.find_spec("torchft") is None, reason="torchft not installed")
def test_a_replica_worker_holds_no_launcher_module(tmp_path: Path) -> None:
    """`--replicas`: each group's launcher starts the fork server its workers fork from (97
    modules, 29 of them the launcher's, before); a DDP replica worker needs no FSDP code."""
    (seen,) = _worker_modules(tmp_path, "fast", 1, "--replicas", "2")  # each group's rank 0
    assert seen["forked"], "not forked from the fast start's server"
    launch = [m for m in seen["modules"] if m.startswith("distrain.launch")]
    assert len(launch) <= 2, f"a replica worker holds the launcher's modules: {launch}"
    unused = sorted(m for m in seen["modules"] if m.startswith(NOT_IN_A_PLAIN_RUN))
    assert unused == [], f"a DDP replica worker imported what it does not use: {unused}"
