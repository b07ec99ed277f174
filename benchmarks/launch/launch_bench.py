"""Launch → first training step: `distrain run` (fast), `distrain run --start-method spawn`, torchrun.

    PYTHONPATH=$PWD/src python3 benchmarks/launch_bench.py --rounds 4

Each round runs every (script, launcher) pair once, in rotating order (interleaved, so machine
load hits all alike).  "First step" is the last rank's first-step time (see first_step.py),
written right after its first optimizer step; time 0 is just before the launcher
process is started.  Prints medians and ratios against torchrun.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from first_step import env_for, first_steps

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable

SCRIPTS = {
    "digits": [str(REPO / "examples" / "train_digits.py"), "--epochs", "1", "--out"],  # + out dir
    "plain": [str(REPO / "benchmarks" / "plain_ddp.py"), "--steps", "5"],
}
LAUNCHERS = {
    "distrain-fast": [PY, "-m", "distrain.cli", "run", "-n", "2"],
    "distrain-spawn": [PY, "-m", "distrain.cli", "run", "-n", "2", "--start-method", "spawn"],
    "torchrun": [PY, "-m", "torch.distributed.run", "--nproc-per-node", "2"],
}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def one(launcher: str, script: str, work: Path, timeout: float) -> tuple[float, float]:
    """(seconds from launch to the last rank's first step, CPU seconds of the whole job).

    The CPU time (every process of the job: launcher, fork server, workers, all reaped) does
    not depend on how loaded the shared machine is, unlike the wall time.
    """
    marker = work / f"{launcher}-{script}-{time.monotonic_ns()}.txt"
    cmd = LAUNCHERS[launcher] + SCRIPTS[script]
    if script == "digits":
        cmd = cmd + [str(work / "out")]
    run_dir = work / f"run-{marker.stem}"
    env = dict(os.environ, **env_for(marker, run_dir), OMP_NUM_THREADS="1", TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), env.get("PYTHONPATH", "")])
    cpu0, t0 = _children_cpu(), time.time()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    cpu = _children_cpu() - cpu0
    if proc.returncode != 0:
        raise RuntimeError(f"{launcher} {script} exit {proc.returncode}: {proc.stderr[-2000:]}")
    stamps = first_steps(marker, run_dir)
    return max(stamps) - t0, cpu


def main() -> None:
    """Run the rounds and print a table of medians and ratios."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--timeout", type=float, default=300)
    a = ap.parse_args()
    results: dict[tuple[str, str], list[float]] = {}
    cpus: dict[tuple[str, str], list[float]] = {}
    names = list(LAUNCHERS)
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            order = names[r % len(names):] + names[: r % len(names)]
            for script in SCRIPTS:
                for launcher in order:
                    t, cpu = one(launcher, script, Path(tmp), a.timeout)
                    results.setdefault((script, launcher), []).append(t)
                    cpus.setdefault((script, launcher), []).append(cpu)
                    print(f"round {r + 1} {script:6s} {launcher:15s} {t:6.2f} s  (job CPU {cpu:6.2f} s)", flush=True)
    print("\nlaunch → first step, median over rounds (seconds); ratio vs torchrun; CPU s of the whole job")
    for script in SCRIPTS:
        base = statistics.median(results[(script, "torchrun")])
        cpu_base = statistics.median(cpus[(script, "torchrun")])
        for launcher in names:
            vals = results[(script, launcher)]
            med = statistics.median(vals)
            cpu = statistics.median(cpus[(script, launcher)])
            print(f"  {script:6s} {launcher:15s} median {med:6.2f}  min {min(vals):6.2f}  ratio {med / base:5.2f}"
                  f"  CPU {cpu:6.2f} (ratio {cpu / cpu_base:4.2f})  all {' '.join(f'{v:.2f}' for v in vals)}")


if __name__ == "__main__":
    main()
