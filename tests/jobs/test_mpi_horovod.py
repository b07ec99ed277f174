"""The same distrain script under real `mpirun` and `horovodrun`, directly and via `--launcher`."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from pathlib import Path

import pytest
from helpers import REPO, python, run

SCRIPT = str(REPO / "tests" / "scripts" / "mn_train.py")
needs_mpirun = pytest.mark.skipif(
    shutil.which("mpirun") is None, reason="mpirun not installed (apt-get install openmpi-bin)"
)
# the ranks agree on a master through mpi4py (no MASTER_ADDR/PORT is given)
needs_mpi4py = pytest.mark.skipif(
    importlib.util.find_spec("mpi4py") is None, reason="mpi4py not installed (pip install mpi4py)"
)
ROOT_FLAGS = ["--allow-run-as-root"] if os.geteuid() == 0 else []


def _result(out: Path, world: int, launcher: str) -> dict:
    result = json.loads(out.read_text())
    assert result["world_size"] == world and result["rank_sum"] == world * (world - 1) / 2
    assert {r["launcher"] for r in result["ranks"]} == {launcher}
    return result


@needs_mpirun
@needs_mpi4py
@pytest.mark.timeout(300)
def test_mpirun_direct_sane_threads(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    # mpirun's default core binding narrows each rank's affinity mask; distrain reads the mask
    res = run(
        [
            "mpirun",
            "-np",
            "2",
            *ROOT_FLAGS,
            "--oversubscribe",
            "-x",
            "PYTHONPATH",
            python(),
            SCRIPT,
            "--out",
            str(out),
        ],
        timeout=240,
        env={"OMP_NUM_THREADS": ""},
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    result = _result(out, 2, "openmpi")
    cores = len(os.sched_getaffinity(0))
    for rank in result["ranks"]:
        assert 1 <= rank["threads"] <= max(1, cores // 2), rank  # never 2 ranks × all cores


@needs_mpirun
@needs_mpi4py
@pytest.mark.timeout(300)
@pytest.mark.slow
def test_distrain_run_launcher_mpirun(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    res = run(
        [
            python(),
            "-m",
            "distrain.cli",
            "run",
            "--launcher",
            "mpirun",
            "-n",
            "2",
            SCRIPT,
            "--out",
            str(out),
        ],
        timeout=240,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "--bind-to none" in res.stderr
    _result(out, 2, "openmpi")
    # bad use is one clear line
    res = run(
        [
            python(),
            "-m",
            "distrain.cli",
            "run",
            "--launcher",
            "mpirun",
            "--nnodes",
            "2",
            "--master-addr",
            "10.200.0.1",
            SCRIPT,
        ],
        timeout=120,
    )
    assert (
        res.returncode == 2
        and "runs on one node here" in res.stderr
        and "Traceback" not in res.stderr
    )


@pytest.mark.skipif(
    importlib.util.find_spec("horovod") is None or shutil.which("horovodrun") is None,
    reason="Horovod is optional and not installed (scripts/install-horovod.sh)",
)
@pytest.mark.timeout(300)
@pytest.mark.slow
def test_horovodrun(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    res = run(
        [
            python(),
            "-m",
            "distrain.cli",
            "run",
            "--launcher",
            "horovodrun",
            "-n",
            "2",
            SCRIPT,
            "--out",
            str(out),
        ],
        timeout=240,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "horovodrun --gloo -np 2 -H localhost:2" in res.stderr
    _result(out, 2, "horovod")  # gloo mode: HOROVOD_RANK/SIZE, store address agreed through Horovod
    # started directly; Horovod built with MPI runs mpirun underneath: the Open MPI environment
    # applies
    res = run(
        ["horovodrun", "-np", "2", "-H", "localhost:2", python(), SCRIPT, "--out", str(out)],
        timeout=240,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    mode = "openmpi" if "[1,0]<stdout>" in res.stdout else "horovod"
    result = _result(out, 2, mode)
    assert all(r["threads"] >= 1 for r in result["ranks"])
