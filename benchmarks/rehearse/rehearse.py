"""Does `distrain run --cpu` cost step time? A GPU-style script rehearsed vs its CPU conversion.

    python3 benchmarks/rehearse/rehearse.py [--rounds 5] [--nproc 2] [--steps 60] [--models cnn,mlp]

Each round runs `distrain run --cpu -n N rehearse_train_gpu.py` and `distrain run -n N
rehearse_train_cpu.py` (order alternating round by round), for a small CNN and a tiny MLP (where
per-call overheads would show most).  Prints the median step-time ratio rehearsal / hand-converted
(goal ≤ 1.05).
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
from common import RUN, env, loadavg  # noqa: E402

HERE = Path(__file__).resolve().parent
ENV = env(OMP_NUM_THREADS="1")


def step_time(script: str, cpu: bool, nproc: int, model: str, steps: int) -> float:
    cmd = [
        *RUN,
        *(["--cpu"] if cpu else []),
        "-n",
        str(nproc),
        str(HERE / script),
        "--model",
        model,
        "--steps",
        str(steps),
    ]
    out = subprocess.run(
        cmd, env=ENV, capture_output=True, text=True, timeout=900, check=True
    ).stdout
    return float(json.loads(next(ln for ln in out.splitlines() if ln.startswith("{")))["step_s"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--models", default="cnn,mlp", help="comma-separated: cnn, mlp")
    args = p.parse_args()
    import torch

    print(
        f"# torch {torch.__version__}; {os.cpu_count()} cores; load {loadavg().split()[:3]}; "
        f"rounds {args.rounds}, nproc {args.nproc}, steps {args.steps}",
        flush=True,
    )
    for model in args.models.split(","):
        ratios, rehearsed, converted = [], [], []
        for r in range(args.rounds):
            pair = [("rehearse_train_gpu.py", True), ("rehearse_train_cpu.py", False)]
            times = {
                cpu: step_time(script, cpu, args.nproc, model, args.steps)
                for script, cpu in (pair if r % 2 == 0 else pair[::-1])
            }
            rehearsed.append(times[True])
            converted.append(times[False])
            ratios.append(times[True] / times[False])
        print(
            f"step time [{model}]: --cpu {statistics.median(rehearsed) * 1e3:.2f} "
            "ms, hand-converted "
            f"{statistics.median(converted) * 1e3:.2f} ms, ratio median "
            f"{statistics.median(ratios):.3f} "
            f"(per round: {', '.join(f'{x:.3f}' for x in ratios)})",
            flush=True,
        )
    print(f"# load after {loadavg().split()[:3]}")


if __name__ == "__main__":
    main()
