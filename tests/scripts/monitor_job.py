"""A tiny job for the monitor tests: ranks 0 and 1 all-reduce every step, rank 2 (if any)
trains alone and slower (a straggler), every rank logs with ctx.log.  Exits after --seconds."""

import argparse
import time

import torch
import torch.distributed as dist

import distrain

p = argparse.ArgumentParser()
p.add_argument("--seconds", type=float, default=60.0)
p.add_argument("--sleep", type=float, default=0.05)
p.add_argument("--slow-factor", type=float, default=5.0)
args = p.parse_args()

ctx = distrain.init(verbose=False)
pair = dist.new_group([0, 1]) if ctx.world_size > 1 else None  # every rank must create it
deadline = time.monotonic() + args.seconds
step = 0
while time.monotonic() < deadline:
    step += 1
    time.sleep(args.sleep * (args.slow_factor if ctx.rank >= 2 else 1.0))
    x = torch.ones(1)
    if pair is not None and ctx.rank < 2:
        dist.all_reduce(x, group=pair)  # ranks 0 and 1 move in lockstep
    ctx.log(loss=torch.tensor(1.0 / step), samples=8, epoch=1 + step // 100)
ctx.shutdown()
