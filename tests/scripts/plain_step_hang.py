"""Steps with a bare `opt.step()` (the README's converted style); --hang-rank sleeps at --hang-step.

--unprepared: the optimizer updates a model that was never given to ctx.prepare_model.
"""

import argparse
import time

import torch

import distrain

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=100000)
p.add_argument("--hang-rank", type=int, default=-1)
p.add_argument("--hang-step", type=int, default=5)
p.add_argument("--unprepared", action="store_true")
args = p.parse_args()

ctx = distrain.init()
torch.manual_seed(0)
net = torch.nn.Linear(8, 1)
model = net if args.unprepared else ctx.prepare_model(net)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(1, args.steps + 1):
    if ctx.rank == args.hang_rank and step == args.hang_step:
        time.sleep(3600)  # a hung rank: not in a collective, no progress
    loss = model(torch.randn(4, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    ctx.log(loss=loss)
    if args.unprepared:
        ctx.barrier()  # keep the ranks in step without DDP
ctx.print(f"done: {ctx.steps} counted steps")
ctx.shutdown()
