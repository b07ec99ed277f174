"""Goodput under failures (issue 44): the memory tier, disk-only, torchrun + DCP, --replicas 2.

    python3 benchmarks/goodput/goodput.py                      # 1 minute per run, a kill every 15 s
    python3 benchmarks/goodput/goodput.py --minutes 2 --period 30

One node, two processes, the same script in every variant (goodput_worker.py: a 64-512-512-10
MLP, Adam, batch 128 per process, a disk checkpoint (DCP) every 100 steps):

- ``memory``: ``distrain run -n 2 --max-restarts 1000`` with ``memory_every_steps="auto"``;
- ``memory1``: the same with a snapshot every step (K=1), not in the default set (``--variants``);
- ``disk``: ``distrain run -n 2 --max-restarts 1000``, disk checkpoints only;
- ``torchrun``: ``torchrun --nproc-per-node 2 --max-restarts 1000``, disk checkpoints only (the
  same script: only the launcher differs);
- ``replicas``: ``distrain run --replicas 2 -n 1 --max-restarts 1000``, disk checkpoints only
  (each group its own, ``ckpt/replica_<g>/``): two TorchFT replica groups of one process each.

Each variant runs ``--minutes`` from its first step without faults, then again while the driver
SIGKILLs one worker every ``--period`` seconds of training (``--seed S``: at random moments, 0.5 to
1.5 periods apart, the same moments for every variant; restart-based: rank 1, rank 0, ...;
replicas: group 1's process, group 0's, ...), once the job has trained since the last kill (for
replicas: the victim's group has committed a step since).  Each variant's fault-free and killed
runs follow each other, the pair's order alternating from one variant (and one ``--rounds``
round) to the next, so no variant's runs all land in a quieter or busier stretch of a shared
machine (before, every fault-free run came before every killed one).  With ``--rounds R`` the
steps/min are the median of R runs and lost steps and kill -> step are pooled.  How each
measure is counted:

- useful steps: the step the job's state had reached at the deadline (a step done again after a
  resume counts once).  Replicas: the highest step any group committed by then (a healed group
  copies it, so it is in the final model); a step committed by 1 of 2 groups counts as one step
  although it used half the global batch: the driver counts them (a step logged by one group)
  and gives "full-batch" steps/min as well, such a step weighing 1/2.
- lost steps per kill: restart-based, the last step logged before the restart (a rank that
  survived the kill may still log the step it was in) minus the step resumed from (the restarted
  rank 0's "resumed" line).  Replicas, nothing restarts the job: the
  last step committed before the kill minus the surviving group's first commit after it, floored
  at 0 (it commits that step, logged late, or the next: 0 lost); the replacement heals to the
  survivors' step instead of resuming from a checkpoint.
- kill -> step: from the kill to the first step logged after the restart's "resumed" line (the
  restarted job's).  Replicas: by the surviving group; the replacement's first committed step
  is given too.
"""

from __future__ import annotations

import argparse
import os
import random
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
    "replicas": (RUN + ["--replicas", "2", "-n", "1", "--max-restarts", RESTARTS], []),
}
Step = tuple[float, int, int, int]  # (time, step, pid, group)


def read_log(path: Path) -> tuple[list[Step], list[tuple[float, int]]]:
    """(steps: (time, step, pid, group), resumes: (time, step)) logged so far, in time order."""
    steps, resumes = [], []
    if path.exists():
        for line in path.read_text().splitlines():
            parts = line.split()
            if parts[:1] == ["resumed"] and len(parts) == 4:
                resumes.append((float(parts[1]), int(parts[2])))
            elif len(parts) == 4:
                steps.append((float(parts[0]), int(parts[1]), int(parts[2]), int(parts[3])))
    return sorted(steps), sorted(resumes)


def replica_kill(steps: list[Step], at: float, group: int, pid: int) -> tuple | None:
    """One replicas kill: (lost steps, kill -> survivor's step, kill -> replacement's step)."""
    before = [s for t, s, _, _ in steps if t <= at]
    survivor = [(t, s) for t, s, _, g in steps if t > at and g != group]
    back = [t for t, _, p, g in steps if t > at and g == group and p != pid]
    if not before or not survivor:
        return None
    lost = max(0, max(before) - survivor[0][1])
    return lost, survivor[0][0] - at, back[0] - at if back else None


def one_run(
    name: str,
    minutes: float,
    period: float | None,
    work: Path,
    round_: int = 0,
    hidden: int = 512,
    wait: float = 0.0,
    seed: int | None = None,
) -> dict:
    """Run variant `name` for `minutes` of training, killing a worker every `period` s (with a
    `seed`: after a random time between 0.5 and 1.5 periods, the same times for every variant)."""
    rng = random.Random(seed)

    def gap() -> float:
        assert period is not None
        return period * (0.5 + rng.random()) if seed is not None else period

    launcher, extra = VARIANTS[name]
    extra = [*extra, "--hidden", str(hidden), "--wait", str(wait)]
    tag = f"{name}-{f'kill{period:g}' if period else 'free'}-{round_}"
    log, ckpt = work / f"{tag}.log", work / f"{tag}-ckpt"
    cmd = [*launcher, WORKER, "--steplog", str(log), "--ckpt", str(ckpt), *extra]
    job_env = env(DISTRAIN_MEMORY_DIR=str(work / "shm"), OMP_NUM_THREADS="1")
    out = open(work / f"{tag}.out", "w")  # noqa: SIM115  # closed after the job
    proc = subprocess.Popen(cmd, env=job_env, stdout=out, stderr=subprocess.STDOUT,
                            start_new_session=True)  # fmt: skip
    kills: list[tuple[float, int, int, int]] = []  # (time, last step before it, group, pid)
    try:
        start = None
        while start is None:
            if proc.poll() is not None:
                raise SystemExit(f"{tag}: exited {proc.returncode}: see {work / f'{tag}.out'}")
            steps, _ = read_log(log)
            start = steps[0][0] if steps else None
            time.sleep(0.1)
        deadline = start + 60 * minutes
        next_kill = start + gap() if period else float("inf")
        victim = 1  # rank 1 (restart-based) or group 1 (replicas) first, then in turn
        while time.time() < deadline:
            time.sleep(0.05)
            if time.time() < next_kill:
                continue
            steps, _ = read_log(log)
            group, rank = (victim, 0) if name == "replicas" else (0, victim)
            since = [s for s in steps if (not kills or s[0] > kills[-1][0]) and s[3] == group]
            pid_file = Path(f"{log}.pid.{group}.{rank}")
            if not since or not pid_file.exists():  # not trained since the last kill
                continue
            try:
                pid = int(pid_file.read_text())
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                continue
            kills.append((time.time(), max(s[1] for s in steps), group, pid))
            victim, next_kill = 1 - victim, time.time() + gap()
    finally:
        kill_tree(proc)
        out.close()
    said = [ln.strip() for ln in open(work / f"{tag}.out") if "memory snapshots every" in ln]
    if said:  # the tier's choice of K (auto), as the job said it
        print(f"{tag}: {said[0]}", flush=True)
    steps, resumes = read_log(log)
    steps = [s for s in steps if s[0] <= deadline]
    useful = max((s for _, s, _, _ in steps), default=0)
    by: dict[int, set[int]] = {}  # step -> the groups that committed it
    for _, s, _, g in steps:
        by.setdefault(s, set()).add(g)
    half = sum(1 for gs in by.values() if len(gs) == 1) if name == "replicas" else 0
    lost, gaps, back = [], [], []
    for at, last, group, pid in kills:
        if name == "replicas":
            one = replica_kill(steps, at, group, pid)
            if one is not None:
                lost.append(one[0])
                gaps.append(one[1])
                back += [one[2]] if one[2] is not None else []
            continue
        after = [r for r in resumes if r[0] > at]
        if not after:
            continue
        # a rank that survived the kill may still log the step it was in (its all-reduce done):
        # the steps lost reach up to the restart, and the next step is the restarted job's.  The
        # latest step logged, not the highest: an earlier attempt may have got further
        done = ([s for t, s, _, _ in steps if t <= after[0][0]] or [last])[-1]
        first = [t for t, _, _, _ in steps if t > after[0][0]]
        if first:
            lost.append(done - after[0][1])
            gaps.append(first[0] - at)
    return {"useful": useful, "per_min": useful / minutes, "kills": len(kills), "lost": lost,
            "gaps": gaps, "back": back, "half": half}  # fmt: skip


def merged(results: list[dict]) -> dict:
    """Several rounds of one variant and kind as one: the median steps/min and useful steps,
    the kills summed, lost steps and times pooled."""
    out = {k: statistics.median(r[k] for r in results) for k in ("useful", "per_min", "half")}
    out["kills"] = sum(r["kills"] for r in results)
    for k in ("lost", "gaps", "back"):
        out[k] = [x for r in results for x in r[k]]
    return out


def main() -> None:
    """Each variant's fault-free and killed runs side by side, in alternating order; one table."""
    # a SIGTERM unwinds through one_run's `finally`, which kills the job it started
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=1.0)
    p.add_argument(
        "--period",
        default="15",
        help="seconds between kills; a list (15,30,60) runs each, sharing the fault-free runs",
    )
    p.add_argument(
        "--variants", default="memory,disk,torchrun,replicas", help=f"of {', '.join(VARIANTS)}"
    )
    p.add_argument("--rounds", type=int, default=1, help="runs per variant and kind (median)")
    p.add_argument("--hidden", type=int, default=512, help="the MLP's width (sets the step time)")
    p.add_argument("--wait", type=float, default=0.0, help="idle seconds added to each step")
    p.add_argument(
        "--seed",
        type=int,
        default=None,
        help="kill at random moments (0.5-1.5 periods apart), the same for every variant",
    )
    args = p.parse_args()
    names = args.variants.split(",")
    print(f"load before: {loadavg()}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="dbench-goodput-"))
    (work / "shm").mkdir()
    shm = Path(tempfile.mkdtemp(prefix="dbench-goodput-", dir="/dev/shm"))
    (work / "shm").rmdir()
    (work / "shm").symlink_to(shm)
    periods = [float(x) for x in args.period.split(",")]
    runs: dict[tuple[str, float | None], list[dict]] = {}
    try:
        for r in range(args.rounds):
            for i, n in enumerate(names):
                kinds: list[float | None] = [None, *periods]
                shift = (i + r) % len(kinds)  # each variant starts with another kind each round
                for period in kinds[shift:] + kinds[:shift]:
                    seed = None if args.seed is None else args.seed + r
                    runs.setdefault((n, period), []).append(
                        one_run(n, args.minutes, period, work, r, args.hidden, args.wait, seed)
                    )
    finally:
        shutil.rmtree(shm, ignore_errors=True)
    free = {n: merged(runs[n, None]) for n in names}
    for period in periods:
        table(names, free, {n: merged(runs[n, period]) for n in names}, period, args)
    print(f"load after: {loadavg()}")
    shutil.rmtree(work, ignore_errors=True)


def table(
    names: list[str], free: dict, killed: dict, period: float, args: argparse.Namespace
) -> None:
    """One period's table: every variant's fault-free and killed runs, and the ratios."""
    print(f"{args.minutes:g} min per run, SIGKILL every {period:g} s in the killed runs, "
          f"{args.rounds} round(s), each variant's free and killed runs side by side")  # fmt: skip
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
    if "replicas" in names:
        f, k = free["replicas"], killed["replicas"]
        back = f"{statistics.median(k['back']):.2f} s" if k["back"] else "-"
        full = {x: (r["useful"] - r["half"] / 2) / args.minutes for x, r in (("f", f), ("k", k))}
        print(f"replicas full-batch steps/min: {full['f']:.0f} free, {full['k']:.0f} killed")
        print(
            f"replicas: kill -> replacement's first committed step (median) {back}; steps "
            f"committed by 1 of 2 groups (half a global batch): {f['half']} free, "
            f"{k['half']} killed"
        )
    base = killed.get("torchrun")
    for n in ("memory", "disk", "replicas"):
        if base and n in killed:
            print(f"{n} / torchrun (killed): {killed[n]['per_min'] / base['per_min']:.2f}x")
    if "disk" in free and "memory" in free:
        print(
            f"fault-free overhead of the tier: "
            f"{100 * (1 - free['memory']['per_min'] / free['disk']['per_min']):+.1f} %"
        )


if __name__ == "__main__":
    main()
