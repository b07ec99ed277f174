"""Worker of multinode.py: DDP training throughput of one fixed MLP on synthetic data."""

import argparse
import json
import time

import torch
import torch.nn.functional as F
from torch import nn

import distrain

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=60)
p.add_argument("--warmup", type=int, default=10)
p.add_argument("--batch", type=int, default=64, help="per process")
p.add_argument("--out", required=True)
args = p.parse_args()

ctx = distrain.init(verbose=False, threads=1)  # one thread per process: one "device" each
torch.manual_seed(0)
model = ctx.prepare_model(
    nn.Sequential(
        nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10)
    )
)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(args.batch, 784).to(ctx.device)
y = torch.randint(0, 10, (args.batch,)).to(ctx.device)
for i in range(args.warmup + args.steps):
    if i == args.warmup:
        ctx.barrier()
        start = time.perf_counter()
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    ctx.step(opt)
ctx.barrier()
elapsed = time.perf_counter() - start
if ctx.is_main:
    params = sum(p.numel() for p in model.parameters())
    with open(args.out, "w") as f:
        json.dump(
            {
                "samples_per_s": args.steps * args.batch * ctx.world_size / elapsed,
                "step_ms": 1000 * elapsed / args.steps,
                "world": ctx.world_size,
                "nodes": ctx.num_nodes,
                "params": params,
            },
            f,
        )
ctx.shutdown()
