"""Where launch → first step goes, in CPU seconds per process (load-independent critical path).

    python3 benchmarks/launch/launch_timeline.py --rounds 2

On a machine shared with other jobs, wall time mostly measures the others.  This samples every
process of the job every 20 ms (psutil) and adds CPU seconds along the critical path to the
first step (the last rank's, see first_step.py):

- torchrun / spawn: launcher CPU until the workers exist + the slower worker's CPU until its step;
- fast: max(launcher CPU, fork server CPU) until the workers are forked + the slower worker's CPU.

On an idle machine with a core per concurrently busy process (2 here) that sum is the wall time
to expect; it is an estimate, printed beside the wall time measured in the same run.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/common.py
from common import env  # noqa: E402
from first_step import env_for, first_steps  # noqa: E402
from launch_bench import (
    LAUNCHERS as ALL_LAUNCHERS,  # noqa: E402
    SCRIPTS as ALL_SCRIPTS,  # noqa: E402
)

SCRIPTS = {name: ALL_SCRIPTS[name] for name in ("digits", "plain")}
LAUNCHERS = {name: ALL_LAUNCHERS[name] for name in ("distrain-fast", "torchrun")}


def _cpu(p: psutil.Process) -> float:
    t = p.cpu_times()
    return t.user + t.system


def one(launcher: str, script: str, work: Path) -> tuple[float, float]:
    """(critical-path CPU seconds, wall seconds) to the last rank's first step."""
    marker = work / f"{launcher}-{script}-{time.monotonic_ns()}.txt"
    cmd = (
        LAUNCHERS[launcher] + SCRIPTS[script] + ([str(work / "out")] if script == "digits" else [])
    )
    run_dir = work / f"run-{marker.stem}"
    job_env = env(
        **env_for(marker, run_dir), OMP_NUM_THREADS="1", TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1"
    )
    t0 = time.time()
    proc = subprocess.Popen(cmd, env=job_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    root = psutil.Process(proc.pid)
    cpu: dict[int, float] = {}
    launcher_cpu_at_workers: float | None = None
    server_cpu_at_workers = 0.0
    workers: list[int] = []
    server: int | None = None
    while proc.poll() is None:
        try:
            cpu[root.pid] = _cpu(root)
            for c in root.children(recursive=True):
                line = " ".join(c.cmdline())
                cpu[c.pid] = _cpu(c)
                if "forkserver import main" in line and c.ppid() == root.pid:
                    server = c.pid
                is_worker = (server is not None and c.ppid() == server) or "-u " + SCRIPTS[script][
                    0
                ] in line
                if is_worker and c.pid not in workers:
                    workers.append(c.pid)
        except psutil.Error:
            pass
        if len(workers) >= 2 and launcher_cpu_at_workers is None:
            launcher_cpu_at_workers = cpu[root.pid]
            server_cpu_at_workers = cpu.get(server, 0.0) if server else 0.0
        stamps = first_steps(marker, run_dir)
        if len(stamps) >= 2:
            wall = max(stamps) - t0
            worker_cpu = max(cpu.get(w, 0.0) for w in workers)
            proc.wait()
            assert launcher_cpu_at_workers is not None
            return max(launcher_cpu_at_workers, server_cpu_at_workers) + worker_cpu, wall
        time.sleep(0.02)
    raise RuntimeError(
        f"{launcher} {script} ended (exit {proc.returncode}) without two first-step lines"
    )


def main() -> None:
    """Interleaved rounds; prints medians and the fast/torchrun ratios."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    res: dict[tuple[str, str], list[tuple[float, float]]] = {}
    names = list(LAUNCHERS)
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            for script in SCRIPTS:
                for launcher in names[r % 2 :] + names[: r % 2]:
                    cp, wall = one(launcher, script, Path(tmp))
                    res.setdefault((script, launcher), []).append((cp, wall))
                    print(
                        f"round {r + 1} {script:6s} {launcher:14s} critical-path CPU {cp:6.2f} s   "
                        f"wall {wall:6.2f} s",
                        flush=True,
                    )
    print("\nmedians: critical-path CPU seconds (ratio fast/torchrun), wall seconds (ratio)")
    for script in SCRIPTS:
        cps = {n: statistics.median(c for c, _ in res[(script, n)]) for n in names}
        walls = {n: statistics.median(w for _, w in res[(script, n)]) for n in names}
        print(
            f"  {script:6s} fast {cps['distrain-fast']:6.2f}  torchrun {cps['torchrun']:6.2f}  "
            f"ratio {cps['distrain-fast'] / cps['torchrun']:4.2f}"
            f"   | wall fast {walls['distrain-fast']:6.2f} torchrun {walls['torchrun']:6.2f} ratio "
            f"{walls['distrain-fast'] / walls['torchrun']:4.2f}"
        )


if __name__ == "__main__":
    main()
