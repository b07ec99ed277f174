"""Launch → first step: `distrain run` (fast), `distrain run --start-method spawn`, torchrun.

    python3 benchmarks/launch/launch_bench.py --rounds 4
    python3 benchmarks/launch/launch_bench.py --scripts overhead --launchers distrain-fast,torchrun

Each round runs every (script, launcher) pair once, in rotating order (interleaved, so machine
load hits all alike).  "First step" is the last rank's first-step time (see first_step.py),
written right after its first optimizer step; time 0 is just before the launcher
process is started.  Prints medians and ratios against torchrun.  Scripts: ``digits``
(examples/train_digits.py, 1 epoch), ``plain`` (plain_ddp.py, no distrain) and ``overhead``
(overhead_worker.py's distrain loop, what overhead.py's launch part times).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/common.py
from common import REPO, RUN, TORCHRUN, env  # noqa: E402
from first_step import env_for, first_steps  # noqa: E402

HERE = Path(__file__).resolve().parent
SCRIPTS = {
    "digits": [str(REPO / "examples" / "train_digits.py"), "--epochs", "1", "--out"],  # + out dir
    "plain": [str(HERE / "plain_ddp.py"), "--steps", "5"],
    "overhead": [
        str(HERE / "overhead_worker.py"),
        "--impl",
        "distrain",
        "--steps",
        "3",
        "--warmup",
        "1",
    ],
}
LAUNCHERS = {
    "distrain-fast": RUN + ["-n", "2"],
    "distrain-spawn": RUN + ["-n", "2", "--start-method", "spawn"],
    "torchrun": TORCHRUN + ["--nproc-per-node", "2"],
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
    job_env = env(
        **env_for(marker, run_dir), OMP_NUM_THREADS="1", TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1"
    )
    cpu0, t0 = _children_cpu(), time.time()
    proc = subprocess.run(cmd, env=job_env, capture_output=True, text=True, timeout=timeout)
    cpu = _children_cpu() - cpu0
    if proc.returncode != 0:
        raise RuntimeError(f"{launcher} {script} exit {proc.returncode}: {proc.stderr[-2000:]}")
    stamps = first_steps(marker, run_dir)
    return max(stamps) - t0, cpu


def measure(
    scripts: list[str], launchers: list[str], rounds: int, timeout: float
) -> tuple[dict[tuple[str, str], list[float]], dict[tuple[str, str], list[float]]]:
    """Interleaved rounds: ({(script, launcher): s per round}, {same: job CPU s per round})."""
    results: dict[tuple[str, str], list[float]] = {}
    cpus: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            order = launchers[r % len(launchers) :] + launchers[: r % len(launchers)]
            for script in scripts:
                for launcher in order:
                    t, cpu = one(launcher, script, Path(tmp), timeout)
                    results.setdefault((script, launcher), []).append(t)
                    cpus.setdefault((script, launcher), []).append(cpu)
                    print(
                        f"round {r + 1} {script:6s} {launcher:15s} {t:6.2f} s  (job "
                        f"CPU {cpu:6.2f} s)",
                        flush=True,
                    )
    return results, cpus


def main() -> None:
    """Run the rounds and print a table of medians and ratios."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument(
        "--scripts", default="digits,plain", help="comma-separated: " + ", ".join(SCRIPTS)
    )
    ap.add_argument(
        "--launchers", default=",".join(LAUNCHERS), help="comma-separated: " + ", ".join(LAUNCHERS)
    )
    a = ap.parse_args()
    scripts, names = a.scripts.split(","), a.launchers.split(",")
    results, cpus = measure(scripts, names, a.rounds, a.timeout)
    base_name = "torchrun" if "torchrun" in names else names[0]
    print(
        f"\nlaunch → first step, median over rounds (seconds); ratio vs {base_name}; CPU s "
        "of the whole job"
    )
    for script in scripts:
        base = statistics.median(results[(script, base_name)])
        cpu_base = statistics.median(cpus[(script, base_name)])
        for launcher in names:
            vals = results[(script, launcher)]
            med = statistics.median(vals)
            cpu = statistics.median(cpus[(script, launcher)])
            print(
                f"  {script:6s} {launcher:15s} median {med:6.2f}  min {min(vals):6.2f}  ratio "
                f"{med / base:5.2f}"
                f"  CPU {cpu:6.2f} (ratio {cpu / cpu_base:4.2f})  all "
                f"{' '.join(f'{v:.2f}' for v in vals)}"
            )


if __name__ == "__main__":
    main()
