"""Elastic-membership test job: resumes from distrain checkpoints whatever the world size.

The global batch (--global-batch) is fixed, so the number of optimizer steps per epoch does
not depend on how many nodes are in the job.  Rank 0 appends one JSON line per (re)start to
--history (world size, the step it resumed from) and writes the final state to --out.
"""

import argparse
import json
import os
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

import distrain

p = argparse.ArgumentParser()
p.add_argument("--dir", required=True)
p.add_argument("--out", required=True)
p.add_argument("--history", required=True)
p.add_argument("--epochs", type=int, default=3)
p.add_argument("--global-batch", type=int, default=12)
p.add_argument("--samples", type=int, default=96)
p.add_argument("--step-sleep", type=float, default=0.5)
args = p.parse_args()

ctx = distrain.init(verbose=False)
g = torch.Generator().manual_seed(7)
x = torch.randn(args.samples, 16, generator=g)
y = (x[:, :4].sum(1) > 0).long()
torch.manual_seed(0)
model = ctx.prepare_model(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2)))
loader = ctx.prepare_loader(
    TensorDataset(x, y), batch_size=args.global_batch // ctx.world_size, seed=3
)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
ckpt = ctx.checkpointer(args.dir, every_steps=2)
step = ckpt.restore(model=model, optimizer=opt, loader=loader).step
if ctx.is_main:
    with open(args.history, "a") as f:
        f.write(
            json.dumps(
                {
                    "world": ctx.world_size,
                    "resumed_step": step,
                    "nodes": ctx.num_nodes,
                    "master": os.environ.get("MASTER_ADDR"),
                }
            )
            + "\n"
        )
for _epoch in range(loader.epoch, args.epochs):
    for xb, yb in loader:
        xb, yb = xb.to(ctx.device), yb.to(ctx.device)
        loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1
        time.sleep(args.step_sleep)  # slow enough for the test to change membership mid-run
        ckpt.maybe_save(step)
ckpt.save(step)
ckpt.close()
if ctx.is_main:
    with open(args.out, "w") as f:
        json.dump({"step": step, "world": ctx.world_size}, f)
    print(f"finished at step {step} on {ctx.world_size} rank(s)", flush=True)
ctx.shutdown()
