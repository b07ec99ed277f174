"""How often does a gloo + DDP job fail to exit cleanly when the interpreter tears it down?

    python3 benchmarks/recovery/exit_tally.py --runs 20 --timeout 120

Each run starts 2 ranks with ``torchrun --standalone`` on exit_worker.py (a few
DDP steps on gloo) in two variants that alternate run by run: ``teardown`` (the script leaves
DDP and the process group to interpreter teardown, as most tutorials do) and ``shutdown``
(``ctx.shutdown()`` semantics: DDP's references dropped, group destroyed while Python is alive,
which `distrain.init()` registers at exit).  A run is *clean* when it exits 0 without
"terminate called", *abort* when a rank aborts, *hung* when it is still running after
``--timeout`` s.  Prints the tally per variant, the torch version and the load before and after.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/common.py
from common import TORCHRUN, loadavg, run_bounded  # noqa: E402

WORKER = Path(__file__).resolve().parent / "exit_worker.py"


def one(mode: str, timeout: float) -> str:
    cmd = [*TORCHRUN, "--standalone", "--nproc-per-node", "2", str(WORKER), mode]
    out, code = run_bounded(cmd, dict(os.environ, OMP_NUM_THREADS="1"), timeout)
    if out is None:
        return "hung"
    if "terminate called" in out or code != 0:
        return "abort"
    return "clean"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20, help="runs per variant")
    ap.add_argument("--timeout", type=float, default=120)
    a = ap.parse_args()
    import torch

    print(f"torch {torch.__version__}; load before: {loadavg()}", flush=True)
    tally: dict[str, dict[str, int]] = {"teardown": {}, "shutdown": {}}
    start = time.monotonic()
    for i in range(a.runs):
        for mode in tally:
            outcome = one(mode, a.timeout)
            tally[mode][outcome] = tally[mode].get(outcome, 0) + 1
            print(f"  run {i + 1} {mode}: {outcome}", flush=True)
    for mode, counts in tally.items():
        print(
            f"{mode}: {counts.get('clean', 0)}/{a.runs} clean, {counts.get('abort', 0)} aborted, "
            f"{counts.get('hung', 0)} hung"
        )
    print(f"load after: {loadavg()}; {time.monotonic() - start:.0f} s")


if __name__ == "__main__":
    main()
