"""The examples run as documented: the README's main job, AMP, and the conversion pair."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from conftest import EXAMPLES, python, run


def test_digits_two_processes_reach_095(tmp_path: Path) -> None:
    """README's main job with default settings: ≥ 0.95 test accuracy on 2 CPU processes."""
    res = run([python(), "-m", "distrain.cli", "run", "-n", "2", str(EXAMPLES / "train_digits.py"), "--out", str(tmp_path)],
              timeout=400, check=True)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["world_size"] == 2
    assert metrics["test_accuracy"] >= 0.95, metrics
    assert "launcher torchelastic" in res.stdout and "done: test acc" in res.stdout
    state = torch.load(tmp_path / "model.pt", weights_only=True)
    assert "head.3.weight" in state


def test_digits_amp_and_sync_bn(tmp_path: Path) -> None:
    run([python(), "-m", "distrain.cli", "run", "-n", "2", str(EXAMPLES / "train_digits.py"), "--epochs", "2",
         "--amp", "--sync-bn", "--out", str(tmp_path)], timeout=400, check=True)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["compute_dtype"] == ("float16" if torch.cuda.is_available() else "bfloat16"), metrics
    assert 0.5 < metrics["test_accuracy"] <= 1.0, metrics  # bf16 on CPU still learns


def test_converted_script_runs_alone_and_distributed(tmp_path: Path) -> None:
    single = run([python(), str(EXAMPLES / "convert" / "distributed.py")], timeout=300, cwd=tmp_path, check=True)
    assert "epoch 4" in single.stdout and (tmp_path / "model.pt").exists()
    (tmp_path / "model.pt").unlink()
    multi = run([python(), "-m", "distrain.cli", "run", "-n", "2", str(EXAMPLES / "convert" / "distributed.py")],
                timeout=300, cwd=tmp_path, check=True)
    assert multi.stdout.count("epoch 4") == 1, "rank 0 alone prints"
    assert (tmp_path / "model.pt").exists()
