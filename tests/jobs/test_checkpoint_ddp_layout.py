"""A 4-rank DDP job stopped and resumed ends bit for bit equal to an uninterrupted one.

With 2 ranks every order of adding two gradients gives the same bits; with 4 it does not, and a
fresh DDP wrapper's first reduction packs the gradients into another layout than the rebuilt
buckets of a wrapper that has run (parallel/ddp_layout.py): a resume was 1-2 ulp off.
"""

from __future__ import annotations

from pathlib import Path

from helpers.checkpoints import assert_bitwise, distrain_run, ok

#: one epoch of 8 steps (96 samples, 12 a step, 3 a rank), no dropout: only the reduction differs
JOB = ["--epochs", "1", "--dropout", "0", "--every", "100"]


def test_four_rank_resume_is_bitwise_equal(tmp_path: Path) -> None:
    base, out, d = tmp_path / "base.pt", tmp_path / "final.pt", tmp_path / "ckpt"
    ok(distrain_run(4, "--out", str(base), *JOB))
    ok(distrain_run(4, "--dir", str(d), "--out", str(tmp_path / "part.pt"), "--stop-at", "4", *JOB))
    result = ok(distrain_run(4, "--dir", str(d), "--out", str(out), *JOB))
    assert "distrain: resumed from" in result.stdout
    assert_bitwise(base, out)
