"""How far a chaos trial's job got: its checkpoints, read while it runs (faults are placed by
training progress, not by time)."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

from kinds import Job, memory_folders

STEP_DIR = re.compile(r"step_(\d+)$")


def _checkpoint_steps(ckpt: Path) -> list[int]:
    """Steps of the finished checkpoints under `ckpt` (any depth); a save renames folders while
    we look, so a folder that vanishes mid-walk is looked at again."""
    for _ in range(5):
        try:
            return [int(m.group(1)) for d in ckpt.rglob("step_*") if (m := STEP_DIR.match(d.name))]
        except FileNotFoundError:
            continue
    return []


SNAPSHOT = re.compile(r"^r\d+-s(\d+)\.pt$")


def _snapshot_steps(job: Job) -> list[int]:
    """Steps of the memory tier's snapshots (kind ``memory``): with disk checkpoints every 8
    steps, faults placed by the disk's alone fell 0–4 steps after a disk save, where a tier that
    skips its snapshots loses no more than the bound."""
    names = [p.name for d in memory_folders(job) for p in d.glob("own/r*-s*.pt")]
    return [int(m.group(1)) for name in names if (m := SNAPSHOT.match(name))]


def ready(job: Job) -> bool:
    """Whether the run has written its first checkpoint (or snapshot): faults start from there."""
    if job.ckpt is None:
        return job.marker is not None and job.marker.exists()
    return (job.ckpt.exists() and bool(_checkpoint_steps(job.ckpt))) or bool(_snapshot_steps(job))


def progress(job: Job) -> int:
    """The newest checkpoint's or snapshot's step (0 before the first, or for a job without
    distrain's)."""
    if job.ckpt is None or not job.ckpt.exists():
        return max(_snapshot_steps(job), default=0)
    return max(_checkpoint_steps(job.ckpt) + _snapshot_steps(job), default=0)


def wait_ready(procs: list[subprocess.Popen], job: Job, deadline: float, step: int = 0) -> bool:
    """Wait for ready() and a checkpoint of `step` or later; False if a launcher ended or the
    deadline passed first."""
    while time.monotonic() < deadline:
        if ready(job) and progress(job) >= step:
            return True
        if any(proc.poll() is not None for proc in procs):
            return False
        time.sleep(0.05)
    return False


def training_span(job: Job, ready_at: float, ended_at: float) -> float:
    """Seconds of an uninterrupted run from ready (wall clock) to the end of its training: the
    first of `job.trained_end`'s files where the kind writes them, else the run's end.

    A fault aimed by time (a kind without checkpoints) lands at a fraction of this span; the
    run's end counts the groups' end (the replicas' final reports and done marks, the
    launchers' exits), after every rank had ended: seed 9301's `replicas_readme` faults at 0.75
    and 0.80 of it found no rank (missed), as seed 9102's `double_kill` had; its `selfstart` at
    0.70 and `rehearsal` at 0.87 found the run ended.
    """
    ends = [p.stat().st_mtime for p in job.out.glob(job.trained_end)] if job.trained_end else []
    return max(0.5, min([*ends, ended_at]) - ready_at)
