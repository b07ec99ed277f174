"""Story 6 and 7: exact evaluation, CPU SyncBatchNorm, gradient accumulation — real gloo jobs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from helpers import REPO, distrain_run, python, run
from torch import nn

JOB = str(REPO / "tests" / "scripts" / "core_job.py")


def f64(value: list) -> torch.Tensor:
    return torch.tensor(value, dtype=torch.float64)


def launch(out: Path, world: int, *args: str) -> list[dict]:
    if world == 1:
        run([python(), JOB, "--out", str(out), *args], timeout=180, check=True)
    else:
        distrain_run("-n", str(world), JOB, "--out", str(out), *args, timeout=180, check=True)
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(world)]


@pytest.mark.slow
def test_exact_eval_any_world_size(tmp_path: Path) -> None:
    """359 samples (odd) on 1, 2, 3 ranks: every sample counted once, same accuracy to the bit."""
    counts = {}
    for world in (1, 2, 3):
        results = launch(tmp_path / str(world), world, "--mode", "eval")
        assert sum(r["shard_size"] for r in results) == 359
        assert all((r["correct"], r["count"]) == (results[0]["correct"], 359) for r in results)
        counts[world] = results[0]["correct"]
    assert counts[1] == counts[2] == counts[3]


@pytest.mark.parametrize("world", [2, 3])
def test_cpu_sync_batchnorm_matches_full_batch(tmp_path: Path, world: int) -> None:
    results = launch(tmp_path, world, "--mode", "syncbn")
    # the same computation on one process over the concatenated batch
    torch.set_default_dtype(torch.float64)
    try:
        g = torch.Generator().manual_seed(11)
        full = torch.randn(6 * world, 3, 4, 4, generator=g).requires_grad_(True)
        upstream = torch.randn(6 * world, 3, 4, 4, generator=g)
        bn = nn.BatchNorm2d(3)
        with torch.no_grad():
            bn.weight.copy_(torch.tensor([1.5, 0.5, 2.0]))
            bn.bias.copy_(torch.tensor([0.1, -0.2, 0.3]))
        out = bn(full)
        (out * upstream).sum().backward()
    finally:
        torch.set_default_dtype(torch.float32)
    for r, res in enumerate(results):
        assert res["bn_class"] == "CPUSyncBatchNorm"
        sl = slice(r * 6, (r + 1) * 6)
        torch.testing.assert_close(f64(res["out"]), out[sl].detach(), rtol=1e-6, atol=1e-9)
        torch.testing.assert_close(f64(res["grad_in"]), full.grad[sl], rtol=1e-6, atol=1e-9)
        # DDP averages the per-rank parameter grads; the loss is a sum, so scale back by world
        torch.testing.assert_close(f64(res["grad_w"]) * world, bn.weight.grad, rtol=1e-6, atol=1e-9)
        torch.testing.assert_close(f64(res["grad_b"]) * world, bn.bias.grad, rtol=1e-6, atol=1e-9)
        torch.testing.assert_close(f64(res["running_mean"]), bn.running_mean, rtol=1e-6, atol=1e-9)
        torch.testing.assert_close(f64(res["running_var"]), bn.running_var, rtol=1e-6, atol=1e-9)


def test_gradient_accumulation_equals_full_batch(tmp_path: Path) -> None:
    """3 micro-batches of 2 on 2 ranks (all-reduce only on the last) == one step on 12 samples."""
    full = launch(tmp_path / "full", 1, "--batch-size", "12", "--steps", "4")
    accum = launch(tmp_path / "accum", 2, "--batch-size", "2", "--accum", "3", "--steps", "4")
    for a, b in zip(accum[0]["final"], full[0]["final"], strict=True):
        torch.testing.assert_close(f64(a), f64(b), rtol=1e-6, atol=1e-9)
    assert accum[0]["final"] == accum[1]["final"]
    # 12 micro-batches, 4 optimizer steps: DDP synchronised 4 times, not 12 (ctx.accumulate works)
    assert [r["allreduces"] for r in accum] == [4, 4]


def test_uneven_dataset_trains_alike_on_any_world_size(tmp_path: Path) -> None:
    """119 samples (not a multiple of the global batch 12), 3 epochs: 1, 2 and 3 ranks end equal.

    Every epoch drops its short last global batch on every world size: no sample is trained on
    twice within an epoch and every world size sees the same samples in the same steps.
    """
    steps, per_epoch = 27, 119 // 12
    runs = {
        w: launch(
            tmp_path / str(w),
            w,
            "--samples",
            "119",
            "--batch-size",
            str(12 // w),
            "--steps",
            str(steps),
        )
        for w in (1, 2, 3)
    }
    for world, results in runs.items():
        for a, b in zip(results[0]["final"], runs[1][0]["final"], strict=True):
            torch.testing.assert_close(
                f64(a), f64(b), rtol=1e-10, atol=1e-12, msg=lambda m, w=world: f"{w} ranks: {m}"
            )
        per_rank = 12 // world
        assert all(len(r["seen"]) == steps * per_rank for r in results)
        for epoch in range(steps // per_epoch):
            window = slice(epoch * per_epoch * per_rank, (epoch + 1) * per_epoch * per_rank)
            batch = [v for r in results for v in r["seen"][window]]
            assert len(set(batch)) == len(batch) == per_epoch * 12, (
                f"duplicates in epoch {epoch} on {world} ranks"
            )
            assert sorted(batch) == sorted(
                runs[1][0]["seen"][epoch * per_epoch * 12 : (epoch + 1) * per_epoch * 12]
            )
