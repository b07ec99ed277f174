"""How far apart two identical ranks' compute looks: the noise the straggler threshold must clear.

    PYTHONPATH=src python3 benchmarks/train/straggler_noise.py [--runs 8 --steps 80]

Runs the balanced 2-rank job of tests/scripts/breakdown_job.py `--runs` times under torchrun
with DISTRAIN_JOB_DIR set, and prints for each run both ranks' median compute per step as
wall time and as the training thread's CPU time (what the straggler rule compares on CPU;
distrain.launch.report.job_summary), with the ratio slower/faster of each.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/common.py
from common import TESTS, TORCHRUN, env, loadavg  # noqa: E402

from distrain.launch.report.job_summary import read  # noqa: E402


def main() -> None:
    """Run the balanced jobs and print the per-run ratios and the largest."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=8)
    p.add_argument("--steps", type=int, default=80)
    args = p.parse_args()
    print(f"load before: {loadavg()}")
    worst = {"wall": 1.0, "cpu": 1.0}
    for run in range(1, args.runs + 1):
        with tempfile.TemporaryDirectory() as folder:
            cmd = [*TORCHRUN, "--nproc-per-node", "2", "--standalone",
                   str(TESTS / "scripts" / "breakdown_job.py"),
                   "--steps", str(args.steps)]  # fmt: skip
            subprocess.run(
                cmd,
                env=env(DISTRAIN_JOB_DIR=folder),
                capture_output=True,
                timeout=300,
                check=True,
            )
            ranks = read(folder)  # the ranks' breakdown events, by rank
        line = [f"run {run}:"]
        for name, key in (("wall", "compute_median_s"), ("cpu", "compute_cpu_median_s")):
            a, b = (r[key] for r in ranks)
            ratio = max(a, b) / min(a, b)
            worst[name] = max(worst[name], ratio)
            line.append(f"{name} {a * 1e3:.2f} / {b * 1e3:.2f} ms (x{ratio:.3f})")
        print(" ".join(line), flush=True)
    print(f"largest ratio: wall x{worst['wall']:.3f}, cpu x{worst['cpu']:.3f}")
    print(f"load after: {loadavg()}")


if __name__ == "__main__":
    main()
