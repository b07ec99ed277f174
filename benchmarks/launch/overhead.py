"""Is distrain's training loop free? And does `distrain run` start as fast as torchrun?

    python3 benchmarks/launch/overhead.py [--rounds 5] [--steps 80] [--no-launch]

1. Step time: the same 2-process training (digits-sized CNN and a wider one) with the distrain
   loop and with a hand-written DDP loop, both launched by torchrun, interleaved round by round.
   Prints the median step-time ratio distrain / hand-written (goal ≤ 1.01).
2. Launch → first finished training step: `distrain run -n 2` vs `torchrun --nproc-per-node 2`
   on the same script (overhead_worker.py's distrain loop), interleaved (goal ≤ 1.05×).  This
   is launch_bench.py's measurement (alone: `launch_bench.py --scripts overhead --launchers
   distrain-fast,torchrun`): the last rank's first step.  The issue-2 numbers in RESULTS.md
   were taken before it was shared, on rank 0's first step under `torchrun --standalone`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/common.py
from common import TORCHRUN, env  # noqa: E402
from launch_bench import measure  # noqa: E402

WORKER = str(Path(__file__).resolve().parent / "overhead_worker.py")


def step_time(impl: str, model: str, steps: int) -> float:
    cmd = [
        *TORCHRUN,
        "--standalone",
        "--nproc-per-node",
        "2",
        WORKER,
        "--impl",
        impl,
        "--model",
        model,
        "--steps",
        str(steps),
    ]
    out = subprocess.run(
        cmd, env=env(OMP_NUM_THREADS="1"), capture_output=True, text=True, timeout=600, check=True
    ).stdout
    line = next(ln for ln in out.splitlines() if ln.startswith("{"))
    return float(json.loads(line)["step_s"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--no-launch", action="store_true", help="step time only (part 1)")
    args = parser.parse_args()
    print(
        f"# machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; rounds {args.rounds}, "
        f"steps {args.steps}"
    )
    for model in ("digits", "large"):
        ratios, d_times, h_times = [], [], []
        for _ in range(args.rounds):
            h = step_time("ddp", model, args.steps)
            d = step_time("distrain", model, args.steps)
            h_times.append(h)
            d_times.append(d)
            ratios.append(d / h)
        print(
            f"step time [{model}]: distrain {statistics.median(d_times) * 1e3:.2f} ms, "
            "hand-written DDP "
            f"{statistics.median(h_times) * 1e3:.2f} ms, ratio median "
            f"{statistics.median(ratios):.3f} "
            f"(per round: {', '.join(f'{r:.3f}' for r in ratios)})"
        )
    if args.no_launch:
        return
    res, _cpu = measure(["overhead"], ["torchrun", "distrain-fast"], args.rounds, timeout=600)
    dr, tr = res[("overhead", "distrain-fast")], res[("overhead", "torchrun")]
    ratios = [d / t for d, t in zip(dr, tr, strict=True)]
    print(
        f"launch → first step: distrain run {statistics.median(dr):.2f} s, torchrun "
        f"{statistics.median(tr):.2f} s, "
        f"ratio median {statistics.median(ratios):.3f} (per round: "
        f"{', '.join(f'{r:.3f}' for r in ratios)})"
    )


if __name__ == "__main__":
    main()
