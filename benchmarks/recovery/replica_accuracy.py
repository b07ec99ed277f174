"""What skipping a lost group's batches costs in accuracy (`distrain run --replicas`, issue 21).

    python3 benchmarks/recovery/replica_accuracy.py                  # seeds 0,1,2; a kill every 2 s
    python3 benchmarks/recovery/replica_accuracy.py --seeds 0,1 --period 3

While a replica group is down its shard of the global batch is skipped (docs/fault_tolerance.md),
so a job with faults trains on fewer samples than one without.  The unchanged example
examples/train_digits.py (scikit-learn's digits, a small CNN, 15 epochs) runs per seed:

- ``plain``: ``distrain run -n 2`` (no replicas, no fault);
- ``replicas``: ``distrain run --replicas 2 -n 1``, no fault;
- ``killed``: the same, with group 1's worker SIGKILLed every ``--period`` seconds from its
  first line of output (its agent restarts it, it heals from group 0 and trains on).

Printed: each run's final test accuracy (group 0's, rank 0 of the job) and the kills; then the
mean per variant and the differences, side by side.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/common.py
from common import REPO, RUN, env, kill_tree, loadavg  # noqa: E402

SCRIPT = str(REPO / "examples" / "train_digits.py")
DONE = re.compile(r"done: test acc ([0-9.]+)")


def _group_worker(launcher: int, group: int) -> int | None:
    """The pid of the training process of replica group `group` under `launcher`."""
    for child in psutil.Process(launcher).children():  # one `distrain run` per group, exec'd
        try:
            if child.environ().get("DISTRAIN_REPLICA_GROUP") != str(group):
                continue
            for proc in child.children(
                recursive=True
            ):  # forked workers carry the title "distrain rank …"
                if " ".join(proc.cmdline()).startswith("distrain rank"):
                    return proc.pid
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return None


def one_run(
    variant: str, seed: int, period: float, out: Path, timeout: float = 600
) -> tuple[float, int]:
    """(final test accuracy, kills) of one run."""
    launcher = RUN + (
        ["-n", "2"]
        if variant == "plain"
        else ["--replicas", "2", "-n", "1", "--max-restarts", "50"]
    )
    cmd = [*launcher, SCRIPT, "--seed", str(seed), "--out", str(out / f"{variant}-{seed}")]
    errors = open(out / f"{variant}-{seed}.stderr", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        cmd, env=env(OMP_NUM_THREADS="1"), stdout=subprocess.PIPE, stderr=errors,
        text=True, start_new_session=True,
    )  # fmt: skip
    kills = 0
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout or []), daemon=True)
    reader.start()
    try:
        deadline, next_kill = time.monotonic() + timeout, None
        while proc.poll() is None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{variant} seed {seed} did not end within {timeout:.0f} s")
            if next_kill is None and lines:  # training has started: the first epoch line is out
                next_kill = time.monotonic() + period
            finished = any(
                "done:" in ln for ln in lines
            )  # group 0 ended: no live group to heal from
            if (
                variant == "killed"
                and next_kill is not None
                and not finished
                and time.monotonic() >= next_kill
            ):
                pid = _group_worker(proc.pid, 1)
                if pid is not None:
                    os.kill(pid, signal.SIGKILL)
                    kills += 1
                next_kill = time.monotonic() + period
            time.sleep(0.05)
        reader.join(timeout=10)
    finally:
        kill_tree(proc)
        proc.wait()
        errors.close()
    found = DONE.findall("".join(lines))
    if proc.returncode != 0 or not found:
        said = [
            ln
            for ln in (out / f"{variant}-{seed}.stderr").read_text().splitlines()
            if ln.startswith("distrain")
        ]
        raise RuntimeError(
            f"{variant} seed {seed}: exit {proc.returncode}, no final accuracy; "
            + " | ".join(said[-6:])
        )
    return float(found[-1]), kills


def main() -> None:
    """Every variant for every seed, interleaved; accuracies and their means side by side."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", default="0,1,2", help="comma list of seeds")
    p.add_argument("--period", type=float, default=2.0, help="seconds between kills of group 1")
    args = p.parse_args()
    seeds = [int(s) for s in args.seeds.split(",") if s]
    variants = ("plain", "replicas", "killed")
    acc: dict[str, list[float]] = {v: [] for v in variants}
    print(f"load before: {loadavg()}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for seed in seeds:
            for variant in variants:
                a, kills = one_run(variant, seed, args.period, Path(tmp))
                acc[variant].append(a)
                print(
                    f"seed {seed} {variant:<9} test acc {a:.4f}"
                    + (f"  ({kills} kills)" if variant == "killed" else ""),
                    flush=True,
                )
    means = {v: statistics.mean(acc[v]) for v in variants}
    print(f"\nmean test accuracy over seeds {args.seeds} (15 epochs of digits):")
    for v in variants:
        print(f"  {v:<9} {means[v]:.4f}   ({', '.join(f'{a:.4f}' for a in acc[v])})")
    print(
        f"  killed - replicas: {means['killed'] - means['replicas']:+.4f}   replicas - plain: "
        f"{means['replicas'] - means['plain']:+.4f}"
    )
    print(f"load after: {loadavg()}")


if __name__ == "__main__":
    main()
