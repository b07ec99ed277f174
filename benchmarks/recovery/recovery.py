"""Recovery time: SIGKILL of one worker -> first training step of the restarted group, in seconds.

    PYTHONPATH=src python3 benchmarks/recovery.py --rounds 3

A 2-rank job (tests/ckpt_worker.py) kills rank 1 with SIGKILL at step 6 on the first attempt;
the time from the kill to rank 0's first completed step after the restart is measured for:

- ``distrain run`` + checkpoint resume (restore, then continue mid-epoch);
- plain ``torchrun`` + checkpoint resume (the same script: distrain.init's per-attempt store);
- plain ``torchrun`` restarting the script from scratch (no checkpoint): torchrun's own restart.

Variants are interleaved round by round so machine load hits them alike.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WORKER = str(REPO / "tests" / "ckpt_worker.py")
PY = sys.executable


def variants(d: str) -> dict[str, list[str]]:
    """name -> command; {d} holds the checkpoint dir and timeline of one run."""
    common = ["--out", f"{d}/final.pt", "--kill-at", "6", "--timeline", f"{d}/timeline", "--epochs", "2"]
    return {
        "distrain run + resume": [PY, "-m", "distrain.cli", "run", "-n", "2", "--max-restarts", "1", WORKER, "--dir", f"{d}/ckpt", *common],
        "torchrun + resume": [PY, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--max-restarts", "1", "--monitor-interval", "0.1",
                              WORKER, "--", "--dir", f"{d}/ckpt", *common],
        "torchrun, from scratch": [PY, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--max-restarts", "1", "--monitor-interval", "0.1",
                                   WORKER, "--", *common],
    }


def one(cmd: list[str], d: str) -> float:
    """Run one job; seconds from the kill to the first step after the restart."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]), OMP_NUM_THREADS="1")
    subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=True)
    events = dict(line.split() for line in Path(d, "timeline").read_text().splitlines())
    return float(events["resumed_step"]) - float(events["fault"])


def control(runs: int, timeout: float, share_store: bool) -> None:
    """Kill-and-restart a plain torch.distributed script under torchrun: finished / failed / hung."""
    tally = {"finished": 0, "failed": 0, "hung": 0}
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", None)
    if not share_store:
        env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    cmd = [PY, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--max-restarts", "2", "--monitor-interval", "0.1",
           str(REPO / "benchmarks" / "raw_restart_worker.py")]
    for _ in range(runs):
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        try:
            proc.communicate(timeout=timeout)
            tally["finished" if proc.returncode == 0 else "failed"] += 1
        except subprocess.TimeoutExpired:
            tally["hung"] += 1
        finally:
            import psutil

            with contextlib.suppress(psutil.Error):  # torchrun's workers live in their own sessions
                for child in psutil.Process(proc.pid).children(recursive=True):
                    child.kill()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    label = "default (workers share the agent's store)" if share_store else "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1"
    print(f"control, plain init_process_group under torchrun --max-restarts 2, {label}: {tally} of {runs} (hung = no exit in {timeout:g} s)", flush=True)


def main() -> None:
    """Interleave the variants for --rounds rounds; print medians."""
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--control", type=int, default=0, help="also run N kill-restarts of a plain torch.distributed script")
    p.add_argument("--control-timeout", type=float, default=90)
    args = p.parse_args()
    if args.control:
        control(args.control, args.control_timeout, share_store=True)
        control(args.control, args.control_timeout, share_store=False)
    results: dict[str, list[float]] = {}
    for r in range(args.rounds):
        for name in variants("-"):
            with tempfile.TemporaryDirectory() as d:
                t = one(variants(d)[name], d)
            results.setdefault(name, []).append(t)
            print(f"round {r + 1}: {name:<24} {t:6.2f} s", flush=True)
    base = statistics.median(results["torchrun, from scratch"])
    print(f"\nSIGKILL -> first training step after restart, median of {args.rounds} (2 ranks, gloo, CPU):")
    for name, ts in results.items():
        med = statistics.median(ts)
        print(f"  {name:<24} {med:6.2f} s   (min {min(ts):.2f}, max {max(ts):.2f}; {med / base:.2f}x torchrun's own restart)")


if __name__ == "__main__":
    t0 = time.time()
    main()
    print(f"total {time.time() - t0:.0f} s")
