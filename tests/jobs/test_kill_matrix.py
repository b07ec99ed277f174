"""The kill matrix: a SIGKILL at a random step resumes bit for bit, for the models users train.

Each row is one model/loader kind (tests/scripts/matrix_job.py), run twice with ``distrain run -n
2``: once uninterrupted, once with a SIGKILL at a random step after the first checkpoint (of a rank,
of one of its DataLoader workers, or of a rank halfway through writing a checkpoint) under
``--max-restarts 2``.  Both must end with the same model, optimizer state, LR, every rank's own
buffers (BatchNorm statistics) and every rank's next random number, bit for bit.  The rows combine
the factors so a few jobs cover them all: DDP and FSDP, plain BatchNorm and SyncBN (DDP only:
distrain refuses sync_bn under FSDP), dropout, 0 and 2 workers (persistent too) with random
augmentation, bf16 autocast, a OneCycle LR schedule, gradient accumulation.

The kill step and rank are drawn at random; the failure message gives the seed, and
``DTEST_SEED=N`` replays it.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest
import torch
from helpers import REPO, distrain_run

JOB = str(REPO / "tests" / "scripts" / "matrix_job.py")
JOB_TIMEOUT = 240  # a hang fails the test; not a speed assertion
EVERY = 3  # checkpoint every 3 steps

#: row -> (flags, optimizer steps of the run, what is killed)
ROWS = {
    "ddp-bn-2workers-augment": (["--workers", "2", "--augment"], 30, "rank"),
    "ddp-syncbn-persistent-bf16-accum": (
        ["--sync-bn", "--workers", "2", "--persistent", "--augment", "--bf16", "--accum", "2"],
        15,
        "worker",
    ),
    "ddp-mlp-dropout-bf16-2workers": (
        ["--model", "mlp-dropout", "--bf16", "--workers", "2", "--augment"],
        30,
        "worker",
    ),
    "fsdp-bn-0workers-augment": (["--strategy", "fsdp", "--augment"], 30, "save"),
    "fsdp-bn-persistent-accum": (
        ["--strategy", "fsdp", "--workers", "2", "--persistent", "--augment", "--accum", "2"],
        15,
        "rank",
    ),
}

pytestmark = pytest.mark.slow

#: micro-batches each rank reads per epoch (matrix_job.py: 160 samples, 2 ranks, batches of 8)
BATCHES_PER_EPOCH = 10
#: batches a rank's 2 DataLoader workers hold ready ahead of the loop (torch's prefetch_factor 2
#: each)
PREFETCHED = 4


def worker_kill_steps(flags: list[str], steps: int) -> list[int]:
    """Steps after which a killed DataLoader worker still owes the loop batches of this epoch.

    Killed later in an epoch, the worker has handed over all its batches and the loop never
    notices (seen once: killed after the epoch's last step, the job finished without a restart,
    and the test, which demands a resume, failed although nothing went wrong).
    """
    accum = int(flags[flags.index("--accum") + 1]) if "--accum" in flags else 1
    return [
        s
        for s in range(EVERY + 1, steps)
        if 1 <= (s * accum) % BATCHES_PER_EPOCH < BATCHES_PER_EPOCH - PREFETCHED
    ]


def job(tmp: Path, name: str, flags: list[str], *extra: str, restarts: int = 0) -> tuple[Path, str]:
    out = tmp / f"{name}.pt"
    cmd = [
        "-n",
        "2",
        *(["--max-restarts", str(restarts)] if restarts else []),
        JOB,
        "--dir",
        str(tmp / f"{name}-ckpt"),
        "--out",
        str(out),
        "--epochs",
        "3",
        "--every",
        str(EVERY),
        *flags,
        *extra,
    ]
    result = distrain_run(*cmd, timeout=JOB_TIMEOUT)
    assert result.returncode == 0, (
        f"{name}: exit {result.returncode}\n--- stdout\n{result.stdout[-3000:]}\n--- "
        f"stderr\n{result.stderr[-5000:]}"
    )
    return out, result.stdout


def differences(a: Path, b: Path) -> list[str]:
    """What differs between two final states (empty: bit for bit equal)."""
    sa, sb = torch.load(a, weights_only=True), torch.load(b, weights_only=True)
    diff = [] if sa["step"] == sb["step"] else [f"step {sa['step']} != {sb['step']}"]
    diff += [f"model.{k}" for k in sa["model"] if not torch.equal(sa["model"][k], sb["model"][k])]
    for key, state in sa["opt"]["state"].items():
        diff += [
            f"optimizer.{key}.{n}"
            for n, v in state.items()
            if not torch.equal(torch.as_tensor(v), torch.as_tensor(sb["opt"]["state"][key][n]))
        ]
    diff += [] if sa["lr"] == sb["lr"] else ["lr"]
    for rank, (ra, rb) in enumerate(zip(sa["ranks"], sb["ranks"], strict=True)):
        diff += [
            f"rank {rank} buffer {k}"
            for k in ra["buffers"]
            if not torch.equal(ra["buffers"][k], rb["buffers"][k])
        ]
        diff += [] if torch.equal(ra["rng"], rb["rng"]) else [f"rank {rank} RNG"]
    return diff


@pytest.mark.parametrize("row", list(ROWS))
def test_random_sigkill_resumes_bitwise(row: str, tmp_path: Path) -> None:
    flags, steps, kill = ROWS[row]
    seed = int(os.environ.get("DTEST_SEED", time.time_ns() % 1_000_000))
    rng = random.Random(seed)
    if kill == "save":  # the checkpoint of a step that saves, after the first one, not the last one
        at = rng.choice(range(2 * EVERY, steps, EVERY))
    elif kill == "worker":  # after the first checkpoint, while the worker still has batches to read
        at = rng.choice(worker_kill_steps(flags, steps))
    else:  # after the first checkpoint, before the end
        at = rng.randint(EVERY + 1, steps - 1)
    fault_rank = rng.choice([0, 1])
    what = f"{row}: SIGKILL of {kill} on rank {fault_rank} at step {at} (DTEST_SEED={seed})"
    print(what, flush=True)
    reference, _ = job(tmp_path, "uninterrupted", flags)
    resumed, stdout = job(
        tmp_path,
        "killed",
        flags,
        "--kill",
        kill,
        "--kill-at",
        str(at),
        "--fault-rank",
        str(fault_rank),
        restarts=2,
    )
    assert "matrix_job: SIGKILL of pid" in stdout, f"{what}: the fault did not fire"
    assert "distrain: resumed from" in stdout, f"{what}: no resume"
    diff = differences(reference, resumed)
    assert not diff, (
        f"{what}: the resumed run differs in {len(diff)} place(s): {', '.join(diff[:8])}"
    )
