"""launch/rehearse/environment.py: `distrain run --cpu`, launcher side (env, scripts, summary)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from distrain.events import FILE, emit
from distrain.launch.rehearse.environment import configure, summary
from distrain.launch.self_start.detect import find


def _script(tmp_path: Path, text: str) -> str:
    path = tmp_path / "train.py"
    path.write_text(text)
    return str(path)


def test_configure_sets_the_stand_in_count_and_boot_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", "/mine")
    env: dict[str, str] = {}
    agents, line = configure(_script(tmp_path, "print(1)\n"), 1, env, None)
    assert agents == 1 and env["DISTRAIN_CPU_REHEARSAL"] == "1"
    boot, rest = env["PYTHONPATH"].split(os.pathsep)
    assert boot.endswith("boot") and rest == "/mine"
    assert line == "distrain run --cpu: 1 CPU process stands in for 1 GPU; cuda → cpu, nccl → gloo"


def test_configure_runs_a_self_spawning_script_once(tmp_path: Path) -> None:
    env: dict[str, str] = {}
    script = _script(tmp_path, "import torch.multiprocessing as mp\nmp.spawn(f, nprocs=4)\n")
    agents, line = configure(script, 4, env, find(script))
    assert (
        agents == 1
        and env["DISTRAIN_CPU_REHEARSAL"] == "4"
        and env["DISTRAIN_SELF_STARTING"] == "1"
    )
    assert line.endswith(
        "(train.py starts them itself: torch.multiprocessing.spawn at line 2; it runs once)"
    )


def test_summary_sums_counts_over_processes(tmp_path: Path) -> None:
    emit("rehearsal", str(tmp_path), counts={"set_device": 1, ".to(cuda)": 5})
    emit("rehearsal", str(tmp_path), counts={"set_device": 1, "nccl → gloo": 1})
    emit("rehearsal", str(tmp_path), counts="broken")
    emit("breakdown", str(tmp_path), summary={"x": 100})  # another kind: not counted
    with open(tmp_path / FILE, "a") as f:
        f.write('{"kind": "rehearsal", "counts": {"torn"')  # a line cut short: skipped
    assert (
        summary(str(tmp_path))
        == "distrain run --cpu: mapped in 2 processes: .to(cuda) ×5, set_device ×2, nccl → gloo ×1"
    )


def test_summary_of_nothing_is_none(tmp_path: Path) -> None:
    assert summary(str(tmp_path)) is None
    assert summary(str(tmp_path / "absent")) is None
