"""How often does plain torchrun restart a plain gloo script? With and without the store fix.

    python3 benchmarks/recovery/restart_tally.py --runs 6 --timeout 240

Each run: ``torchrun --standalone --nproc-per-node 2 --max-restarts 2`` on
raw_restart_worker.py (plain ``init_process_group("gloo")``, no distrain; rank 1
SIGKILLs itself at step 3 of the first attempt).  A run is *good* when the job exits 0 with both
ranks' "finished" line, *failed* when it exits non-zero, *hung* when it is still running after
``--timeout`` seconds (then killed).  The two settings alternate run by run, so both see the same
load: TORCH_DISABLE_SHARE_RDZV_TCP_STORE unset (torch's default: workers share the agent's
store) and =1 (what `distrain run` sets).  Prints one tally line per setting, the torch version
and the load average before and after.  (``recovery.py --control N`` runs the same tally.)
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/common.py
from common import TORCHRUN, loadavg, run_bounded  # noqa: E402

WORKER = Path(__file__).resolve().parent / "raw_restart_worker.py"
SETTINGS = {"shared store (torch default)": True, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1": False}


def one(share: bool, timeout: float) -> tuple[str, float]:
    job_env = dict(os.environ, OMP_NUM_THREADS="1")
    job_env.pop("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", None)
    if not share:
        job_env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    cmd = [*TORCHRUN, "--standalone", "--nproc-per-node", "2", "--max-restarts", "2", str(WORKER)]
    start = time.monotonic()
    out, code = run_bounded(cmd, job_env, timeout)
    if out is None:
        return "hung", time.monotonic() - start
    return (
        "good" if code == 0 and out.count("finished") >= 2 else "failed"
    ), time.monotonic() - start


def tally(runs: int, timeout: float) -> None:
    """`runs` runs per setting, alternating; prints every run and one tally line per setting."""
    counts: dict[str, dict[str, int]] = {name: {} for name in SETTINGS}
    for i in range(runs):
        for name, share in SETTINGS.items():
            outcome, seconds = one(share, timeout)
            counts[name][outcome] = counts[name].get(outcome, 0) + 1
            print(f"  run {i + 1} {name}: {outcome} in {seconds:.0f} s", flush=True)
    for name, c in counts.items():
        print(
            f"{name}: {c.get('good', 0)}/{runs} good, {c.get('failed', 0)} failed, "
            f"{c.get('hung', 0)} hung (> {timeout:.0f} s)"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=6, help="runs per setting")
    ap.add_argument("--timeout", type=float, default=240)
    a = ap.parse_args()
    import torch

    print(f"torch {torch.__version__}; load before: {loadavg()}", flush=True)
    tally(a.runs, a.timeout)
    print(f"load after: {loadavg()}")


if __name__ == "__main__":
    main()
