"""Elastic training job for test_node_loss.py and benchmarks/recovery/node_loss.py: a small MLP.

It checkpoints every 5 steps.

Every rank appends "host restart_count world_size time step" to BENCH_FIRST_STEP_FILE after
the first optimizer step of each start (the resumed step is the one after the checkpoint);
host is $BENCH_NODE.
"""

import argparse
import os
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

import distrain

p = argparse.ArgumentParser()
p.add_argument("--dir", required=True, help="checkpoint directory")
p.add_argument("--steps", type=int, default=100000)
p.add_argument("--sleep", type=float, default=0.05, help="seconds per step")
p.add_argument("--memory-every", type=int, default=0, help="memory-tier snapshots every K steps")
args = p.parse_args()

ctx = distrain.init(verbose=False)
g = torch.Generator().manual_seed(7)
x, y = torch.randn(4096, 32, generator=g), torch.randint(0, 4, (4096,), generator=g)
torch.manual_seed(0)
model = ctx.prepare_model(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)))
loader = ctx.prepare_loader(TensorDataset(x, y), batch_size=64 // ctx.world_size, seed=3)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
ckpt = ctx.checkpointer(args.dir, every_steps=5, memory_every_steps=args.memory_every)
step = start = ckpt.restore(model=model, optimizer=opt, loader=loader).step
while step < args.steps:
    for xb, yb in loader:
        loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad(set_to_none=True)
        ctx.backward(loss)
        ctx.step(opt)
        step += 1
        if step == start + 1:
            with open(os.environ["BENCH_FIRST_STEP_FILE"], "a") as f:
                f.write(
                    f"{os.environ.get('BENCH_NODE', '?')} "
                    f"{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')} "
                    f"{ctx.world_size} {time.time()} {step}\n"
                )
        time.sleep(args.sleep)
        ckpt.maybe_save(step)
        if step >= args.steps:
            break
ckpt.save(step)
ckpt.close()
ctx.shutdown()
if ctx.is_main:
    print(f"finished at step {step} on {ctx.world_size} rank(s)", flush=True)
