"""`distrain bench comm`'s all-reduce busbw vs a hand-written torch.distributed loop, interleaved.

Run under a launcher (2 ranks on one machine):

    PYTHONPATH=src python3 -m distrain.cli run -n 2 benchmarks/comm/comm.py --rounds 7

Each round times the same 64 MiB float32 all-reduce twice in the same processes, once through
distrain.tools.bench.comm.measure (what the CLI calls) and once with a plain loop, alternating which
goes first; rank 0 prints both busbw medians, the per-round ratio, and this machine's memory-copy
bandwidth, the physical ceiling for loopback communication between processes.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch
import torch.distributed as dist

import distrain
from distrain.tools.bench.comm import measure


def hand_loop(nbytes: int, warmup: int, iters: int) -> float:
    """busbw (GB/s) of `iters` plain dist.all_reduce calls, timed like nccl-tests."""
    world = dist.get_world_size()
    t = torch.ones(nbytes // 4, dtype=torch.float32)
    for _ in range(warmup):
        dist.all_reduce(t)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(t)
    elapsed = torch.tensor([(time.perf_counter() - start) / iters], dtype=torch.float64)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    return nbytes / float(elapsed.item()) / 1e9 * 2 * (world - 1) / world


def copy_bandwidth(nbytes: int = 256 * 2**20, repeats: int = 5) -> dict[str, float]:
    """Best-of bytes copied per second (GB/s) for numpy and torch copies of `nbytes`."""
    src = np.ones(nbytes // 8)
    dst = np.empty_like(src)
    best_np = min(_timed(lambda: np.copyto(dst, src)) for _ in range(repeats))
    a = torch.ones(nbytes // 4)
    b = torch.empty_like(a)
    best_t = min(_timed(lambda: b.copy_(a)) for _ in range(repeats))
    return {"numpy_copy_gbps": nbytes / best_np / 1e9, "torch_copy_gbps": nbytes / best_t / 1e9}


def _timed(fn: object) -> float:
    start = time.perf_counter()
    fn()  # type: ignore[operator]
    return time.perf_counter() - start


def main() -> None:
    """Interleave both measurements for --rounds rounds and print the comparison on rank 0."""
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--bytes", type=int, default=64 * 2**20)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--iters", type=int, default=10)
    args = p.parse_args()
    ctx = distrain.init(verbose=False)
    ours, plain = [], []
    for r in range(args.rounds):

        def a() -> None:
            ours.append(
                measure(
                    "all_reduce",
                    args.bytes,
                    args.warmup,
                    args.iters,
                    ctx.device,
                    torch.float32,
                    check=False,
                ).busbw_gbps
            )

        def b() -> None:
            plain.append(hand_loop(args.bytes, args.warmup, args.iters))

        for step in (a, b) if r % 2 == 0 else (b, a):
            step()
    ctx.shutdown()
    if ctx.rank != 0:
        return
    ratios = [o / h for o, h in zip(ours, plain, strict=True)]
    copy = copy_bandwidth()
    print(
        f"world {ctx.world_size} · {ctx.backend} · {args.bytes // 2**20} MiB float32 all-reduce · "
        f"{args.rounds} interleaved rounds x {args.iters} iters"
    )
    print(
        "distrain bench comm busbw GB/s: "
        + " ".join(f"{x:.3f}" for x in ours)
        + f"  median {statistics.median(ours):.3f}"
    )
    print(
        "hand-written loop busbw GB/s:   "
        + " ".join(f"{x:.3f}" for x in plain)
        + f"  median {statistics.median(plain):.3f}"
    )
    print(
        "per-round ratio distrain/hand:  "
        + " ".join(f"{x:.3f}" for x in ratios)
        + f"  median {statistics.median(ratios):.3f}"
    )
    print(
        f"memory copy (256 MiB, best of 5): numpy {copy['numpy_copy_gbps']:.2f} GB/s, torch "
        f"{copy['torch_copy_gbps']:.2f} GB/s"
    )


if __name__ == "__main__":
    main()
