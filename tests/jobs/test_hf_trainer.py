"""A Hugging Face `Trainer` script (tests/scripts/hf_trainer.py: a tiny GPT-2 from a config, no
distrain): `distrain run` trains it bit for bit as torchrun does, and `--replicas` refuses it in
one line at its first optimizer step, where it once ran two independent copies and said nothing
(issue "`--replicas` never runs a script wrong")."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from helpers import SCRIPTS, python, run
from helpers.compat import torch_exit_race

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None,
    reason="transformers not installed (pip install -e '.[dev]')",
)

SCRIPT = str(SCRIPTS / "hf_trainer.py")
TORCHRUN = [python(), "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
DISTRAIN = [python(), "-m", "distrain.cli", "run"]


def _finals(out: Path) -> list[dict[str, Any]]:
    return sorted(
        (json.loads(p.read_text()) for p in out.glob("final.*.json")), key=lambda r: r["rank"]
    )


def test_distrain_run_trains_a_trainer_script_as_torchrun_does(tmp_path: Path) -> None:
    ref = run([*TORCHRUN, SCRIPT], env={"HF_OUT": str(tmp_path / "ref")}, timeout=300)
    assert ref.returncode == 0 or torch_exit_race(ref, "torchrun"), ref.stderr[-3000:]
    ours = run([*DISTRAIN, "-n", "2", SCRIPT], env={"HF_OUT": str(tmp_path / "run")}, timeout=300)
    assert ours.returncode == 0, ours.stderr[-3000:]
    reference, finals = _finals(tmp_path / "ref"), _finals(tmp_path / "run")
    assert [(r["rank"], r["steps"]) for r in finals] == [(0, 8), (1, 8)], finals
    assert {r["digest"] for r in finals} == {reference[0]["digest"]}, (finals, reference)


def test_replicas_refuse_a_trainer_script_in_one_line(tmp_path: Path) -> None:
    out = tmp_path / "run"
    cmd = [*DISTRAIN, "--replicas", "2", "-n", "1", SCRIPT]
    result = run(cmd, env={"HF_OUT": str(out)}, timeout=300)
    assert result.returncode == 3, result.stderr[-3000:]
    assert _finals(out) == []  # no copy trained to its end
    errors = [line for line in result.stderr.splitlines() if "error" in line.lower()]
    assert errors == [
        "distrain run: error: hf_trainer.py cannot run under --replicas: this process stepped "
        "an optimizer without calling distrain.init(), so nothing would be replicated across "
        "the groups; --replicas needs distrain.init() and ctx.prepare_model(model) "
        "(docs/fault_tolerance.md); for plain data parallel use `distrain run -n N`"
    ], result.stderr[-3000:]
