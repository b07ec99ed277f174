"""Goodput under failures (issue 44): the memory tier against disk-only and torchrun + DCP.

    python3 benchmarks/goodput/goodput.py                      # 1 minute per run, a kill every 15 s
    python3 benchmarks/goodput/goodput.py --minutes 2 --period 30

One node, two processes, the same script in every variant (goodput_worker.py: a 64-512-512-10
MLP, Adam, batch 128 per process, a disk checkpoint (DCP) every 100 steps):

- ``memory``: ``distrain run -n 2 --max-restarts 1000`` with ``memory_every_steps="auto"``;
- ``memory1``: the same with a snapshot every step (K=1), not in the default set (``--variants``);
- ``disk``: ``distrain run -n 2 --max-restarts 1000``, disk checkpoints only;
- ``torchrun``: ``torchrun --nproc-per-node 2 --max-restarts 1000``, disk checkpoints only (the
  same script: only the launcher differs).

Each variant runs ``--minutes`` from its first step without faults, then again while the driver
SIGKILLs one worker (rank 1, rank 0, ...) every ``--period`` seconds of training.  Useful steps =
the step the job's state had reached at the deadline (a step done again after a resume counts
once).  Per kill: lost steps (the last step logged before the kill minus the step resumed from)
and the time from the kill to the first step after it.  Runs are interleaved: the fault-free
runs of all variants, then the killed ones.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/common.py
from common import BENCH, RUN, TORCHRUN, env, kill_tree, loadavg  # noqa: E402

WORKER = str(BENCH / "goodput" / "goodput_worker.py")
RESTARTS = "1000"
VARIANTS = {
    "memory": (RUN + ["-n", "2", "--max-restarts", RESTARTS], ["--memory-every", "auto"]),
    "memory1": (RUN + ["-n", "2", "--max-restarts", RESTARTS], ["--memory-every", "1"]),
    "disk": (RUN + ["-n", "2", "--max-restarts", RESTARTS], []),
    "torchrun": (TORCHRUN + ["--nproc-per-node", "2", "--max-restarts", RESTARTS], []),
}


def read_log(path: Path) -> tuple[list[tuple[float, int, int]], list[tuple[float, int]]]:
    """(steps: (time, step, pid), resumes: (time, step)) logged so far."""
    steps, resumes = [], []
    if path.exists():
        for line in path.read_text().splitlines():
            parts = line.split()
            if parts[:1] == ["resumed"] and len(parts) == 3:
                resumes.append((float(parts[1]), int(parts[2])))
            elif len(parts) == 3:
                steps.append((float(parts[0]), int(parts[1]), int(parts[2])))
    return steps, resumes


def one_run(name: str, minutes: float, period: float | None, work: Path) -> dict:
    """Run variant `name` for `minutes` of training, killing a worker every `period` s."""
    launcher, extra = VARIANTS[name]
    tag = f"{name}-{'kill' if period else 'free'}"
    log, ckpt = work / f"{tag}.log", work / f"{tag}-ckpt"
    cmd = [*launcher, WORKER, "--steplog", str(log), "--ckpt", str(ckpt), *extra]
    job_env = env(DISTRAIN_MEMORY_DIR=str(work / "shm"), OMP_NUM_THREADS="1")
    out = open(work / f"{tag}.out", "w")  # noqa: SIM115  # closed after the job
    proc = subprocess.Popen(cmd, env=job_env, stdout=out, stderr=subprocess.STDOUT,
                            start_new_session=True)  # fmt: skip
    kills: list[tuple[float, int]] = []  # (time, last step logged before it)
    try:
        start = None
        while start is None:
            if proc.poll() is not None:
                raise SystemExit(f"{tag}: exited {proc.returncode}: see {work / f'{tag}.out'}")
            steps, _ = read_log(log)
            start = steps[0][0] if steps else None
            time.sleep(0.1)
        deadline = start + 60 * minutes
        next_kill = start + period if period else float("inf")
        victim = 1
        while time.time() < deadline:
            time.sleep(0.05)
            if time.time() < next_kill:
                continue
            steps, _ = read_log(log)
            live = steps and (not kills or steps[-1][0] > kills[-1][0])  # trained since
            pid_file = Path(f"{log}.pid.{victim}")
            if not live or not pid_file.exists():
                continue
            try:
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                continue
            kills.append((time.time(), steps[-1][1]))
            victim, next_kill = 1 - victim, time.time() + period  # type: ignore[operator]
    finally:
        kill_tree(proc)
        out.close()
    steps, resumes = read_log(log)
    reached = [s for t, s, _ in steps if t <= deadline]
    useful = reached[-1] if reached else 0
    lost, gaps = [], []
    for at, last in kills:
        after = [r for r in resumes if r[0] > at]
        first = [t for t, _, _ in steps if t > at]
        if after and first:
            lost.append(last - after[0][1])
            gaps.append(first[0] - at)
    return {"useful": useful, "per_min": useful / minutes, "kills": len(kills), "lost": lost,
            "gaps": gaps}  # fmt: skip


def main() -> None:
    """The fault-free runs, then the killed ones; one table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=1.0)
    p.add_argument("--period", type=float, default=15.0)
    p.add_argument("--variants", default="memory,disk,torchrun", help=f"of {', '.join(VARIANTS)}")
    args = p.parse_args()
    names = args.variants.split(",")
    print(f"load before: {loadavg()}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="dbench-goodput-"))
    (work / "shm").mkdir()
    shm = Path(tempfile.mkdtemp(prefix="dbench-goodput-", dir="/dev/shm"))
    (work / "shm").rmdir()
    (work / "shm").symlink_to(shm)
    try:
        free = {n: one_run(n, args.minutes, None, work) for n in names}
        killed = {n: one_run(n, args.minutes, args.period, work) for n in names}
    finally:
        shutil.rmtree(shm, ignore_errors=True)
    print(f"{args.minutes:g} min per run, SIGKILL every {args.period:g} s in the killed runs")
    print(
        "variant   | free steps/min | killed steps/min | ratio | kills | lost/kill "
        "(median, max) | kill -> step (median)"
    )
    for n in names:
        f, k = free[n], killed[n]
        lost = f"{statistics.median(k['lost']):.0f}, {max(k['lost'])}" if k["lost"] else "-"
        gap = f"{statistics.median(k['gaps']):.2f} s" if k["gaps"] else "-"
        print(
            f"{n:<9} | {f['per_min']:14.0f} | {k['per_min']:16.0f} | "
            f"{k['per_min'] / f['per_min']:.3f} | {k['kills']:5} | {lost:>20} | {gap}"
        )
    base = killed.get("torchrun")
    if base and "memory" in killed:
        print(f"memory / torchrun (killed): {killed['memory']['per_min'] / base['per_min']:.2f}x")
    if "disk" in free and "memory" in free:
        print(
            f"fault-free overhead of the tier: "
            f"{100 * (1 - free['memory']['per_min'] / free['disk']['per_min']):+.1f} %"
        )
    print(f"load after: {loadavg()}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
