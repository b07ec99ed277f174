"""launch/rehearsal.py: `distrain run --cpu` on the launcher side: spawn detection, environment, summary."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from distrain.launch.rehearsal import configure, spawn_call_line, summary


def _script(tmp_path: Path, text: str) -> str:
    path = tmp_path / "train.py"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    ("source", "line"),
    [("import torch.multiprocessing as mp\n\nmp.spawn(main, nprocs=2)\n", 3),
     ("import torch.multiprocessing\ntorch.multiprocessing.start_processes(f)\n", 2),
     ("from torch.multiprocessing import spawn as go\ngo(f)\n", 2),
     ("from torch import multiprocessing as tmp\nx = 1\ntmp.spawn(f, nprocs=4)\n", 3),
     ("import multiprocessing as mp\nmp.spawn = None\nmp.Process(target=f)\n", None),
     ("def spawn(): pass\nspawn()\n", None),
     ("this is not python(\n", None)],
)  # fmt: skip
def test_spawn_call_line(tmp_path: Path, source: str, line: int | None) -> None:
    assert spawn_call_line(_script(tmp_path, source)) == line


def test_configure_sets_the_stand_in_count_and_boot_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", "/mine")
    env: dict[str, str] = {}
    agents, line = configure(_script(tmp_path, "print(1)\n"), 1, env)
    assert agents == 1 and env["DISTRAIN_CPU_REHEARSAL"] == "1"
    boot, rest = env["PYTHONPATH"].split(os.pathsep)
    assert boot.endswith("boot") and rest == "/mine"
    assert line == "distrain run --cpu: 1 CPU process stand in for 1 GPU; cuda → cpu, nccl → gloo"


def test_configure_runs_a_self_spawning_script_once(tmp_path: Path) -> None:
    env: dict[str, str] = {}
    agents, line = configure(_script(tmp_path, "import torch.multiprocessing as mp\nmp.spawn(f, nprocs=4)\n"), 4, env)
    assert agents == 1 and env["DISTRAIN_CPU_REHEARSAL"] == "4"
    assert line.endswith("(train.py starts them itself: torch.multiprocessing at line 2; it runs once)")


def test_summary_sums_counts_over_processes(tmp_path: Path) -> None:
    (tmp_path / "counts-1.json").write_text(json.dumps({"set_device": 1, ".to(cuda)": 5}))
    (tmp_path / "counts-2.json").write_text(json.dumps({"set_device": 1, "nccl → gloo": 1}))
    (tmp_path / "counts-3.json").write_text("{broken")
    (tmp_path / "other.json").write_text(json.dumps({"x": 100}))
    assert summary(str(tmp_path)) == "distrain run --cpu: mapped in 2 processes: .to(cuda) ×5, set_device ×2, nccl → gloo ×1"


def test_summary_of_nothing_is_none(tmp_path: Path) -> None:
    assert summary(str(tmp_path)) is None
    assert summary(str(tmp_path / "absent")) is None
