"""Checkpoints across versions and refusals, with real jobs: an old format resumes, a changed global
batch goes on at the next sample, another dataset length is a clear error, one failing rank is
reported once (the rest: test_checkpoint.py)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
import torch
from helpers import REPO, python, run
from helpers.checkpoints import (
    JOB_TIMEOUT,
    WORKER,
    assert_bitwise,
    distrain_run,
    ok,
)

V01 = REPO / "tests" / "data" / "ckpt_v0_1"


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_checkpoint_of_version_0_1_resumes(strategy: str, tmp_path: Path) -> None:
    """A 0.1 checkpoint (shared.pt + rank_*.pt, step 6 of the default job) loads, resumes exactly.

    The fixture was computed on another CPU, whose float rounding may differ from this one's, so
    nothing is compared with a run trained here from scratch: the restored tensors must equal the
    fixture's own, and the run resumed from it must equal, bit for bit, one that resumes from it,
    stops at step 10 and resumes again from its own checkpoint (both computed here).
    """
    extra = ["--strategy", "fsdp"] if strategy == "fsdp" else []
    d, restored, final = tmp_path / "ckpt", tmp_path / "restored.pt", tmp_path / "final.pt"
    shutil.copytree(V01, d)
    result = ok(
        distrain_run(
            2, "--dir", str(d), "--out", str(final), "--dump-restored", str(restored), *extra
        )
    )
    assert f"resumed from {d / 'step_00000006'} (step 6" in result.stdout
    fixture = torch.load(V01 / "step_00000006" / "shared.pt", weights_only=True)["objects"]
    got = torch.load(restored, weights_only=True)
    assert got["step"] == 6 and set(got["model"]) == set(fixture["model"])
    for key, value in fixture["model"].items():
        assert torch.equal(got["model"][key], value), f"{key} was not restored exactly"
    order = list(fixture["model"])  # the MLP's parameters, in torch's numbering of them
    for index, state in fixture["optimizer"]["state"].items():
        assert torch.equal(
            got["opt"]["state"][order[index]]["momentum_buffer"], state["momentum_buffer"]
        )

    d2 = tmp_path / "ckpt2"
    shutil.copytree(V01, d2)
    ok(
        distrain_run(
            2, "--dir", str(d2), "--out", str(tmp_path / "part.pt"), "--stop-at", "10", *extra
        )
    )
    result = ok(distrain_run(2, "--dir", str(d2), "--out", str(tmp_path / "final2.pt"), *extra))
    assert f"resumed from {d2 / 'step_00000010'} (step 10" in result.stdout
    assert_bitwise(final, tmp_path / "final2.pt")


def test_resume_with_another_global_batch_goes_on_at_the_next_sample(tmp_path: Path) -> None:
    """4 steps of 12 samples, then 8 per step from sample 48, said in one line."""
    d = tmp_path / "ckpt"
    first = [python(), WORKER, "--dir", str(d), "--out", str(tmp_path / "a.pt"), "--stop-at", "4"]
    ok(run(first, timeout=JOB_TIMEOUT))
    result = ok(
        run(
            [
                python(),
                WORKER,
                "--dir",
                str(d),
                "--out",
                str(tmp_path / "b.pt"),
                "--global-batch",
                "8",
            ],
            timeout=JOB_TIMEOUT,
        )  # fmt: skip
    )
    assert (
        "distrain: resumed at sample 48 of epoch 0 with global batch 8 (was 12: batch_size "
        "changed)" in result.stderr
    ), result.stderr[-3000:]


def test_resume_on_a_dataset_of_another_length_is_a_clear_error(tmp_path: Path) -> None:
    d = tmp_path / "ckpt"
    first = [python(), WORKER, "--dir", str(d), "--out", str(tmp_path / "a.pt"), "--stop-at", "4"]
    ok(run(first, timeout=JOB_TIMEOUT))
    result = run(
        [python(), WORKER, "--dir", str(d), "--out", str(tmp_path / "b.pt"), "--samples", "120"],
        timeout=JOB_TIMEOUT,
    )
    assert result.returncode != 0
    assert (
        "distrain: error: cannot resume loader" in result.stderr
        and "saved with a dataset of 96 samples, this one has 120" in result.stderr
    ), result.stderr[-3000:]
    assert "Traceback" not in result.stderr


# -- one rank fails ------------------------------------------------------------------------------
def test_one_rank_raises_job_ends_with_root_cause_once(tmp_path: Path) -> None:
    timeline = tmp_path / "timeline.txt"
    result = distrain_run(
        2,
        "--dir",
        str(tmp_path / "ckpt"),
        "--out",
        str(tmp_path / "x.pt"),
        "--raise-at",
        "3",
        "--step-sleep",
        "0.1",
        "--timeline",
        str(timeline),
    )
    ended = time.time()
    assert result.returncode == 1
    assert result.stderr.count("Traceback (most recent call last)") == 1, result.stderr
    assert result.stderr.count("distrain: rank 1 failed (root cause)") == 1
    assert "distrain run: job failed: rank 1 " in result.stderr
    assert "ValueError: injected failure on rank 1" in result.stderr.splitlines()[-1]
    # a liveness bound, not a speed claim: from the exception to the launcher's exit
    raised = float(
        next(ln.split()[1] for ln in timeline.read_text().splitlines() if ln.startswith("fault"))
    )
    assert ended - raised <= 10, f"the job ended {ended - raised:.1f} s after rank 1 raised"
