"""Is distrain's training loop free? And does `distrain run` start as fast as torchrun?

    python benchmarks/overhead.py [--rounds 5] [--steps 80]

1. Step time: the same 2-process training (digits-sized CNN and a wider one) with the distrain
   loop and with a hand-written DDP loop, both launched by torchrun, interleaved round by round.
   Prints the median step-time ratio distrain / hand-written (goal ≤ 1.01).
2. Launch → first finished training step: `distrain run -n 2` vs `torchrun --standalone
   --nproc-per-node 2` on the same script, interleaved (goal ≤ 1.05×).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORKER = str(HERE / "overhead_worker.py")
ENV = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(HERE.parent / "src"))


def step_time(impl: str, model: str, steps: int) -> float:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", WORKER,
           "--impl", impl, "--model", model, "--steps", str(steps)]
    out = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=600, check=True).stdout
    line = next(ln for ln in out.splitlines() if ln.startswith("{"))
    return float(json.loads(line)["step_s"])


def launch_to_first_step(launcher: str) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        marker = os.path.join(tmp, "first")
        script = [WORKER, "--impl", "distrain", "--steps", "3", "--warmup", "1", "--first-step-file", marker]
        if launcher == "distrain":
            cmd = [sys.executable, "-m", "distrain.cli", "run", "-n", "2", *script]
        else:
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", *script]
        start = time.time()
        subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=600, check=True)
        return float(Path(marker).read_text()) - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=80)
    args = parser.parse_args()
    print(f"# machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; rounds {args.rounds}, steps {args.steps}")
    for model in ("digits", "large"):
        ratios, d_times, h_times = [], [], []
        for _ in range(args.rounds):
            h = step_time("ddp", model, args.steps)
            d = step_time("distrain", model, args.steps)
            h_times.append(h)
            d_times.append(d)
            ratios.append(d / h)
        print(f"step time [{model}]: distrain {statistics.median(d_times) * 1e3:.2f} ms, hand-written DDP "
              f"{statistics.median(h_times) * 1e3:.2f} ms, ratio median {statistics.median(ratios):.3f} "
              f"(per round: {', '.join(f'{r:.3f}' for r in ratios)})")
    dr, tr, ratios = [], [], []
    for _ in range(args.rounds):
        t = launch_to_first_step("torchrun")
        d = launch_to_first_step("distrain")
        tr.append(t)
        dr.append(d)
        ratios.append(d / t)
    print(f"launch → first step: distrain run {statistics.median(dr):.2f} s, torchrun {statistics.median(tr):.2f} s, "
          f"ratio median {statistics.median(ratios):.3f} (per round: {', '.join(f'{r:.3f}' for r in ratios)})")


if __name__ == "__main__":
    main()
