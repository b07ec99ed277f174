"""Training through failures (`distrain run --replicas`, issue 21) against restart-based resume.

    python3 benchmarks/recovery/replicas.py                 # 3 minutes of kills per variant
    python3 benchmarks/recovery/replicas.py --minutes 1     # shorter

One node, one small model (replica_worker.py: a 64-512-512-10 MLP, batch 64 per process, SGD,
a checkpoint every ``--every`` steps), two processes in every variant:

- ``replicas``: ``distrain run --replicas 2 -n 1`` (2 TorchFT replica groups of 1 process);
- ``distrain``: ``distrain run -n 2 --max-restarts K`` (restart-based: every rank restarts and
  resumes from the last checkpoint);
- ``torchrun``: ``python -m torch.distributed.run --nproc-per-node 2 --max-restarts K``, the same
  script (it resumes from its checkpoint too; only the launcher differs).

Measured, in one run:

1. per-step overhead: ``--steps`` steps without a fault, replicas vs ``distrain run -n 2``
   (median step interval after ``WARMUP`` steps, ``--rounds`` interleaved rounds);
2. goodput under failures: each variant trains for ``--minutes`` from its first step while the
   driver SIGKILLs one worker every ``--period`` seconds (replicas: the two groups in turn;
   restart-based: rank 1, then rank 0, ...).  Useful steps = the step the job's state reached at
   the deadline (a step done again after a resume counts once); "full-batch steps" weighs each
   replicas step by the groups that committed it (a step committed by 1 of 2 groups used half a
   global batch);
3. from the replicas run of 2: at each kill, the surviving group's longest step gap within 10 s
   against its median step interval (the survivors' pause), and the time from the kill to the
   replacement's first committed step.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import statistics
import sys
import tempfile
import time
from itertools import pairwise
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/common.py
from common import BENCH, RUN, TORCHRUN, env, kill_tree, loadavg, run_bounded  # noqa: E402

WORKER = str(BENCH / "recovery" / "replica_worker.py")
WARMUP = 30  # steps left out of the step-time median (start-up, first quorums)


def commands(restarts: int) -> dict[str, list[str]]:
    """Variant name -> launcher command (the worker and its arguments follow)."""
    return {
        "replicas": RUN + ["--replicas", "2", "-n", "1", "--max-restarts", str(restarts)],
        "distrain": RUN + ["-n", "2", "--max-restarts", str(restarts)],
        "torchrun": TORCHRUN + ["--nproc-per-node", "2", "--max-restarts", str(restarts)],
    }


def read_steps(prefix: str, group: int) -> list[tuple[float, int, int, int, int]]:
    """(time, step, pid, participants, groups) lines a group's rank 0 logged."""
    path = Path(f"{prefix}.{group}")
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 5:
            rows.append(
                (float(parts[0]), int(parts[1]), int(parts[2]), int(parts[3]), int(parts[4]))
            )
    return rows


def job_env() -> dict[str, str]:
    """One thread per worker (2 processes on 2 cores), the same for every variant."""
    return env(OMP_NUM_THREADS="1", DISTRAIN_BREAKDOWN="0")


def step_time(variant: str, steps: int, work: Path, timeout: float, hidden: int = 512) -> float:
    """Median step interval (seconds) of a fault-free run of `steps` steps (MLP width `hidden`)."""
    prefix = str(work / f"{variant}-{time.monotonic_ns()}")
    cmd = commands(3)[variant] + [
        WORKER,
        "--steplog",
        prefix,
        "--ckpt",
        prefix + ".ckpt",
        "--steps",
        str(steps),
        "--hidden",
        str(hidden),
    ]
    out, code = run_bounded(cmd, job_env(), timeout)
    if code != 0:
        raise RuntimeError(f"{variant} ended with {code}: {(out or '')[-2000:]}")
    times = [t for t, *_ in read_steps(prefix, 0)][WARMUP:]
    return statistics.median(b - a for a, b in pairwise(times))


def _pid(prefix: str, group: int, rank: int) -> int | None:
    try:
        return int(Path(f"{prefix}.pid.{group}.{rank}").read_text())
    except (OSError, ValueError):
        return None


def under_fire(
    variant: str, minutes: float, period: float, work: Path, restarts: int
) -> dict[str, object]:
    """Train for `minutes` from the first step with a SIGKILL every `period` s; what happened."""
    import subprocess

    prefix = str(work / f"{variant}-fire")
    cmd = commands(restarts)[variant] + [WORKER, "--steplog", prefix, "--ckpt", prefix + ".ckpt"]
    proc = subprocess.Popen(
        cmd,
        env=job_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    kills: list[tuple[float, int, int]] = []  # (time, group, pid)
    try:
        start_deadline = time.time() + 120
        while not read_steps(prefix, 0):
            if time.time() > start_deadline or proc.poll() is not None:
                raise RuntimeError(f"{variant} did not start training (exit {proc.poll()})")
            time.sleep(0.05)
        t0 = read_steps(prefix, 0)[0][0]
        end = t0 + minutes * 60
        n = 0
        while time.time() < end:
            next_kill = t0 + period * (n + 1)
            if next_kill >= end:
                time.sleep(max(0.0, end - time.time()))
                break
            time.sleep(max(0.0, next_kill - time.time()))
            group, rank = (n % 2, 0) if variant == "replicas" else (0, 1 - n % 2)
            pid = _pid(prefix, group, rank)
            if pid is not None:
                try:
                    os.kill(pid, signal.SIGKILL)
                    kills.append((time.time(), group, pid))
                except ProcessLookupError:
                    pass
            n += 1
        alive = proc.poll() is None
    finally:
        kill_tree(proc)
        proc.wait()
    logs = {g: [r for r in read_steps(prefix, g) if r[0] <= end] for g in (0, 1)}
    rows = [r for g in logs.values() for r in g]
    useful = max((r[1] for r in rows), default=0)
    # a replicas step committed by k of G groups used k/G of the global batch
    by_step: dict[int, float] = {}
    for _, step, _, live, groups in rows:
        by_step[step] = live / groups
    return {
        "useful": useful,
        "full": sum(by_step.values()),
        "kills": kills,
        "logs": logs,
        "alive": alive,
        "t0": t0,
    }


def pauses(result: dict[str, object]) -> list[tuple[float, float, float]]:
    """Per kill: (survivor's longest gap, its median interval, kill -> replacement's first step)."""
    logs: dict[int, list[tuple[float, int, int, int, int]]]
    logs = result["logs"]  # type: ignore[assignment]
    out = []
    for t_kill, group, pid in result["kills"]:  # type: ignore[attr-defined]
        other = [r[0] for r in logs[1 - group]]
        near = [t for t in other if t_kill - 2 <= t <= t_kill + 10]
        gaps = [b - a for a, b in pairwise(near)]
        before = [t for t in other if t_kill - 12 <= t <= t_kill - 1]
        median = (
            statistics.median(b - a for a, b in pairwise(before))
            if len(before) > 2
            else float("nan")
        )
        back = [r[0] for r in logs[group] if r[0] > t_kill and r[2] != pid]
        out.append(
            (
                max(gaps) if gaps else float("nan"),
                median,
                (back[0] - t_kill) if back else float("nan"),
            )
        )
    return out


def main() -> None:
    """Step overhead, then goodput under kills for the three variants; ratios side by side."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--minutes", type=float, default=3.0, help="training time under kills per variant"
    )
    p.add_argument("--period", type=float, default=20.0, help="seconds between kills")
    p.add_argument("--steps", type=int, default=400, help="steps of each fault-free overhead run")
    p.add_argument("--rounds", type=int, default=2, help="interleaved overhead rounds")
    p.add_argument("--restarts", type=int, default=100, help="--max-restarts of every variant")
    p.add_argument(
        "--variants",
        default="replicas,distrain,torchrun",
        help="which variants run under kills (comma list; 'none': overhead only)",
    )
    p.add_argument(
        "--hidden", default="512", help="MLP widths of the overhead runs (comma list: longer steps)"
    )
    args = p.parse_args()
    chosen = [v for v in args.variants.split(",") if v and v != "none"]
    if set(chosen) - set(commands(args.restarts)):
        p.error(f"--variants: choose from {', '.join(commands(args.restarts))} or none")
    widths = [int(h) for h in args.hidden.split(",") if h]
    print(f"load before: {loadavg()}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        times: dict[tuple[int, str], list[float]] = {}
        for hidden in widths:
            for r in range(args.rounds):
                for variant in ("replicas", "distrain")[:: 1 if r % 2 == 0 else -1]:
                    t = step_time(variant, args.steps, work, 600, hidden)
                    times.setdefault((hidden, variant), []).append(t)
                    print(
                        f"width {hidden} round {r + 1}: {variant:<9} "
                        f"median step {t * 1000:8.2f} ms",
                        flush=True,
                    )
        fire = {}
        for variant in chosen:
            fire[variant] = under_fire(variant, args.minutes, args.period, work, args.restarts)
            res = fire[variant]
            print(
                f"{variant:<9} {args.minutes:g} min: {res['useful']} useful steps, "
                f"{len(res['kills'])} kills, alive at the end: {res['alive']}",
                flush=True,
            )  # type: ignore[arg-type]
    print(
        f"\nper-step time, no fault (median of {args.rounds} runs x {args.steps} steps, first "
        f"{WARMUP} left out):"
    )
    for hidden in widths:
        rep, base = (statistics.median(times[hidden, v]) for v in ("replicas", "distrain"))
        print(
            f"  width {hidden:>5}: distrain run -n 2 {base * 1000:8.2f} ms | --replicas 2 "
            f"{rep * 1000:8.2f} ms"
            f" | overhead {100 * (rep / base - 1):+6.1f} % ({(rep - base) * 1000:+.2f} ms a step)"
        )
    if not fire:
        print(f"load after: {loadavg()}")
        return
    print(
        f"\ngoodput, one SIGKILL every {args.period:g} s for {args.minutes:g} min (useful "
        "steps per minute):"
    )
    torch_rate = math.nan
    if "torchrun" in fire:
        torch_rate = fire["torchrun"]["useful"] / args.minutes  # type: ignore[operator]
    for variant, res in fire.items():
        rate = res["useful"] / args.minutes  # type: ignore[operator]
        full = res["full"] / args.minutes  # type: ignore[operator]
        print(
            f"  {variant:<9} {rate:8.1f} steps/min  ({full:8.1f} full-batch)   "
            f"{rate / torch_rate:5.2f}x torchrun   kills {len(res['kills'])}"
        )  # type: ignore[arg-type]
    print(
        "\nreplicas, per kill: survivors' longest step gap (median step) | kill -> replacement's "
        "first committed step"
    )
    for i, (gap, med, back) in enumerate(pauses(fire["replicas"]) if "replicas" in fire else []):
        print(f"  kill {i + 1}: {gap:6.2f} s ({med * 1000:6.1f} ms) | {back:6.2f} s")
    print(f"load after: {loadavg()}")


if __name__ == "__main__":
    t_start = time.time()
    main()
    print(f"total {time.time() - t_start:.0f} s")
