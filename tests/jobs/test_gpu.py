"""GPU paths (NCCL, DDP device_ids, torch SyncBatchNorm, fp16 GradScaler). Skipped without CUDA.

CI has no GPU; these run on a lent GPU machine (see benchmarks/train/RESULTS.md, "GPU checks", for
what was seen).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import EXAMPLES, REPO, digits_accuracy, python, run

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.fixture(autouse=True)
def _let_distrain_pick_the_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DISTRAIN_DEVICE", "")  # conftest pins the CPU suite to cpu


def test_digits_on_gpu_with_nccl_syncbn_fp16(tmp_path: Path) -> None:
    res = run(
        [
            python(),
            "-m",
            "distrain.cli",
            "run",
            "-n",
            "1",
            str(EXAMPLES / "train_digits.py"),
            "--epochs",
            "4",
            "--amp",
            "--sync-bn",
            "--out",
            str(tmp_path),
        ],
        timeout=300,
        check=True,
    )
    assert "backend nccl" in res.stdout and "device cuda" in res.stdout and "fp16" in res.stdout, (
        res.stdout
    )
    assert digits_accuracy(res.stdout) > 0.9, res.stdout[-2000:]


def test_syncbn_is_torchs_on_cuda(tmp_path: Path) -> None:
    script = tmp_path / "bn.py"
    script.write_text(
        "import torch, distrain\n"
        "ctx = distrain.init()\n"
        "m = ctx.prepare_model(torch.nn.Sequential(torch.nn.Conv2d(3, 4, 1), "
        "torch.nn.BatchNorm2d(4)), sync_bn=True)\n"
        "y = m(torch.randn(8, 3, 5, 5, device=ctx.device)); y.sum().backward()\n"
        "print('BN', type(ctx.unwrap(m)[1]).__name__, y.device, ctx.backend)\n"
    )
    res = run(
        [python(), "-m", "distrain.cli", "run", "-n", "1", str(script)], timeout=300, check=True
    )
    assert "BN SyncBatchNorm cuda:0 nccl" in res.stdout, res.stdout


def test_more_ranks_than_gpus_is_a_clear_error() -> None:
    n = torch.cuda.device_count() + 1
    res = run(
        [
            python(),
            "-m",
            "distrain.cli",
            "run",
            "-n",
            str(n),
            str(REPO / "tests" / "scripts" / "core_job.py"),
            "--out",
            "/tmp/none",
        ],
        timeout=300,
    )
    assert res.returncode != 0
    assert f"local rank {n - 1} but only {n - 1} GPU(s) visible" in res.stdout + res.stderr


def test_gpus_flag_selects_devices(tmp_path: Path) -> None:
    script = tmp_path / "vis.py"
    script.write_text(
        "import os, torch, distrain\nctx = distrain.init()\nprint('VIS', "
        "os.environ['CUDA_VISIBLE_DEVICES'], ctx.device)\n"
    )
    res = run(
        [python(), "-m", "distrain.cli", "run", "--gpus", "0", str(script)], timeout=300, check=True
    )
    assert "VIS 0 cuda:0" in res.stdout


def test_sigkill_resume_on_one_gpu_is_bitwise(tmp_path: Path) -> None:
    """The GPU acceptance's kill → resume figure on a one-GPU machine: rank 0 is SIGKILLed at
    step 6 and the restarted job ends bit for bit like an uninterrupted one (the first GPU run
    of benchmarks/recovery/recovery.py failed here: the worker left its labels on the CPU)."""
    from helpers.checkpoints import assert_bitwise, distrain_run, ok

    ok(distrain_run(1, "--out", str(tmp_path / "base.pt")))
    d, out = tmp_path / "ckpt", tmp_path / "final.pt"
    res = ok(
        distrain_run(
            1, "--dir", str(d), "--out", str(out), "--kill-at", "6", "--fault-rank", "0", restarts=1
        )
    )
    assert (d / "FAULT_DONE").exists(), "the fault was not injected"
    assert "distrain: resumed from" in res.stdout, res.stdout[-2000:]
    assert_bitwise(tmp_path / "base.pt", out)
