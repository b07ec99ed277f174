"""A 4-rank DDP job stopped (or killed) and resumed ends bit for bit equal to an uninterrupted one.

With 2 ranks every order of adding two gradients gives the same bits; with 4 it does not, and a
fresh DDP wrapper's first reduction packs the gradients into another layout than the rebuilt
buckets of a wrapper that has run (parallel/ddp.py): a resume was 1-2 ulp off.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import distrain_run as run_job
from helpers.checkpoints import WORKER, assert_bitwise, distrain_run, ok, shared_baseline

#: one epoch of 8 steps (96 samples, 12 a step, 3 a rank), no dropout: only the reduction differs
JOB = ["--epochs", "1", "--dropout", "0", "--every", "100"]


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The uninterrupted 4-rank job, once per test run (a module fixture: once per xdist worker)."""
    return shared_baseline(tmp_path_factory, "ddp-layout-4", *JOB, nproc=4)


def test_four_rank_resume_from_disk_is_bitwise_equal(baseline: Path, tmp_path: Path) -> None:
    out, d = tmp_path / "final.pt", tmp_path / "ckpt"
    ok(distrain_run(4, "--dir", str(d), "--out", str(tmp_path / "part.pt"), "--stop-at", "4", *JOB))
    result = ok(distrain_run(4, "--dir", str(d), "--out", str(out), *JOB))
    assert "distrain: resumed from" in result.stdout
    assert_bitwise(baseline, out)


def test_four_rank_resume_from_memory_is_bitwise_equal(
    baseline: Path, tmp_path: Path, mem_root: Path
) -> None:
    out = tmp_path / "final.pt"
    args = [WORKER, "--dir", str(tmp_path / "ckpt"), "--out", str(out), *JOB]
    args += ["--memory-every", "1", "--kill-at", "5"]
    env = {"DISTRAIN_MEMORY_DIR": str(mem_root)}
    result = ok(run_job("-n", "4", "--max-restarts", "1", *args, timeout=180, env=env))
    assert f"distrain: resumed from memory {mem_root}" in result.stdout, result.stdout[-2000:]
    assert_bitwise(baseline, out)
