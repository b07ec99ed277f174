"""What CUDA autocast costs when `distrain run --cpu` rehearses it as CPU autocast, per dtype.

    python3 benchmarks/rehearse/rehearse_amp_cost.py --rounds 3 --steps 10

A small conv net (3 conv layers + linear on 3×32×32, batch 32, 1 thread) trains with SGD under
no autocast (fp32), CPU autocast bfloat16 and CPU autocast float16 (what ``autocast("cuda")``
became before the rehearsal mapped fp16 to bf16), with a GradScaler for float16 as scripts use
it.  Modes alternate within each round; prints the median step time of each and the ratios.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import torch
from torch import nn


def net() -> nn.Module:
    """The benchmark's conv net (fixed seed)."""
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(32, 64, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(64, 64, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, 10),
    )


def step_ms(dtype: torch.dtype | None, steps: int) -> float:
    """Median milliseconds of `steps` training steps after 2 warm-up steps."""
    model = net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu", enabled=dtype is torch.float16)
    x, y = torch.randn(32, 3, 32, 32), torch.randint(0, 10, (32,))
    times = []
    for i in range(steps + 2):
        t = time.perf_counter()
        with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        if i >= 2:
            times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def main() -> None:
    """Run the rounds and print one line per mode."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    torch.set_num_threads(1)
    modes = {"fp32": None, "bf16 autocast": torch.bfloat16, "fp16 autocast": torch.float16}
    results: dict[str, list[float]] = {m: [] for m in modes}
    load = open("/proc/loadavg").read().split()[:3]
    print(
        f"# torch {torch.__version__}; {platform.processor() or platform.machine()}; load {load}; "
        f"rounds {args.rounds}, steps {args.steps}, 1 thread",
        flush=True,
    )
    for r in range(args.rounds):
        order = list(modes) if r % 2 == 0 else list(reversed(modes))
        for mode in order:
            results[mode].append(step_ms(modes[mode], args.steps))
        print(f"round {r}: " + ", ".join(f"{m} {results[m][-1]:.1f} ms" for m in modes), flush=True)
    base = statistics.median(results["fp32"])
    for mode in modes:
        med = statistics.median(results[mode])
        print(f"step time [{mode}]: {med:.1f} ms (×{med / base:.2f} of fp32)")
    print(f"# load after {open('/proc/loadavg').read().split()[:3]}; pid {os.getpid()}")


if __name__ == "__main__":
    main()
