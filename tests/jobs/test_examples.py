"""The examples run as documented: the README's main job, AMP, and the conversion pair."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import EXAMPLES, digits_accuracy, python, run


@pytest.mark.slow
def test_digits_two_processes_reach_095(tmp_path: Path) -> None:
    """README's main job with default settings: ≥ 0.95 test accuracy on 2 CPU processes."""
    res = run(
        [
            python(),
            "-m",
            "distrain.cli",
            "run",
            "-n",
            "2",
            str(EXAMPLES / "train_digits.py"),
            "--out",
            str(tmp_path),
        ],
        timeout=400,
        check=True,
    )
    assert digits_accuracy(res.stdout) >= 0.95, res.stdout[-2000:]
    assert "launcher torchelastic" in res.stdout and "on 2 process(es)" in res.stdout
    state = torch.load(tmp_path / "model.pt", weights_only=True)
    assert "head.3.weight" in state


def test_digits_amp_and_sync_bn(tmp_path: Path) -> None:
    res = run(
        [
            python(),
            "-m",
            "distrain.cli",
            "run",
            "-n",
            "2",
            str(EXAMPLES / "train_digits.py"),
            "--epochs",
            "2",
            "--amp",
            "--sync-bn",
            "--out",
            str(tmp_path),
        ],
        timeout=400,
        check=True,
    )
    dtype = "float16" if torch.cuda.is_available() else "bfloat16"
    assert res.stdout.count(f"({dtype} compute)") == 2, res.stdout[
        -2000:
    ]  # autocast really ran in low precision
    assert 0.5 < digits_accuracy(res.stdout) <= 1.0, res.stdout[-2000:]  # bf16 on CPU still learns


@pytest.mark.slow
def test_converted_script_runs_alone_and_distributed(tmp_path: Path) -> None:
    single = run(
        [python(), str(EXAMPLES / "convert" / "distributed.py")],
        timeout=300,
        cwd=tmp_path,
        check=True,
    )
    assert "epoch 4" in single.stdout and (tmp_path / "model.pt").exists()
    (tmp_path / "model.pt").unlink()
    multi = run(
        [
            python(),
            "-m",
            "distrain.cli",
            "run",
            "-n",
            "2",
            str(EXAMPLES / "convert" / "distributed.py"),
        ],
        timeout=300,
        cwd=tmp_path,
        check=True,
    )
    assert multi.stdout.count("epoch 4") == 1, "rank 0 alone prints"
    assert (tmp_path / "model.pt").exists()
