"""How often does plain torchrun restart a plain gloo script? With and without the store fix.

    python3 benchmarks/restart_tally.py --runs 6 --timeout 240

Each run: ``torchrun --standalone --nproc-per-node 2 --max-restarts 2`` on
benchmarks/raw_restart_worker.py (plain ``init_process_group("gloo")``, no distrain; rank 1
SIGKILLs itself at step 3 of the first attempt).  A run is *good* when the job exits 0 with both
ranks' "finished" line, *failed* when it exits non-zero, *hung* when it is still running after
``--timeout`` seconds (then killed).  The two settings alternate run by run, so both see the same
load: TORCH_DISABLE_SHARE_RDZV_TCP_STORE unset (torch's default: workers share the agent's
store) and =1 (what `distrain run` sets).  Prints one tally line per setting, the torch version
and the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from proc_tree import kill_tree

HERE = Path(__file__).resolve().parent
WORKER = HERE / "raw_restart_worker.py"


def one(share: bool, timeout: float) -> tuple[str, float]:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", None)
    if not share:
        env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "--max-restarts", "2", str(WORKER)]
    start = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_tree(proc)
        proc.communicate()
        return "hung", time.monotonic() - start
    finished = out.count("finished")
    return ("good" if proc.returncode == 0 and finished >= 2 else "failed"), time.monotonic() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=6, help="runs per setting")
    ap.add_argument("--timeout", type=float, default=240)
    a = ap.parse_args()
    import torch

    print(f"torch {torch.__version__}; load before: {open('/proc/loadavg').read().strip()}", flush=True)
    tally: dict[str, dict[str, int]] = {"shared store (torch default)": {}, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1": {}}
    for i in range(a.runs):
        for share, name in ((True, "shared store (torch default)"), (False, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1")):
            outcome, seconds = one(share, a.timeout)
            tally[name][outcome] = tally[name].get(outcome, 0) + 1
            print(f"  run {i + 1} {name}: {outcome} in {seconds:.0f} s", flush=True)
    for name, counts in tally.items():
        print(f"{name}: {counts.get('good', 0)}/{a.runs} good, {counts.get('failed', 0)} failed, "
              f"{counts.get('hung', 0)} hung (> {a.timeout:.0f} s)")
    print(f"load after: {open('/proc/loadavg').read().strip()}")


if __name__ == "__main__":
    main()
