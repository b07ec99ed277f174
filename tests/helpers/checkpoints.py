"""What the checkpoint job tests share: the worker they launch, a bounded run, bitwise checks and
an uninterrupted baseline computed once per test session (tests/jobs/test_checkpoint*.py)."""

from __future__ import annotations

import fcntl
import subprocess
from pathlib import Path

import pytest
import torch

from helpers import processes, session
from helpers.paths import REPO
from helpers.processes import python

WORKER = str(REPO / "tests" / "scripts" / "ckpt_worker.py")
DISTRAIN = [python(), "-m", "distrain.cli", "run"]
TORCHRUN = [python(), "-m", "torch.distributed.run"]
JOB_TIMEOUT = 180  # a hang fails the test; not a speed assertion


def distrain_run(
    nproc: int, *worker_args: str, restarts: int = 0, timeout: float = JOB_TIMEOUT
) -> subprocess.CompletedProcess[str]:
    """`distrain run -n NPROC [--max-restarts R] ckpt_worker.py ARGS` (helpers.processes')."""
    restart = ["--max-restarts", str(restarts)] if restarts else []
    return processes.distrain_run("-n", str(nproc), *restart, WORKER, *worker_args, timeout=timeout)


def params(path: str | Path) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=True)["model"]


def assert_bitwise(a: str | Path, b: str | Path) -> None:
    sa, sb = torch.load(a, weights_only=True), torch.load(b, weights_only=True)
    assert sa["step"] == sb["step"]
    for key in sa["model"]:
        assert torch.equal(sa["model"][key], sb["model"][key]), f"{key} differs"
    for key, state in sa["opt"]["state"].items():
        assert torch.equal(state["momentum_buffer"], sb["opt"]["state"][key]["momentum_buffer"])


def ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, (
        f"exit {result.returncode}\n--- stdout\n{result.stdout[-3000:]}\n--- "
        f"stderr\n{result.stderr[-5000:]}"
    )
    return result


def shared_baseline(
    tmp_path_factory: pytest.TempPathFactory, name: str, *worker_args: str, nproc: int = 2
) -> Path:
    """An uninterrupted run, computed once per test session even across xdist workers."""
    # this run's folder: a baseline of another run (another checkout, code since changed) is
    # no reference
    root = session.run_dir(tmp_path_factory)
    out = root / f"baseline-{name}.pt"
    with open(root / f"baseline-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not out.exists():
            ok(distrain_run(nproc, "--out", str(out), *worker_args))
    return out


def one_thread_baseline(tmp_path_factory: pytest.TempPathFactory, nproc: int) -> Path:
    """`distrain run -n NPROC ckpt_worker.py --out F` uninterrupted, one thread a rank (what as
    many one-rank nodes compute), made once per test run for every test that compares with it."""

    def make(folder: Path) -> str:
        base = folder / "base.pt"
        one_thread = {"DISTRAIN_NUM_THREADS": "1"}
        ok(
            processes.distrain_run(
                "-n", str(nproc), WORKER, "--out", str(base), timeout=300, env=one_thread
            )
        )
        return str(base)

    # the 2-rank name predates the others: runs of this name hold the same job
    name = "uninterrupted-one-thread" + ("" if nproc == 2 else f"-{nproc}")
    return Path(session.once(tmp_path_factory, name, make))


def assert_equals_uninterrupted(
    final: Path, tmp_path_factory: pytest.TempPathFactory, step: int
) -> None:
    """The same ckpt_worker job run uninterrupted on 2 ranks of this machine (one thread each),
    once per test run for every test that compares with it; `final` holds its model bit for bit
    at `step`."""
    base = one_thread_baseline(tmp_path_factory, 2)
    a, b = torch.load(base, weights_only=True), torch.load(final, weights_only=True)
    assert a["step"] == b["step"] == step
    for key in a["model"]:
        assert torch.equal(a["model"][key], b["model"][key]), key
