"""Modes × idioms, the `--cpu` row: every idiom script rehearsed on stand-in GPUs.

Each script asks ``torch.cuda.is_available()`` and so, under `distrain run --cpu -n 2`, takes its
GPU path (nccl, ``cuda:LOCAL_RANK``, ``init_device_mesh("cuda", ...)``, Accelerate's and
Lightning's CUDA accelerators) on two CPU processes.  "Works" means exit 0, both ranks finished
every step with the same parameters, and they equal, bit for bit, the script's CPU run as its
authors launch it (`torchrun --nproc-per-node 2`, or `python script.py` for a self-starting
script), whose GPU check finds no GPU.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from helpers import python
from helpers.compat import IDIOMS, compat, race_reported_by, reference_digest, run_idiom
from helpers.torch_races import torch_exit_race

STEPS = "12"
REHEARSE = [python(), "-m", "distrain.cli", "run", "--cpu", "-n", "2"]
pytestmark = pytest.mark.timeout(600)


def _env() -> dict[str, str]:
    with socket.socket() as s:  # the self-starting script's fixed port, free for this test
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    return {"IDIOM_STEPS": STEPS, "IDIOM_MASTER_PORT": port}


#: the frameworks' imports make these two jobs take longer than the suite's ~20 s for a fast test
_SLOW = {"accelerate", "lightning", "fabric"}


def _marks(idiom: str) -> list[pytest.MarkDecorator]:
    return [compat("cpu", idiom), *([pytest.mark.slow] if idiom in _SLOW else [])]


@pytest.mark.parametrize(
    "idiom", [pytest.param(i, marks=_marks(i)) for i in IDIOMS], ids=list(IDIOMS)
)
def test_cpu_rehearsal_equals_the_scripts_cpu_run(
    idiom: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    reference = reference_digest(idiom, tmp_path_factory, STEPS)  # the plain cells' reference
    # the suite pins DISTRAIN_DEVICE=cpu; a user's job leaves it unset ("" reads as unset), so
    # distrain.init() takes the stand-in GPU as it would a real one
    env = {**_env(), "DISTRAIN_DEVICE": ""}
    result, finals = run_idiom(REHEARSE, idiom, tmp_path / "cpu", env=env, timeout=300)
    if not torch_exit_race(result, race_reported_by(idiom)):  # self_start's children only
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "distrain run --cpu: 2 CPU processes stand in for 2 GPUs" in result.stderr
    assert [r["rank"] for r in finals] == [0, 1]
    assert all(r["steps"] == int(STEPS) and r["world"] == 2 for r in finals), finals
    assert {r["digest"] for r in finals} == {reference}, (finals, reference)
    if idiom != "self_start":  # its children train on gloo and CPU tensors: nothing to map
        assert "distrain run --cpu: mapped in 2 processes" in result.stderr, result.stderr[-2000:]
