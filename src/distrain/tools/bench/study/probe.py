"""Size the built-in `cnn` workload on the machine the study runs on.

A fixed workload stops being compute-bound on a faster CPU: the same 32×32 CNN that took
40 ms a step on one machine of this kind took a quarter of that on another, and then the
per-step all-reduce and fixed costs dominate and the study says more about latency than about
scaling.  The probe times one training step (forward, backward, SGD) of the workload's model in
this process, with the threads one worker will have, and picks the image size (compute grows
with its area; the parameters, and so the all-reduce, do not) whose step takes about the target
time.  The report states what was measured and chosen.
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Any

#: a step of about this long per process keeps the all-reduce and per-step costs small
TARGET_STEP_S = 0.15
#: the smallest and largest image side the probe picks (multiples of 8)
MIN_SIZE, MAX_SIZE = 32, 160


def time_step(image_size: int, batch: int, repeats: int = 5) -> float:
    """Median seconds of a training step of the workload's CNN on a random batch (2 warm-ups)."""
    import torch
    import torch.nn.functional as F

    from distrain.tools.bench.study.workload import Net

    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.rand(batch, 1, image_size, image_size), torch.randint(0, 10, (batch,))
    times = []
    for i in range(repeats + 2):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        opt.step()
        if i >= 2:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def mflop_per_sample(image_size: int) -> float:
    """Forward + backward MFLOP of one sample (torch's FlopCounterMode on a batch of 2)."""
    import torch
    import torch.nn.functional as F
    from torch.utils.flop_counter import FlopCounterMode

    from distrain.tools.bench.study.workload import Net

    model = Net()
    with FlopCounterMode(display=False) as counter:
        F.cross_entropy(
            model(torch.rand(2, 1, image_size, image_size)), torch.randint(0, 10, (2,))
        ).backward()
    return counter.get_total_flops() / 2 / 1e6


def pick_size(measured_size: int, measured_s: float, target_s: float) -> int:
    """The image side (multiple of 8, in range) whose step takes `target_s`, from one timing."""
    if measured_s <= 0:
        return MIN_SIZE
    side = measured_size * math.sqrt(target_s / measured_s)
    return int(min(MAX_SIZE, max(MIN_SIZE, 8 * math.ceil(side / 8))))


def size_cnn(target_s: float, batch: int, threads: int) -> dict[str, Any]:
    """Measure at 32×32, pick the size for `target_s`, measure it: what the report prints."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        first = time_step(MIN_SIZE, batch)
        size = pick_size(MIN_SIZE, first, target_s)
        chosen = time_step(size, batch) if size != MIN_SIZE else first
    finally:
        torch.set_num_threads(before)
    return {
        "image_size": size,
        "step_seconds": round(chosen, 4),
        "target_seconds": target_s,
        "batch_size": batch,
        "threads": threads,
        "probe": [[MIN_SIZE, round(first, 4)], [size, round(chosen, 4)]],
        "mflop_per_sample": round(mflop_per_sample(size), 1),
    }


def describe(sizing: dict[str, Any]) -> str:
    """One sentence for the report: how the workload was sized."""
    (s0, t0), (s1, t1) = sizing["probe"]
    return (
        f"sized on this machine: one step of {sizing['batch_size']} samples on "
        f"{sizing['threads']} thread(s) took "
        f"{t0 * 1000:.0f} ms at {s0}×{s0}; for a step of about "
        f"{sizing['target_seconds'] * 1000:.0f} ms the images are "
        f"{s1}×{s1} ({t1 * 1000:.0f} ms measured, {sizing['mflop_per_sample']:.0f} MFLOP per "
        "sample forward + backward)"
    )
