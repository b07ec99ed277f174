"""SIGKILL of a worker → first resumed training step: `distrain run` (fast) vs torchrun.

    PYTHONPATH=$PWD/src python3 benchmarks/recovery_bench.py --rounds 3

benchmarks/plain_ddp.py trains with a checkpoint saved every step (--ckpt) under --max-restarts 1.
After both ranks' first step, rank 1 is SIGKILLed; recovery time is from the kill to the last
rank's first step after the restart (DISTRAIN_FIRST_STEP_FILE lines), and the checkpoint load
time the script measured is printed beside it.  Both launchers get
TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (benchmarks/restart_tally.py counts how often torchrun restarts fail without it).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
LAUNCHERS = {
    "distrain-fast": [PY, "-m", "distrain.cli", "run", "-n", "2", "--max-restarts", "1"],
    "distrain-spawn": [PY, "-m", "distrain.cli", "run", "-n", "2", "--max-restarts", "1", "--start-method", "spawn"],
    "torchrun": [PY, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--max-restarts", "1"],
}


def _lines(marker: Path) -> list[list[str]]:
    return [line.split() for line in marker.read_text().splitlines()] if marker.exists() else []


def _wait(marker: Path, attempt: str, proc: subprocess.Popen[str], deadline: float) -> list[list[str]]:
    while time.time() < deadline:
        rows = [r for r in _lines(marker) if r[1] == attempt]
        if len(rows) == 2:
            return rows
        if proc.poll() is not None:
            raise RuntimeError(f"job ended (exit {proc.returncode}) before attempt {attempt} trained")
        time.sleep(0.02)
    raise TimeoutError(f"attempt {attempt} did not train in time")


def one(launcher: str, work: Path, timeout: float) -> tuple[float, float]:
    """(kill → last rank's first resumed step, checkpoint load seconds)."""
    tag = f"{launcher}-{time.monotonic_ns()}"
    marker, ckpt = work / f"{tag}.txt", work / f"{tag}.pt"
    cmd = LAUNCHERS[launcher] + [str(REPO / "benchmarks" / "plain_ddp.py"), "--steps", "400", "--sleep", "0.05", "--ckpt", str(ckpt)]
    env = dict(os.environ, DISTRAIN_FIRST_STEP_FILE=str(marker), OMP_NUM_THREADS="1", TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), env.get("PYTHONPATH", "")])
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.time() + timeout
        first = _wait(marker, "0", proc, deadline)
        time.sleep(1.0)
        victim = int(next(r for r in first if r[0] == "1")[4])
        t_kill = time.time()
        os.kill(victim, signal.SIGKILL)
        resumed = _wait(marker, "1", proc, deadline)
        return max(float(r[2]) for r in resumed) - t_kill, max(float(r[3]) for r in resumed)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def main() -> None:
    """Interleaved rounds; prints medians and the ratio against torchrun."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=300)
    a = ap.parse_args()
    names = list(LAUNCHERS)
    res: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            for launcher in names[r % len(names):] + names[: r % len(names)]:
                try:
                    t, load = one(launcher, Path(tmp), a.timeout)
                except (RuntimeError, TimeoutError) as err:
                    print(f"round {r + 1} {launcher:15s} FAILED: {err}", flush=True)
                    continue
                res[launcher].append((t, load))
                print(f"round {r + 1} {launcher:15s} kill → resumed step {t:6.2f} s (checkpoint load {load:.3f} s)", flush=True)
    base = statistics.median(t for t, _ in res["torchrun"]) if res["torchrun"] else float("nan")
    print("\nSIGKILL → first resumed step, median (seconds); ratio vs torchrun")
    for n in names:
        if res[n]:
            ts = [t for t, _ in res[n]]
            print(f"  {n:15s} median {statistics.median(ts):6.2f}  min {min(ts):6.2f}  ratio {statistics.median(ts) / base:5.2f}"
                  f"  load {statistics.median(lo for _, lo in res[n]):.3f}  all {' '.join(f'{t:.2f}' for t in ts)}")


if __name__ == "__main__":
    main()
