"""launch/mpi.py: the mpirun / horovodrun command lines `run --launcher` builds (not run)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import pytest

from distrain.errors import UsageError
from distrain.launch import mpi
from distrain.launch.plan import plan


def _args(**over: object) -> argparse.Namespace:
    values = {"launcher": "mpirun", "nnodes": "1:1", "nproc_per_node": "4",
              "training_script": "train.py",
              "training_script_args": ["--lr", "1"], "module": False,
              "no_python": False}  # fmt: skip
    values.update(over)
    return argparse.Namespace(**values)


@pytest.fixture
def tools(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mpi.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(mpi, "usable_cores", lambda: 2)
    monkeypatch.setattr(mpi.os, "geteuid", lambda: 1000)
    for name in list(os.environ):  # only what each test sets is forwarded
        if name.startswith(mpi._FORWARD_PREFIXES):
            monkeypatch.delenv(name)


def test_open_mpi_command(tools: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mpi, "is_open_mpi", lambda path: True)
    monkeypatch.setenv("DISTRAIN_WATCHDOG", "30")
    cmd = mpi.command_for(_args(), {"OMP_NUM_THREADS": "1", "NCCL_DEBUG": "INFO", "HOME_X": "no"})
    assert cmd[:5] == ["/usr/bin/mpirun", "-np", "4", "--bind-to", "none"]
    assert "--oversubscribe" in cmd  # 4 ranks on 2 cores
    assert "--allow-run-as-root" not in cmd
    forwarded = [cmd[i + 1] for i, tok in enumerate(cmd) if tok == "-x"]
    assert forwarded == ["DISTRAIN_WATCHDOG", "NCCL_DEBUG", "OMP_NUM_THREADS"]
    assert cmd[-5:] == [sys.executable, "-u", "train.py", "--lr", "1"]


def test_open_mpi_as_root_within_the_cores(tools: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mpi, "is_open_mpi", lambda path: True)
    monkeypatch.setattr(mpi.os, "geteuid", lambda: 0)
    cmd = mpi.mpirun_command(_args(nproc_per_node="2"), {})
    assert "--allow-run-as-root" in cmd and "--oversubscribe" not in cmd


def test_mpich_command_passes_values_with_genv(
    tools: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mpi, "is_open_mpi", lambda path: False)
    cmd = mpi.command_for(
        _args(module=True, training_script="pkg.train"), {"DISTRAIN_RUN_DIR": "/r"}
    )
    assert cmd[:3] == ["/usr/bin/mpirun", "-n", "4"]
    assert cmd[3:6] == ["-genv", "DISTRAIN_RUN_DIR", "/r"]
    assert cmd[-5:] == [sys.executable, "-m", "pkg.train", "--lr", "1"]


def test_horovodrun_command(tools: None) -> None:
    cmd = mpi.command_for(
        _args(
            launcher="horovodrun",
            no_python=True,
            training_script="./run.sh",
            training_script_args=[],
        ),
        {},
    )
    assert cmd == ["/usr/bin/horovodrun", "--gloo", "-np", "4", "-H", "localhost:4", "./run.sh"]


def test_launchers_run_on_one_node_only(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    with pytest.raises(UsageError, match="--launcher mpirun runs on one node here"):
        plan(["--launcher", "mpirun", "--nnodes", "2", "--master-addr", "x", str(script)])


def test_missing_launcher_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mpi.shutil, "which", lambda name: None)
    with pytest.raises(UsageError, match="mpirun not found"):
        mpi.command_for(_args(), {})
    with pytest.raises(UsageError, match="horovodrun not found"):
        mpi.command_for(_args(launcher="horovodrun"), {})
