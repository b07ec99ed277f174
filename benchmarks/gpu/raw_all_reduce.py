"""A raw NCCL all_reduce loop, the baseline that `distrain bench comm` is compared with (2+ GPUs).

    torchrun --nproc-per-node 8 benchmarks/gpu/raw_all_reduce.py --bytes 256M

Prints algbw and busbw (algbw·2(n−1)/n, as nccl-tests) on rank 0: the mean of --iters timed
all-reduces of a float32 tensor after --warmup untimed ones, timed with CUDA events.
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist

UNITS = {"K": 2**10, "M": 2**20, "G": 2**30}


def main() -> None:
    """One process per GPU under torchrun; rank 0 prints the figures."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bytes", default="256M", help="message size, e.g. 64M, 1G")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    args = p.parse_args()
    size = (
        int(args.bytes[:-1]) * UNITS[args.bytes[-1]] if args.bytes[-1] in UNITS else int(args.bytes)
    )
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    n = dist.get_world_size()
    x = torch.ones(size // 4, dtype=torch.float32, device="cuda")
    for _ in range(args.warmup):
        dist.all_reduce(x)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(args.iters):
        dist.all_reduce(x)
    end.record()
    torch.cuda.synchronize()
    seconds = start.elapsed_time(end) / 1e3 / args.iters
    algbw = size / seconds / 1e9
    if dist.get_rank() == 0:
        print(f"raw all_reduce {size / 2**20:.0f} MiB on {n} GPUs: {seconds * 1e3:.3f} ms, "
              f"algbw {algbw:.2f} GB/s, busbw {algbw * 2 * (n - 1) / n:.2f} GB/s")  # fmt: skip
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
